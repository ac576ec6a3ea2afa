"""One rank of test_loader_mixture.py's torchrun test: an equal-steps
TokenLoader.mixture over three token sources (source 0 does not repeat, so
the epoch ends when it runs out), an all_reduce every step; every rank writes
its pieces and step count to rank-<rank>.json. Ranks leave together (barrier,
then destroy_process_group)."""

import datetime
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import shardkit


def main():
    root = Path(sys.argv[1])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    sources = [(root / f"tokens{s}.npy", root / f"offsets{s}.npy") for s in range(3)]
    loader = shardkit.TokenLoader.mixture(
        sources,
        [0.2, 0.5, 0.3],
        by="tokens",
        repeat=[False, True, True],
        block=10,
        seed=9,
        seq_len=256,
        batch_size=2,
        num_threads=1,
    )
    pieces, steps = [], 0
    for batch in loader:
        real = torch.tensor([float(batch["row_tokens"].sum())])
        dist.all_reduce(real)  # a collective every step
        steps += 1
        pieces += [
            list(p)
            for p in zip(
                batch["documents"].tolist(),
                batch["starts"].tolist(),
                batch["lengths"].tolist(),
                batch["sources"].tolist(),
                batch["items"].tolist(),
            )
        ]
    out = {"steps": steps, "pieces": pieces, "samples": loader.samples_per_epoch}
    (root / f"rank-{rank}.json").write_text(json.dumps(out))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
