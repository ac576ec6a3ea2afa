"""One rank of the kill-and-resume test (test_loader.py), run under torchrun.

first:  4 ranks; after step 3 every rank's state and delivered pieces are
        gathered (gloo) and rank 0 writes checkpoint.json; then the ranks keep
        training slowly until the test kills them.
resume: 3 ranks load the four states (merged), finish the epoch and write the
        pieces they delivered to resumed-<rank>.json.
"""

import json
import sys
from pathlib import Path

import torch.distributed as dist
from torchrun_common import (
    gather_states,
    leave_together,
    pieces,
    train_until_killed,
    write_checkpoint,
)

from shardkit import TokenLoader

CHECKPOINT_STEP = 3


def main():
    root, mode = Path(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # rank and world_size left to their default: torch.distributed's (shardkit.rank_and_world).
    loader = TokenLoader(
        root / "tokens.npy", root / "offsets.npy", seq_len=64, batch_size=2, seed=7, buffer=16
    )
    assert (loader.rank, loader.world_size) == (rank, world)
    if mode == "first":

        def checkpoint(delivered):
            gathered = gather_states(loader, delivered)
            if rank == 0:
                write_checkpoint(
                    root,
                    {
                        "states": [g[0] for g in gathered],
                        "delivered": sum((g[1] for g in gathered), []),
                    },
                )

        train_until_killed(loader, CHECKPOINT_STEP, checkpoint)
    else:
        checkpoint = json.loads((root / "checkpoint.json").read_text())
        loader.load_state_dict(checkpoint["states"])
        delivered = []
        for batch in loader:
            delivered += pieces(batch)
        (root / f"resumed-{rank}.json").write_text(json.dumps(delivered))
    leave_together()


if __name__ == "__main__":
    main()
