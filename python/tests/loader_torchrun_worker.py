"""One rank of the kill-and-resume test (test_loader.py), run under torchrun.

first:  4 ranks; after step 3 every rank's state and delivered pieces are
        gathered (gloo) and rank 0 writes checkpoint.json; then the ranks keep
        training slowly until the test kills them.
resume: 3 ranks load the four states (merged), finish the epoch and write the
        pieces they delivered to resumed-<rank>.json.
"""

import json
import os
import sys
import time
from pathlib import Path

import torch.distributed as dist

from shardkit import TokenLoader

CHECKPOINT_STEP = 3


def pieces(batch):
    return [
        list(p)
        for p in zip(
            batch["documents"].tolist(), batch["starts"].tolist(), batch["lengths"].tolist()
        )
    ]


def main():
    root, mode = Path(sys.argv[1]), sys.argv[2]
    parent = os.getppid()  # the torchrun agent; when it is killed, stop too
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # rank and world_size come from torch.distributed (shardkit.rank_and_world).
    loader = TokenLoader(
        root / "tokens.npy",
        root / "offsets.npy",
        seq_len=64,
        batch_size=2,
        seed=7,
        buffer=16,
        rank=None,
        world_size=None,
    )
    assert (loader.rank, loader.world_size) == (rank, world)
    if mode == "first":
        delivered = []
        for step, batch in enumerate(loader, start=1):
            delivered += pieces(batch)
            if step == CHECKPOINT_STEP:
                gathered = [None] * world
                dist.all_gather_object(gathered, (loader.state_dict(), delivered))
                if rank == 0:
                    tmp = root / "checkpoint.tmp"
                    tmp.write_text(
                        json.dumps(
                            {
                                "states": [g[0] for g in gathered],
                                "delivered": sum((g[1] for g in gathered), []),
                            }
                        )
                    )
                    tmp.rename(root / "checkpoint.json")
            if step >= CHECKPOINT_STEP:
                time.sleep(0.05)  # training on past the checkpoint until killed
            if os.getppid() != parent:
                os._exit(1)
        for _ in range(300):  # the epoch ended before the kill: wait for it, at most 30 s
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(0.1)
    else:
        checkpoint = json.loads((root / "checkpoint.json").read_text())
        loader.load_state_dict(checkpoint["states"])
        delivered = []
        for batch in loader:
            delivered += pieces(batch)
        (root / f"resumed-{rank}.json").write_text(json.dumps(delivered))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
