"""One rank's shuffled epoch, side by side: shardkit vs torch's DistributedSampler vs Grain's
IndexSampler, on the same (N, W, rank), in one run.

Like for like, in two pairs: the array paths (shardkit's Shard.numpy chunks against torch's
own array path, torch.randperm(n)[rank::world] materialised, one thread) and the drop-in
samplers that hand out Python ints (shardkit.torch.DistributedSampler against
torch.utils.data.DistributedSampler); Grain's IndexSampler on a prefix. Each side runs in
its own subprocess so that its peak memory is its own; the figure reported is the peak RSS
above the process's RSS after imports. CPU seconds (bench_util.cpu_seconds) and wall seconds,
the sides interleaved round by round, the best of --rounds kept, with the load average;
the memcpy baseline (numpy copyto) of the rank's int64 indices beside. Usage:

    PYTHONPATH=python .venv/bin/python bench/shuffle_epoch.py [--n 100000000] [--world 8]
        [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import bench_util


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class Clock:
    """A side's wall and CPU seconds and its extra resident memory, from here."""

    def __init__(self):
        self.base = rss_mb()
        self.t0, self.c0 = time.perf_counter(), bench_util.cpu_seconds()

    def elapsed(self):
        return time.perf_counter() - self.t0

    def result(self, indices, first):
        return dict(
            seconds=self.elapsed(),
            cpu=bench_util.cpu_seconds() - self.c0,
            indices=indices,
            first_s=first,
            extra_mb=rss_mb() - self.base,
        )


def time_sampler(sampler_class, n, world, rank):
    clock = Clock()
    it = iter(sampler_class(range(n), num_replicas=world, rank=rank, shuffle=True))
    next(it)
    first = clock.elapsed()
    count = 1 + sum(1 for _ in it)
    return clock.result(count, first)


def side_torch_array(n, world, rank, limit):
    import torch

    torch.set_num_threads(1)
    clock = Clock()
    g = torch.Generator()
    g.manual_seed(0)
    shard = torch.randperm(n, generator=g)[rank::world].contiguous()
    first = clock.elapsed()
    return clock.result(len(shard), first)


def side_torch(n, world, rank, limit):
    import torch.utils.data as tud

    return time_sampler(tud.DistributedSampler, n, world, rank)


def side_shardkit_sampler(n, world, rank, limit):
    from shardkit.torch import DistributedSampler

    return time_sampler(DistributedSampler, n, world, rank)


def side_shardkit_numpy(n, world, rank, limit):
    import numpy

    import shardkit

    clock = Clock()
    shard = shardkit.ShardPlan(n, world, remainder="pad", shuffle=True).shard(rank)
    shard.numpy(0, 1)
    first = clock.elapsed()
    chunk = 1 << 16
    buffer = numpy.empty(chunk, dtype=numpy.int64)
    checksum = 0
    for start in range(0, len(shard), chunk):
        stop = min(len(shard), start + chunk)
        block = shard.numpy(start, stop, out=buffer[: stop - start])
        checksum ^= int(block[-1])
    return clock.result(len(shard), first)


def side_grain(n, world, rank, limit):
    import grain.python as gp

    clock = Clock()
    sampler = gp.IndexSampler(
        n, shard_options=gp.ShardOptions(rank, world), shuffle=True, num_epochs=1, seed=0
    )
    sampler[rank]
    first = clock.elapsed()
    count = min(limit, (n - rank + world - 1) // world)
    for k in range(count):
        sampler[rank + k * world].record_key
    return clock.result(count, first)


SIDES = {
    "shardkit (numpy chunks)": side_shardkit_numpy,
    "torch randperm(n)[r::W] (array)": side_torch_array,
    "shardkit.torch.DistributedSampler": side_shardkit_sampler,
    "torch DistributedSampler": side_torch,
    "grain IndexSampler": side_grain,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000_000)
    bench_util.add_job_arguments(parser, "--world")
    parser.add_argument("--rank", type=int, default=3)
    parser.add_argument(
        "--grain-limit",
        type=int,
        default=100_000,
        help="Grain yields one record per Python call; time this many",
    )
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        result = SIDES[args.side](args.n, args.world, args.rank, args.grain_limit)
        print(json.dumps(result))
        return

    print(
        f"one rank's shuffled epoch: N={args.n:,} W={args.world} rank={args.rank}; "
        f"{bench_util.machine()}"
    )
    runs = {name: [] for name in SIDES}
    for _ in range(args.rounds):
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
            runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    results = {}
    for name, rs in runs.items():
        if rs:
            results[name] = {k: min(r[k] for r in rs) for k in rs[0]}
    print(f"best of {args.rounds} interleaved rounds ({bench_util.load_average()} at the end)")
    print(
        f"{'side':36} {'indices':>12} {'CPU s':>8} {'wall s':>8} {'indices/CPU s':>13} "
        f"{'first index':>12} {'extra peak RSS':>15}"
    )
    for name, r in results.items():
        note = "" if r["indices"] == results["shardkit (numpy chunks)"]["indices"] else " (partial)"
        print(
            f"{name:36} {r['indices']:>12,} {r['cpu']:>8.3f} {r['seconds']:>8.3f} "
            f"{r['indices'] / r['cpu']:>13.3g} {r['first_s'] * 1e3:>10.2f}ms "
            f"{r['extra_mb']:>12.1f} MB{note}"
        )

    def rate(name):
        return results[name]["indices"] / results[name]["cpu"]

    for ours, peer in (
        ("shardkit (numpy chunks)", "torch randperm(n)[r::W] (array)"),
        ("shardkit.torch.DistributedSampler", "torch DistributedSampler"),
        ("shardkit (numpy chunks)", "grain IndexSampler"),
    ):
        if ours in results and peer in results:
            print(f"like for like: {ours} is {rate(ours) / rate(peer):,.1f}x {peer} per CPU s")
    line, _, _ = bench_util.memcpy_line(8, "indices", 8 << 16)
    print(line)


if __name__ == "__main__":
    main()
