"""The equal-steps loader against the per-rank one, for two builds of shardkit
side by side (e.g. main before a change, and the change), interleaved.

Each round starts one process per package (PYTHONPATH = that package's
directory) that runs every cell once: TokenLoader rank 0 of 8 over 50,000
lognormal documents (median 400, sigma 1.2, clipped to seq_len 4096), batch 8,
equal steps and per-rank, 0, 1 and 2 threads. Each cell keeps the best of the
rounds: tokens per CPU second of the process and per wall second.

    build/bench-venv/bin/python bench/loader_before_after.py BEFORE_DIR AFTER_DIR [--rounds 10]

BEFORE_DIR and AFTER_DIR each hold a built `shardkit` package (a copy of
python/ after `make build`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

import bench_util


def cells(docs):
    import numpy as np

    seq, batch, world = 4096, 8, 8
    rng = np.random.default_rng(1)
    lengths = np.clip(rng.lognormal(math.log(400), 1.2, docs).astype(np.int64), 1, seq)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = (np.arange(offsets[-1]) % 50_000).astype(np.int32)
    for threads in (0, 1, 2):
        for equal in (True, False):

            def epoch(threads=threads, equal=equal):
                options = dict(seq_len=seq, batch_size=batch, world_size=world)
                return bench_util.loader_epoch(
                    tokens, offsets, **options, num_threads=threads, equal_steps=equal
                )[0]

            real, c, w = bench_util.timed(epoch)
            print(json.dumps(dict(equal=equal, threads=threads, cpu=real / c, wall=real / w)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after", nargs="?", help="optional: without it, BEFORE is measured alone")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--docs", type=int, default=50_000)
    ap.add_argument("--cells", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cells:
        cells(args.docs)
        return
    # One package alone (no AFTER): its own equal-steps / per-rank figures.
    packages = {"before": args.before, "after": args.after} if args.after else {"this": args.before}
    best, loads = {}, []
    for _ in range(args.rounds):
        for name, path in packages.items():
            out = subprocess.run(
                [sys.executable, __file__, path, "--cells", "--docs", str(args.docs)],
                env={**os.environ, "PYTHONPATH": path},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for line in out.splitlines():
                c = json.loads(line)
                key = (name, c["equal"], c["threads"])
                cpu, wall = best.get(key, (0.0, 0.0))
                best[key] = (max(cpu, c["cpu"]), max(wall, c["wall"]))
        loads.append(os.getloadavg()[0])
    print(
        f"{args.rounds} rounds, load average {min(loads):.1f}-{max(loads):.1f} (CPU s of the "
        "process and its threads, bench_util); "
        "M tokens/s, equal steps / per-rank (ratio)"
    )
    print(f"{'threads':>7} {'build':>7} {'per CPU s':>26} {'per wall s':>26}")
    for threads in (0, 1, 2):
        for name in packages:
            e, p = best[(name, True, threads)], best[(name, False, threads)]
            cpu = f"{e[0] / 1e6:.1f} / {p[0] / 1e6:.1f} ({e[0] / p[0]:.2f})"
            wall = f"{e[1] / 1e6:.1f} / {p[1] / 1e6:.1f} ({e[1] / p[1]:.2f})"
            print(f"{threads:7d} {name:>7} {cpu:>26} {wall:>26}")


if __name__ == "__main__":
    main()
