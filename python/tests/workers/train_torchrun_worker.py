"""One rank of the equal-steps torchrun tests (test_train_torchrun.py).

epochs    for each mode (pad, continuous, drop) and DataLoader worker count
          (0, 2): two epochs of TokenDataLoader with an all_reduce every step;
          every rank writes what it delivered, step by step, to
          epochs-<rank>.json.
first     pad mode, 2 workers: after CHECKPOINT_STEP steps the state (the same
          on every rank: checked with all_gather) and every rank's delivered
          pieces go to checkpoint.json; the ranks then train on slowly until the
          test kills them (SIGKILL).
resume    loads checkpoint.json on this world size and batch size (argv[3]),
          finishes the epoch and writes resumed-<rank>.json.
mismatch  rank world-1 is built with another seed: the first iteration must
          raise PlanMismatchError on every rank; each rank writes
          mismatch-<rank>.txt with the message.
Modes joined by commas run one after the other in the same launch (the test runs
"epochs,first": one start of torch and gloo on 4 processes for both).
"""

import datetime
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from shardkit.torch import TokenDataLoader, TokenDataset
from torchrun_common import (
    gather_states,
    leave_together,
    pieces,
    train_until_killed,
    write_checkpoint,
)

from shardkit import PlanMismatchError

CHECKPOINT_STEP = 4
SEQ_LEN = 256


def dataset(root, batch_size, **kw):
    return TokenDataset(
        root / "tokens.npy",
        root / "offsets.npy",
        seq_len=SEQ_LEN,
        batch_size=batch_size,
        seed=kw.pop("seed", 7),
        num_threads=0,
        **kw,
    )


def main():
    root, mode = Path(sys.argv[1]), sys.argv[2]
    # A rank may wait long for a peer on a loaded machine (a DataLoader worker
    # starting, a batch planned): 60 s once timed out in a full `make test`
    # while other builds ran. A real hang still ends at the test's hard timeout.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    for each in mode.split(","):
        run_mode(root, each)
    leave_together()


def run_mode(root, mode):
    rank, world = dist.get_rank(), dist.get_world_size()
    if mode == "epochs":
        out = {}
        for train_mode in ("pad", "continuous", "drop"):
            for workers in (0, 2):
                ds = dataset(root, 2, mode=train_mode)
                loader = TokenDataLoader(ds, num_workers=workers)
                runs = []
                for epoch in range(2):
                    ds.set_epoch(epoch)  # the usual loop; a no-op here, by the epoch rule
                    steps = []
                    for batch in loader:
                        real = batch["row_tokens"].sum().reshape(1).to(torch.float64)
                        dist.all_reduce(real)  # a collective every step
                        steps.append(
                            {"pieces": pieces(batch), "real": int(batch["row_tokens"].sum())}
                        )
                    runs.append(steps)
                out[f"{train_mode}/{workers}"] = runs
        (root / f"epochs-{rank}.json").write_text(json.dumps(out))
    elif mode == "first":
        ds = dataset(root, 2)
        loader = TokenDataLoader(ds, num_workers=2)

        def checkpoint(delivered):
            gathered = gather_states(loader, delivered)
            if rank == 0:
                states = [g[0] for g in gathered]
                assert all(s == states[0] for s in states), states
                write_checkpoint(
                    root, {"state": states[0], "delivered": sum((g[1] for g in gathered), [])}
                )

        train_until_killed(
            loader, CHECKPOINT_STEP, checkpoint, each_step=lambda: dist.all_reduce(torch.ones(1))
        )
    elif mode == "resume":
        batch_size = int(sys.argv[3])
        checkpoint = json.loads((root / "checkpoint.json").read_text())
        ds = dataset(root, batch_size)
        loader = TokenDataLoader(ds, num_workers=2)
        loader.load_state_dict(checkpoint["state"])
        ds.set_epoch(checkpoint["state"]["epoch"])  # the usual loop: keeps the resume
        delivered, steps = [], 0
        for batch in loader:
            delivered += pieces(batch)
            dist.all_reduce(torch.ones(1))
            steps += 1
        counts = [None] * world
        dist.all_gather_object(counts, steps)
        assert len(set(counts)) == 1, counts
        (root / f"resumed-{rank}.json").write_text(json.dumps(delivered))
    elif mode == "mismatch":
        ds = dataset(root, 2, seed=1 if rank == world - 1 else 7)
        loader = TokenDataLoader(ds, num_workers=0)
        start = time.time()
        try:
            for _ in loader:
                dist.all_reduce(torch.ones(1))
            message = "no error"
        except PlanMismatchError as e:
            message = "PlanMismatchError: " + str(e)
        (root / f"mismatch-{rank}.txt").write_text(f"{time.time() - start:.3f} {message}")
    else:
        raise ValueError(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
