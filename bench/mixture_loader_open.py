"""Opening a mixture loader: TokenLoader.mixture over three sources, open + first batch.

For each size N (the sources' documents together; the loader's default samples per epoch is
their sum, so the first epoch's window holds N samples) the script writes three synthetic npy
sources (PREFIX.tokens.npy uint16 + PREFIX.offsets.npy int64, the pair shardkit's TokenWriter
writes; numpy writes them here because one Python call per document would take minutes at
1e8) into a temporary directory, then in a fresh subprocess per run measures
``TokenLoader.mixture(...)`` plus ``next(iter(loader))`` (bench_util.timed): CPU seconds of
the process (all threads), wall seconds, the peak RSS above the RSS before the
call (mapped file pages that the loader touches count: clean page cache, mostly the
sampled documents' token pages with the kernel's fault-around), the anonymous RSS added
(allocations) and the load average, with equal steps (the Python default) and per rank. Minimum of
--repeats runs per size, runs of the sizes interleaved. With ``--before DIR`` (a directory
holding another build's ``shardkit`` package, e.g. a copy of python/ made at an earlier
commit) every run is made with that build too, interleaved with this one's on the same files
(rows ``before`` / ``after``).

    PYTHONPATH=python .venv/bin/python bench/mixture_loader_open.py \
        [--sizes 1000000,10000000,100000000] [--repeats 2] [--dir /tmp] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile


def write_sources(directory: str, total: int) -> list:
    import numpy as np

    rng = np.random.default_rng(0)
    prefixes = []
    sizes = [total // 2, total // 3, total - total // 2 - total // 3]
    for k, n in enumerate(sizes):
        prefix = os.path.join(directory, f"s{k}")
        lengths = rng.integers(1, 16, size=n, dtype=np.int64)  # mean 8 tokens
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        del lengths
        tokens = np.lib.format.open_memmap(
            prefix + ".tokens.npy", mode="w+", dtype=np.uint16, shape=(int(offsets[-1]),)
        )
        step = 1 << 26
        for start in range(0, tokens.shape[0], step):
            stop = min(start + step, tokens.shape[0])
            tokens[start:stop] = (np.arange(start, stop) % 50000).astype(np.uint16)
        tokens.flush()
        del tokens
        np.save(prefix + ".offsets.npy", offsets)
        prefixes.append(prefix)
    return prefixes


def one_run(prefixes: list, equal_steps: bool) -> dict:
    import bench_util

    import shardkit

    sources = [(p + ".tokens.npy", p + ".offsets.npy") for p in prefixes]

    def status_mb(key: str) -> float:
        # VmHWM, not ru_maxrss: the latter is inherited from the parent across
        # fork + exec (the parent wrote the sources).
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
        raise RuntimeError(key)

    def rss_now_mb() -> float:
        return status_mb("VmRSS")

    before = rss_now_mb()
    anon0 = status_mb("RssAnon")

    def open_and_first_batch():
        loader = shardkit.TokenLoader.mixture(
            sources,
            [0.5, 0.3, 0.2],
            seq_len=2048,
            batch_size=8,
            seed=1,
            token_dtype="uint16",
            equal_steps=equal_steps,
        )
        return loader, next(iter(loader))

    (loader, batch), cpu, wall = bench_util.timed(open_and_first_batch)
    peak = status_mb("VmHWM")
    return {
        "samples": loader.samples_per_epoch,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "peak_rss_delta_mb": round(peak - before, 1),
        "anon_rss_delta_mb": round(status_mb("RssAnon") - anon0, 1),
        "first_batch_tokens": int(batch["input_ids"].size),
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--before", default=None)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        prefixes, equal_steps = json.loads(args.run)
        print(json.dumps(one_run(prefixes, equal_steps)))
        return
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    root = tempfile.mkdtemp(prefix="mixture_open_", dir=args.dir)
    try:
        prefixes = {}
        for n in sizes:
            directory = os.path.join(root, str(n))
            os.makedirs(directory)
            prefixes[n] = write_sources(directory, n)
        builds = {"after": os.environ.get("PYTHONPATH", "")}
        if args.before:
            builds = {"before": os.path.abspath(args.before), **builds}
        best: dict = {}
        for _ in range(args.repeats):
            for n, equal_steps, build in (
                (n, e, b) for n in sizes for e in (True, False) for b in builds
            ):
                env = dict(os.environ, PYTHONPATH=builds[build])
                out = subprocess.run(
                    [sys.executable, __file__, "--run", json.dumps([prefixes[n], equal_steps])],
                    check=True,
                    capture_output=True,
                    text=True,
                    env=env,
                )
                r = json.loads(out.stdout.strip().splitlines()[-1])
                key = (n, equal_steps, build)
                if key not in best or r["cpu_s"] < best[key]["cpu_s"]:
                    best[key] = r
        print(f"machine: {platform.machine()} {os.cpu_count()} cpus, {platform.platform()}")
        print(
            f"{'samples':>12} {'equal_steps':>11} {'build':>6} {'cpu s':>8} {'wall s':>8} "
            f"{'peak RSS +MB':>13} {'anon RSS +MB':>13}  load average"
        )
        order = list(builds)
        for (n, equal_steps, build), r in sorted(
            best.items(), key=lambda kv: (kv[0][0], not kv[0][1], order.index(kv[0][2]))
        ):
            load = " ".join(f"{x:.2f}" for x in r["load_average"])
            print(
                f"{r['samples']:>12} {str(equal_steps):>11} {build:>6} {r['cpu_s']:>8.3f} "
                f"{r['wall_s']:>8.3f} {r['peak_rss_delta_mb']:>13.1f} "
                f"{r['anon_rss_delta_mb']:>13.1f}  {load}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
