"""One rank of test_loader_mixture.py's torchrun resume-with-new-weights test:
shardkit.torch.TokenDataset.mixture over three token sources (source 0 does
not repeat, so the epoch ends when it runs out), equal steps, a
TokenDataLoader, an all_reduce every step.

first   weights argv[3]; 2 DataLoader workers. After CHECKPOINT_STEP steps
        every rank's state and delivered pieces are gathered (gloo) and rank 0
        writes checkpoint.json (the states must be equal: one state for every
        rank); the ranks then train on slowly until the test kills them.
resume  weights argv[3] (other ones: the change), on another world size; no
        workers. Loads checkpoint.json, runs to the end of the epoch, writes
        resumed-<rank>.json: its pieces, its step count, the window and
        last_resume.

A piece is (document, start, length, source, item). Every rank also counts
the pieces whose tokens are not the ones of that source's item (the corpus
names each token: source * 1e6 + item * 1000 + k, see make_source)."""

import datetime
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from mixture_common import batch_pieces
from shardkit.torch import TokenDataLoader, TokenDataset
from torchrun_common import (
    gather_states,
    leave_together,
    train_until_killed,
    write_checkpoint,
)

CHECKPOINT_STEP = 6
# Small packer buffer and mixture block: the new weights start within one
# buffer and one block of the last piece delivered before the change.
BUFFER = 64
BLOCK = 64


def dataset(root, weights):
    sources = [(root / f"tokens{s}.npy", root / f"offsets{s}.npy") for s in range(3)]
    return TokenDataset.mixture(
        sources,
        weights,
        by="tokens",
        repeat=[False, True, True],
        block=BLOCK,
        buffer=BUFFER,
        seed=9,
        seq_len=256,
        batch_size=2,
        num_threads=0,
    )


def pieces(batch, bad):
    """(document, start, length, source, item) of every piece of a batch; the
    pieces whose tokens are not their item's are counted in bad[0]."""
    out = []
    for d, st, ln, s, it, ok in batch_pieces(batch):
        bad[0] += not ok
        out.append([d, st, ln, s, it])
    return out


def main():
    root, mode = Path(sys.argv[1]), sys.argv[2]
    weights = [float(w) for w in sys.argv[3].split(",")]
    # A rank may wait long for a peer on a loaded machine (DataLoader workers
    # starting); a real hang still ends at the test's hard timeout.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = dataset(root, weights)
    bad = [0]
    if mode == "first":
        loader = TokenDataLoader(ds, num_workers=2)
        delivered = []

        def each_step():
            dist.all_reduce(torch.ones(1))  # a collective every step

        def checkpoint(_):
            gathered = gather_states(loader, {"pieces": delivered, "bad": bad[0]})
            if rank == 0:
                states = [g[0] for g in gathered]
                assert all(s == states[0] for s in states), "equal steps: one state"
                write_checkpoint(
                    root,
                    {
                        "state": states[0],
                        "world": world,
                        "delivered": [g[1] for g in gathered],
                    },
                )

        def batches():
            for batch in loader:
                delivered.extend(pieces(batch, bad))
                yield batch

        train_until_killed(batches(), CHECKPOINT_STEP, checkpoint, each_step=each_step)
    else:
        checkpoint = json.loads((root / "checkpoint.json").read_text())
        loader = TokenDataLoader(ds, num_workers=0)
        loader.load_state_dict(checkpoint["state"])
        ds.set_epoch(checkpoint["state"]["epoch"])  # the usual loop: keeps the resume
        resumed = ds.loader(0, 1)
        delivered, steps = [], 0
        for batch in loader:
            delivered += pieces(batch, bad)
            dist.all_reduce(torch.ones(1))  # a collective every step
            steps += 1
        out = {
            "pieces": delivered,
            "steps": steps,
            "bad": bad[0],
            "window": list(resumed.window()),
            "last_resume": list(resumed.last_resume),
        }
        (root / f"resumed-{rank}.json").write_text(json.dumps(out))
    leave_together()


if __name__ == "__main__":
    main()
