"""One rank of test_megatron_torchrun.py: a Megatron .bin/.idx corpus (written by
megatron-core's IndexedDatasetBuilder) under torchrun, gloo on loopback.

whole         TokenDataLoader (2 DataLoader workers) over the prefix, then the same
              epoch through shardkit.grain (a Grain .map pipeline); an all_reduce every
              step; writes whole-<rank>.json: per step, every piece with its tokens.
grain-first   the Grain pipeline; after CHECKPOINT_STEP steps every rank saves its
              iterator with Grain's CheckpointHandler (grain-ckpt/rank-<r>/) and rank 0
              writes checkpoint.json (the pieces delivered so far); then it trains on
              until the test kills it (SIGKILL).
grain-resume  a fresh Grain pipeline restored by the CheckpointHandler, to the end of
              the epoch; writes resumed-<rank>.json like whole.
Modes joined by commas run one after the other in the same launch (the test runs
"whole,grain-first": one start of torch and gloo for both).
"""

import datetime
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from etils import epath
from grain.checkpoint import CheckpointHandler
from shardkit.grain import TokenDataset as GrainTokenDataset
from shardkit.torch import TokenDataLoader, TokenDataset
from torchrun_common import leave_together, train_until_killed, write_checkpoint

CHECKPOINT_STEP = 3
OPTIONS = dict(seq_len=128, batch_size=2, seed=5, num_threads=1)


def with_tokens(batch):
    """Every piece of a batch as [document, start, length, its tokens in the batch]:
    the pieces of a row lie back to back from position 0, in order."""
    out, at = [], {}
    ids = batch["input_ids"]
    for d, s, n, r in zip(*(batch[k].tolist() for k in ("documents", "starts", "lengths", "rows"))):
        p = at.get(r, 0)
        out.append([d, s, n, ids[r][p : p + n].tolist()])
        at[r] = p + n
    return out


def grain_pipeline(prefix):
    # A Grain transformation over shardkit's batches (the dicts of numpy arrays).
    return GrainTokenDataset(prefix, **OPTIONS).map(lambda b: {**b, "tokens": b["input_ids"]})


def run(batches):
    steps = []
    for batch in batches:
        dist.all_reduce(torch.ones(1))  # a collective every step: equal steps or a hang
        steps.append(with_tokens(batch))
    return steps


def run_mode(mode, root, prefix, rank, ckpt):
    if mode == "whole":
        loader = TokenDataLoader(TokenDataset(prefix, **OPTIONS), num_workers=2)
        out = {"torch": run(loader), "grain": run(iter(grain_pipeline(prefix)))}
        (root / f"whole-{rank}.json").write_text(json.dumps(out))
    elif mode == "grain-first":
        it = iter(grain_pipeline(prefix))

        def checkpoint(delivered):
            ckpt.mkdir(parents=True)
            CheckpointHandler().save(ckpt, it)
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, (it.get_state(), delivered))
            if rank == 0:
                states = [g[0] for g in gathered]
                assert all(s == states[0] for s in states), states  # the same on every rank
                write_checkpoint(root, {"delivered": sum((g[1] for g in gathered), [])})

        train_until_killed(it, CHECKPOINT_STEP, checkpoint)
    elif mode == "grain-resume":
        it = CheckpointHandler().restore(ckpt, iter(grain_pipeline(prefix)))
        (root / f"resumed-{rank}.json").write_text(json.dumps(run(it)))
    else:
        raise ValueError(f"unknown mode {mode!r}")


def main():
    root, mode = Path(sys.argv[1]), sys.argv[2]
    prefix = str(root / "corpus")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank = dist.get_rank()
    ckpt = epath.Path(root / "grain-ckpt" / f"rank-{rank}")
    for each in mode.split(","):
        run_mode(each, root, prefix, rank, ckpt)
    leave_together()


if __name__ == "__main__":
    main()
