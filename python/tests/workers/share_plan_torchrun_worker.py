"""One rank of the shared host plan test (test_share_plan.py), run under
torchrun: the ranks read two epochs through TokenDataLoader with
share_plan=True (one planner per host: LOCAL_RANK 0) and without it, with 0
and 2 DataLoader workers, a collective every step; each rank writes the pieces
of both runs and the plan files it saw to shared-<rank>.json."""

import datetime
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from shardkit.torch import TokenDataLoader, TokenDataset
from torchrun_common import leave_together, pieces


def run(root, share, workers):
    ds = TokenDataset(
        root / "tokens.npy",
        root / "offsets.npy",
        seq_len=128,
        batch_size=2,
        seed=3,
        buffer=32,
        num_threads=0,
        share_plan=share,
    )
    loader = TokenDataLoader(ds, num_workers=workers)
    epochs, files = [], set()
    for epoch in range(2):
        ds.set_epoch(epoch)
        steps = []
        for batch in loader:
            dist.all_reduce(torch.ones(1))  # a collective every step
            steps.append(pieces(batch))
            files.update(p.name for p in Path(os.environ["SHARDKIT_SHARE_PLAN_DIR"]).iterdir())
        epochs.append(steps)
    return epochs, sorted(files)


def main():
    root = Path(sys.argv[1])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank = dist.get_rank()
    out = {}
    for workers in (0, 2):
        shared, files = run(root, True, workers)
        plain, _ = run(root, False, workers)
        out[str(workers)] = {"shared": shared, "plain": plain, "files": files}
    (root / f"shared-{rank}.json").write_text(json.dumps(out))
    leave_together()


if __name__ == "__main__":
    main()
