"""One epoch of shardkit.TokenLoader over a single document of N tokens.

A document split into many pieces once made every batch copy all of its
pending pieces into the state snapshot (quadratic: 1M/2M/4M tokens at
seq_len 64 took 17/39/258 s, issue 13). The pieces are now one run in the
packer's state; this prints the epoch time (wall and CPU s, bench_util) and the state size
per N, with the load average, so the growth is visible (linear now).

    PYTHONPATH=python .venv/bin/python bench/loader_long_document.py 1e6 2e6 4e6 16e6
"""

import json
import sys

import bench_util
import numpy as np


def main(sizes):
    for n in sizes:
        tokens = (np.arange(n) % 30000).astype(np.int32)
        offsets = np.array([0, n], dtype=np.int64)

        def epoch(tokens=tokens, offsets=offsets):
            loader = bench_util.one_rank_loader(tokens, offsets, seq_len=64, batch_size=8)
            return loader, sum(1 for _ in loader)

        (loader, batches), cpu, wall = bench_util.timed(epoch)
        state = len(json.dumps(loader.state_dict()))
        print(
            f"{n:>12,} tokens: {batches:>9,} batches in {wall:8.3f} s wall, {cpu:8.3f} CPU s, "
            f"state {state} bytes ({bench_util.load_average()})"
        )


if __name__ == "__main__":
    main([int(float(a)) for a in sys.argv[1:]] or [10**6, 2 * 10**6, 4 * 10**6])
