"""Mixing K sources, side by side: shardkit.Mixture vs Megatron-Core's blend index builder
(megatron.core.datasets.helpers_cpp.build_blending_indices, the compiled helper shipped in
the megatron-core wheel), for N samples over K = 10 and 100 sources, in one run.

Megatron builds two arrays over every sample (int16 source + int64 index: 10 bytes per
sample) before the first one can be read; shardkit computes any sample from its position.
Reported per side: time to the first sample, peak RSS above the process's RSS after
imports when the first sample is available (each side in its own subprocess), and samples per second for the full pass (for
Megatron, the build; for shardkit, Mixture.numpy over all N in chunks, one thread), plus
each side's |count - target| at the end of the run (shardkit: at the last block boundary,
where its bound holds). Times are CPU seconds of the side's process (time.process_time:
the shared machines here run many builds at once, and both sides are single-threaded).
Minimum of --repeats runs per side.

    PYTHONPATH=python build/bench-venv/bin/python bench/mixture_vs_megatron.py \
        [--samples 100000000] [--sources 10,100] [--repeats 3]

(make bench installs megatron-core==0.16.1 into build/bench-venv.)
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


def weights_for(k):
    # Weights 1, 2, ..., K (normalised): every source distinct, a 1:K spread.
    import numpy as np

    w = np.arange(1, k + 1, dtype=np.float64)
    return w / w.sum()


def megatron_helpers():
    """Megatron-Core's compiled helpers as shipped in the wheel, or (where the wheel's
    CPython version does not match) the same helpers.cpp compiled by Megatron's own build
    line into a module on $MEGATRON_HELPERS_PATH."""
    try:
        from megatron.core.datasets import helpers_cpp
    except ImportError:
        sys.path.insert(0, os.environ["MEGATRON_HELPERS_PATH"])
        import helpers_cpp
    return helpers_cpp


def side_megatron(n, k):
    import warnings

    import numpy as np

    warnings.filterwarnings("ignore")
    helpers_cpp = megatron_helpers()

    w = weights_for(k)
    base = rss_mb()
    t0 = time.process_time()
    source = np.zeros(n, dtype=np.int16)
    index = np.zeros(n, dtype=np.int64)
    helpers_cpp.build_blending_indices(source, index, w, k, n, False)
    first_sample = (int(source[0]), int(index[0]))
    seconds = time.process_time() - t0
    extra_mb = rss_mb() - base  # the two index arrays; before counting below
    counts = np.bincount(source, minlength=k)
    error = float(np.max(np.abs(counts - w * n)))
    return dict(
        first_s=seconds,
        seconds=seconds,
        extra_mb=extra_mb,
        first=first_sample,
        max_error=error,
    )


def side_shardkit(n, k):
    import numpy as np

    import shardkit

    w = weights_for(k)
    base = rss_mb()
    t0 = time.process_time()
    mix = shardkit.Mixture([10**6] * k, w)
    first_sample = mix.source_of(0)
    first = time.process_time() - t0
    extra_mb = rss_mb() - base  # the mixture itself; the pass below adds its chunk arrays
    counts = np.zeros(k, dtype=np.int64)
    chunk = 1 << 20
    t1 = time.process_time()
    for start in range(0, n, chunk):
        sources, _ = mix.numpy(start, min(n, start + chunk))
        counts += np.bincount(sources, minlength=k)
    seconds = time.process_time() - t1
    # Against the float weights; the mixture's own shares are them rounded to
    # multiples of 2^-40 (docs/mixing.md).
    assert counts.tolist() == mix.consumed(n)
    edge = n // mix.block * mix.block
    error = float(np.max(np.abs(np.array(mix.consumed(edge)) - w * edge)))
    return dict(
        first_s=first,
        seconds=seconds,
        extra_mb=extra_mb,
        first=first_sample,
        max_error=error,
        block=mix.block,
    )


SIDES = {"megatron": side_megatron, "shardkit": side_shardkit}


def run_side(side, n, k):
    out = subprocess.run(
        [sys.executable, __file__, "--child", side, "--samples", str(n), "--sources", str(k)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{side} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=100_000_000)
    ap.add_argument("--sources", default="10,100")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(SIDES[args.child](args.samples, int(args.sources))))
        return
    n = args.samples
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cpus; N = {n:,}")
    for k in [int(x) for x in args.sources.split(",")]:
        best = {}
        for side in SIDES:
            runs = [run_side(side, n, k) for _ in range(args.repeats)]
            best[side] = {
                key: min(r[key] for r in runs) for key in ("first_s", "seconds", "extra_mb")
            }
            best[side]["max_error"] = runs[0]["max_error"]
            rate = n / best[side]["seconds"]
            print(
                f"K={k:4d} {side:9s} first sample {best[side]['first_s'] * 1e3:10.3f} ms  "
                f"peak +{best[side]['extra_mb']:8.1f} MB  full pass {rate / 1e6:8.1f} M samples/s"
                f"  max |count - target| {best[side]['max_error']:.2f}"
            )
        m, s = best["megatron"], best["shardkit"]
        print(
            f"K={k:4d} ratio     first sample {m['first_s'] / s['first_s']:,.0f}x faster, "
            f"full pass {m['seconds'] / s['seconds']:.1f}x, "
            f"memory {m['extra_mb']:.0f} MB vs {s['extra_mb']:.1f} MB"
        )


if __name__ == "__main__":
    main()
