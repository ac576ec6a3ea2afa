"""One rank of test_vlm_torchrun.py: a tiny vision-language model (a conv
image encoder + a GRU decoder, CPU, DistributedDataParallel over gloo) trained
on image-text samples from real encoded images, stored as tar shards
(argv[2] == "tar") or as a datasets dataset ("hf"), through
ConstantLengthDataset with the images decoded on C++ threads.

first   after CHECKPOINT_STEP steps, every rank's loader state and delivered
        samples are gathered and rank 0 writes the model (model.pt) and then
        checkpoint.json (the states must be equal: one state for every rank);
        the ranks then train on slowly until the test kills them.
resume  on another world size: loads checkpoint.json and model.pt, trains to
        the end of the epoch, writes resumed-<rank>.json (its samples, its
        step count, the last loss)."""

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
        return TarImageText(sorted(str(p) for p in (root / "shards").glob("*.tar")))
    return HFImageText(str(root / "hf"))


def dataset(root, kind, rank, world):
    return ConstantLengthDataset(
        source(root, kind),
        seq_len=64,
        batch_size=2,
        rank=rank,
        world_size=world,
        max_images_per_pack=4,
        seed=3,
        image_decoder=ImageDecoder(size=SIZE, threads=1),
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
    root, kind, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = TinyVLM()
    ds = dataset(root, kind, rank, world)
    if mode == "resume":
        checkpoint = json.loads((root / "checkpoint.json").read_text())
        model.load_state_dict(torch.load(root / "model.pt"))
        ds.load_state_dict(checkpoint["state"])
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    delivered, steps, loss = [], 0, None
    for batch in ds:
        loss = step(ddp, opt, batch)
        delivered += batch["documents"].tolist()
        steps += 1
        if mode == "first" and steps == CHECKPOINT_STEP:
            gathered = [None] * world
            dist.all_gather_object(gathered, (ds.state_dict(), delivered))
            if rank == 0:
                states = [g[0] for g in gathered]
                assert all(s == states[0] for s in states), "equal steps: one state"
                tmp = root / "model.tmp"
                torch.save(model.state_dict(), tmp)
                os.replace(tmp, root / "model.pt")
                write_checkpoint(
                    root,
                    {"state": states[0], "world": world, "delivered": [g[1] for g in gathered]},
                )
        if mode == "first" and steps >= CHECKPOINT_STEP:
            time.sleep(0.2)  # training on past the checkpoint until killed
            if os.getppid() != AGENT:
                os._exit(1)
    if mode == "first":  # the epoch ended before the kill: wait for it
        for _ in range(300):
            if os.getppid() != AGENT:
                os._exit(1)
            time.sleep(0.1)
    out = {"documents": delivered, "steps": steps, "loss": loss}
    (root / f"resumed-{rank}.json").write_text(json.dumps(out))
    leave_together()


if __name__ == "__main__":
    main()
