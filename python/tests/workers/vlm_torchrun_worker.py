"""One rank of test_vlm_torchrun.py: a tiny vision-language model (a conv
image encoder + a GRU decoder, CPU, DistributedDataParallel over gloo) trained
on image-text samples from real encoded images, through ConstantLengthDataset
with the images decoded on C++ threads. One launch runs both stores side by
side, in lockstep (one model and one dataset each): the tar shards ("tar") and
the datasets dataset ("hf"), so that the 4-rank kill and the 3-rank resume
start torch, gloo and the workers once for both.

first   after CHECKPOINT_STEP steps of every store, every rank's loader states
        and delivered samples are gathered and rank 0 writes the models
        (model-<store>.pt) and then checkpoint.json ({store: {state, world,
        delivered}}; the states of a store must be equal: one state for every
        rank); the ranks then train on slowly until the test kills them.
resume  on another world size: loads checkpoint.json and the models, trains
        every store to the end of its epoch, writes resumed-<rank>.json
        ({store: {documents, steps, loss}})."""

import datetime
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from shardkit.image_sources import HFImageText, TarImageText
from shardkit.images import ImageDecoder
from shardkit.torch import ConstantLengthDataset
from torch.nn.parallel import DistributedDataParallel
from torchrun_common import AGENT, leave_together, write_checkpoint
from vlm_common import PACKING, tar_shards

CHECKPOINT_STEP = 3
VOCAB = 256
SIZE = (32, 32)


class TinyVLM(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Conv2d(3, 8, 4, 4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, d)
        )
        self.embed = nn.Embedding(VOCAB, d)
        self.decoder = nn.GRU(d, d, batch_first=True)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, input_ids, pixel_values, image_sample):
        x = self.embed(input_ids)
        # Every image's features join its row (image_sample[:, 0]); a batch
        # without images still runs the encoder, on nothing, so that every
        # rank's gradients have the same parameters.
        feats = self.encoder(pixel_values.permute(0, 3, 1, 2).float() / 255)
        per_row = torch.zeros(x.shape[0], x.shape[2]).index_add(0, image_sample[:, 0], feats)
        h, _ = self.decoder(x + per_row[:, None, :])
        return self.head(h)


def source(root, kind):
    if kind == "tar":
        return TarImageText(tar_shards(root))
    return HFImageText(str(root / "hf"))


def dataset(root, kind, rank, world):
    return ConstantLengthDataset(
        source(root, kind),
        rank=rank,
        world_size=world,
        image_decoder=ImageDecoder(size=SIZE, threads=1),
        **PACKING,
    )


def step(model, opt, batch):
    logits = model(batch["input_ids"], batch["pixel_values"], batch["image_sample"])
    loss = nn.functional.cross_entropy(
        logits.reshape(-1, VOCAB), batch["labels"].reshape(-1), ignore_index=-100
    )
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert batch["pixel_values"].shape[1:] == (*SIZE, 3)
    return float(loss)


def main():
    root, mode = Path(sys.argv[1]), sys.argv[2]
    kinds = sys.argv[3].split(",")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    checkpoint = json.loads((root / "checkpoint.json").read_text()) if mode == "resume" else None
    runs = {}
    for kind in kinds:
        torch.manual_seed(0)
        model = TinyVLM()
        ds = dataset(root, kind, rank, world)
        if mode == "resume":
            model.load_state_dict(torch.load(root / f"model-{kind}.pt"))
            ds.load_state_dict(checkpoint[kind]["state"])
        ddp = DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        runs[kind] = {"model": model, "ddp": ddp, "opt": opt, "ds": ds, "it": iter(ds)}
        runs[kind].update(delivered=[], steps=0, loss=None, done=False)
    # Lockstep: one step of every store that has not ended, in the same order
    # on every rank (equal steps: a store ends on every rank at the same step).
    while not all(r["done"] for r in runs.values()):
        for r in runs.values():
            if r["done"]:
                continue
            batch = next(r["it"], None)
            if batch is None:
                r["done"] = True
                continue
            r["loss"] = step(r["ddp"], r["opt"], batch)
            r["delivered"] += batch["documents"].tolist()
            r["steps"] += 1
        steps = min(r["steps"] for r in runs.values())
        if (
            mode == "first"
            and steps == CHECKPOINT_STEP
            and not any(r["done"] for r in runs.values())
        ):
            gathered = [None] * world
            mine = {k: (r["ds"].state_dict(), r["delivered"]) for k, r in runs.items()}
            dist.all_gather_object(gathered, mine)
            if rank == 0:
                written = {}
                for kind, r in runs.items():
                    states = [g[kind][0] for g in gathered]
                    assert all(s == states[0] for s in states), "equal steps: one state"
                    tmp = root / "model.tmp"
                    torch.save(r["model"].state_dict(), tmp)
                    os.replace(tmp, root / f"model-{kind}.pt")
                    written[kind] = {
                        "state": states[0],
                        "world": world,
                        "delivered": [g[kind][1] for g in gathered],
                    }
                write_checkpoint(root, written)
        if mode == "first" and steps >= CHECKPOINT_STEP:
            time.sleep(0.2)  # training on past the checkpoint until killed
            if os.getppid() != AGENT:
                os._exit(1)
    if mode == "first":  # the epochs ended before the kill: wait for it
        for _ in range(300):
            if os.getppid() != AGENT:
                os._exit(1)
            time.sleep(0.1)
    out = {
        k: {"documents": r["delivered"], "steps": r["steps"], "loss": r["loss"]}
        for k, r in runs.items()
    }
    (root / f"resumed-{rank}.json").write_text(json.dumps(out))
    leave_together()


if __name__ == "__main__":
    main()
