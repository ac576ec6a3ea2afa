"""One rank's shuffled epoch, side by side: shardkit vs torch's DistributedSampler vs Grain's
IndexSampler, on the same (N, W, rank), in one run.

Each side runs in its own subprocess so that its peak memory is its own; the figure
reported is the peak RSS above the process's RSS after imports. Usage:

    PYTHONPATH=python .venv/bin/python bench/shuffle_epoch.py [--n 100000000] [--world 8]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def time_sampler(sampler_class, n, world, rank):
    base = rss_mb()
    t0 = time.perf_counter()
    it = iter(sampler_class(range(n), num_replicas=world, rank=rank, shuffle=True))
    next(it)
    first = time.perf_counter() - t0
    count = 1 + sum(1 for _ in it)
    return dict(
        seconds=time.perf_counter() - t0, indices=count, first_s=first, extra_mb=rss_mb() - base
    )


def side_torch(n, world, rank, limit):
    import torch.utils.data as tud

    return time_sampler(tud.DistributedSampler, n, world, rank)


def side_shardkit_sampler(n, world, rank, limit):
    from shardkit.torch import DistributedSampler

    return time_sampler(DistributedSampler, n, world, rank)


def side_shardkit_numpy(n, world, rank, limit):
    import numpy

    import shardkit

    base = rss_mb()
    t0 = time.perf_counter()
    shard = shardkit.ShardPlan(n, world, remainder="pad", shuffle=True).shard(rank)
    shard.numpy(0, 1)
    first = time.perf_counter() - t0
    chunk = 1 << 16
    buffer = numpy.empty(chunk, dtype=numpy.int64)
    checksum = 0
    for start in range(0, len(shard), chunk):
        stop = min(len(shard), start + chunk)
        block = shard.numpy(start, stop, out=buffer[: stop - start])
        checksum ^= int(block[-1])
    return dict(
        seconds=time.perf_counter() - t0,
        indices=len(shard),
        first_s=first,
        extra_mb=rss_mb() - base,
    )


def side_grain(n, world, rank, limit):
    import grain.python as gp

    base = rss_mb()
    t0 = time.perf_counter()
    sampler = gp.IndexSampler(
        n, shard_options=gp.ShardOptions(rank, world), shuffle=True, num_epochs=1, seed=0
    )
    sampler[rank]
    first = time.perf_counter() - t0
    count = min(limit, (n - rank + world - 1) // world)
    for k in range(count):
        sampler[rank + k * world].record_key
    return dict(
        seconds=time.perf_counter() - t0, indices=count, first_s=first, extra_mb=rss_mb() - base
    )


SIDES = {
    "shardkit (numpy chunks)": side_shardkit_numpy,
    "shardkit.torch.DistributedSampler": side_shardkit_sampler,
    "torch DistributedSampler": side_torch,
    "grain IndexSampler": side_grain,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000_000)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--rank", type=int, default=3)
    parser.add_argument(
        "--grain-limit",
        type=int,
        default=100_000,
        help="Grain yields one record per Python call; time this many",
    )
    parser.add_argument("--side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        result = SIDES[args.side](args.n, args.world, args.rank, args.grain_limit)
        print(json.dumps(result))
        return

    print(
        f"one rank's shuffled epoch: N={args.n:,} W={args.world} rank={args.rank}; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"python {platform.python_version()}"
    )
    results = {}
    for name in SIDES:
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--side",
                name,
                "--n",
                str(args.n),
                "--world",
                str(args.world),
                "--rank",
                str(args.rank),
                "--grain-limit",
                str(args.grain_limit),
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            print(f"  {name}: not run ({proc.stderr.strip().splitlines()[-1]})")
            continue
        results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = results["shardkit (numpy chunks)"]
    ours_rate = ours["indices"] / ours["seconds"]
    print(
        f"{'side':36} {'indices':>12} {'seconds':>9} {'indices/s':>12} "
        f"{'first index':>12} {'extra peak RSS':>15} {'shardkit is':>12}"
    )
    for name, r in results.items():
        rate = r["indices"] / r["seconds"]
        note = "" if r["indices"] == ours["indices"] else " (partial)"
        print(
            f"{name:36} {r['indices']:>12,} {r['seconds']:>9.3f} {rate:>12.3g} "
            f"{r['first_s'] * 1e3:>10.2f}ms {r['extra_mb']:>12.1f} MB "
            f"{ours_rate / rate:>10.1f}x{note}"
        )


if __name__ == "__main__":
    main()
