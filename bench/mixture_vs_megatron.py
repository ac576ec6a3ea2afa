"""Mixing K sources, side by side: shardkit.Mixture vs Megatron-Core's blend index builder
(megatron.core.datasets.helpers_cpp.build_blending_indices, the compiled helper shipped in
the megatron-core wheel), for N samples over K = 2, 10 and 100 sources, in one run.

Megatron builds two arrays over every sample (int16 source + int64 index: 10 bytes per
sample) before the first one can be read, and caches them: BlendedDataset saves them as .npy
files and every later start maps them (numpy.load(mmap_mode="r")) instead of building. Both
Megatron starts are measured: cold (the build) and cached (the two files mapped, the first
sample read; the files are written once before the rounds, outside the timing). shardkit
computes any sample from its position.
Reported per side: time to the first sample, peak RSS above the process's RSS after
imports when the first sample is available (each side in its own subprocess), and samples
per second for the full pass. Megatron: the build, called as BlendedDataset calls it
(normalised float64 weights, np.zeros int16 + int64 arrays of N allocated inside the
timing); its index is the sample's rank within its dataset, before GPTDataset's own shuffle.
shardkit: Mixture.numpy over all N in 1Mi chunks, one thread, writing int64 source + int64
item (the item already permuted within its source, 16 bytes per sample), either into two
reused chunk buffers (`shardkit`, a streaming consumer: numpy(out=...)) or into two arrays
of all N allocated inside the timing as Megatron's are (`shardkit whole`); the count check
runs in a second pass outside the timing. Plus
each side's |count - target| at the end of the run (shardkit: at the last block boundary,
where its bound holds). Times are CPU seconds of the side's process (bench_util.cpu_seconds:
the shared machines here run many builds at once, and both sides are single-threaded), wall
seconds beside, with the load average. The sides run interleaved, round by round (one
subprocess each), and the best of --repeats rounds is kept. The write limit of the full
pass is numpy's streaming copy of the two int64 arrays shardkit writes (16 bytes per
sample; bench_util: 256 MB buffers, far above the caches), measured in the same run.

    PYTHONPATH=python build/bench-venv/bin/python bench/mixture_vs_megatron.py \
        [--samples 100000000] [--sources 2,10,100] [--repeats 3]

(make bench installs megatron-core==0.16.1 into build/bench-venv.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys

import bench_util


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

    def build():
        source = np.zeros(n, dtype=np.int16)
        index = np.zeros(n, dtype=np.int64)
        helpers_cpp.build_blending_indices(source, index, w, k, n, False)
        return source, index, (int(source[0]), int(index[0]))

    # Both arrays returned: freed after the timing and the memory count, as before.
    (source, index, first_sample), seconds, wall = bench_util.timed(build)
    extra_mb = rss_mb() - base  # the two index arrays; before counting below
    counts = np.bincount(source, minlength=k)
    error = float(np.max(np.abs(counts - w * n)))
    return dict(
        first_s=seconds,
        first_wall_s=wall,
        seconds=seconds,
        wall_s=wall,
        extra_mb=extra_mb,
        first=first_sample,
        max_error=error,
    )


def cache_dir(n, k):
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"shardkit-bench-megatron-{os.getuid()}-{n}-{k}")


def side_megatron_save(n, k):
    """Writes Megatron's two index arrays as BlendedDataset caches them (not timed)."""
    import warnings

    import numpy as np

    warnings.filterwarnings("ignore")
    helpers_cpp = megatron_helpers()
    source = np.zeros(n, dtype=np.int16)
    index = np.zeros(n, dtype=np.int64)
    helpers_cpp.build_blending_indices(source, index, weights_for(k), k, n, False)
    d = cache_dir(n, k)
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "dataset_index.npy"), source, allow_pickle=True)
    np.save(os.path.join(d, "dataset_sample_index.npy"), index, allow_pickle=True)
    return {}


def side_megatron_cached(n, k):
    """A later start of Megatron's BlendedDataset: the cached arrays mapped as
    blended_dataset.py loads them, and the first sample read."""
    import numpy as np

    d = cache_dir(n, k)
    base = rss_mb()

    def start():
        source = np.load(os.path.join(d, "dataset_index.npy"), allow_pickle=True, mmap_mode="r")
        index = np.load(
            os.path.join(d, "dataset_sample_index.npy"), allow_pickle=True, mmap_mode="r"
        )
        return source, index, (int(source[0]), int(index[0]))

    (source, index, first_sample), seconds, wall = bench_util.timed(start)
    extra_mb = rss_mb() - base  # before the check below reads the whole map
    counts = np.bincount(source, minlength=k)
    error = float(np.max(np.abs(counts - weights_for(k) * n)))
    return dict(
        first_s=seconds,
        first_wall_s=wall,
        seconds=float("nan"),
        wall_s=float("nan"),
        extra_mb=extra_mb,
        first=first_sample,
        max_error=error,
    )


def _shardkit_pass(n, k, whole):
    import numpy as np

    import shardkit

    w = weights_for(k)
    base = rss_mb()

    def open_mixture():
        mix = shardkit.Mixture([10**6] * k, w)
        return mix, mix.source_of(0)

    (mix, first_sample), first, first_wall = bench_util.timed(open_mixture)
    extra_mb = rss_mb() - base  # the mixture itself; the pass below adds its arrays
    chunk = 1 << 20

    def full_pass():
        if whole:
            # Like Megatron's build: both arrays of all N samples in memory at the end
            # (allocated inside the timing, as Megatron's np.zeros are), filled chunk by chunk.
            sources, items = np.empty(n, np.int64), np.empty(n, np.int64)
            for start in range(0, n, chunk):
                stop = min(n, start + chunk)
                mix.numpy(start, stop, out=(sources[start:stop], items[start:stop]))
            return sources, items  # freed after the timing
        else:
            # A streaming consumer: the same two chunk buffers reused for the whole pass.
            buffers = np.empty(chunk, np.int64), np.empty(chunk, np.int64)
            for start in range(0, n, chunk):
                stop = min(n, start + chunk)
                mix.numpy(start, stop, out=(buffers[0][: stop - start], buffers[1][: stop - start]))
            return buffers

    kept, seconds, wall = bench_util.timed(full_pass)
    del kept
    # The check, outside the timing (Megatron's build is timed without it too).
    counts = np.zeros(k, dtype=np.int64)
    for start in range(0, n, chunk):
        sources, _ = mix.numpy(start, min(n, start + chunk))
        counts += np.bincount(sources, minlength=k)
    # Against the float weights; the mixture's own shares are them rounded to
    # multiples of 2^-40 (docs/mixing.md).
    assert counts.tolist() == mix.consumed(n)
    edge = n // mix.block * mix.block
    error = float(np.max(np.abs(np.array(mix.consumed(edge)) - w * edge)))
    return dict(
        first_s=first,
        first_wall_s=first_wall,
        seconds=seconds,
        wall_s=wall,
        extra_mb=extra_mb,
        first=first_sample,
        max_error=error,
        block=mix.block,
    )


def side_shardkit(n, k):
    return _shardkit_pass(n, k, whole=False)


def side_shardkit_whole(n, k):
    return _shardkit_pass(n, k, whole=True)


SIDES = {
    "megatron": side_megatron,
    "megatron cached": side_megatron_cached,
    "shardkit": side_shardkit,
    "shardkit whole": side_shardkit_whole,
}
CHILDREN = dict(SIDES, **{"megatron save": side_megatron_save})


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
    ap.add_argument("--sources", default="2,10,100")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args.samples, int(args.sources))))
        return
    n = args.samples
    print(f"machine: {bench_util.machine()}; N = {n:,}")
    stream, _ = bench_util.copy_gbps(16 << 20)
    limit = stream * 1e9 / 16
    print(
        f"write limit of the full pass: numpy streaming copy {stream:.2f} GB/s = "
        f"{limit / 1e6:.0f} M samples/s at 16 B (two int64 arrays) per sample"
    )
    keys = ("first_s", "first_wall_s", "seconds", "wall_s", "extra_mb")
    for k in [int(x) for x in args.sources.split(",")]:
        run_side("megatron save", n, k)
        runs = {side: [] for side in SIDES}
        for _ in range(args.repeats):
            for side in SIDES:
                runs[side].append(run_side(side, n, k))
        best = {
            side: dict({key: min(r[key] for r in rs) for key in keys}, max_error=rs[0]["max_error"])
            for side, rs in runs.items()
        }
        for side, b in best.items():
            full = (
                ""
                if b["seconds"] != b["seconds"]
                else f"  full pass {n / b['seconds'] / 1e6:8.1f} M samples/CPU s "
                f"({b['wall_s']:.2f} s wall"
                + (
                    f", {n / b['seconds'] / limit:.0%} of the write limit)"
                    if side.startswith("shardkit")
                    else ")"
                )
            )
            print(
                f"K={k:4d} {side:15s} first sample {b['first_s'] * 1e3:10.3f} ms CPU "
                f"({b['first_wall_s'] * 1e3:.3f} ms wall)  peak +{b['extra_mb']:8.1f} MB"
                f"{full}  max |count - target| {b['max_error']:.2f}"
            )
        m, c, s = best["megatron"], best["megatron cached"], best["shardkit"]
        sw = best["shardkit whole"]
        print(
            f"K={k:4d} ratio     first sample {m['first_s'] / s['first_s']:,.0f}x Megatron cold, "
            f"{c['first_s'] / s['first_s']:,.1f}x Megatron cached (CPU); full pass "
            f"{m['seconds'] / s['seconds']:.1f}x the cold build per CPU s "
            f"({m['wall_s'] / s['wall_s']:.1f}x wall), into whole arrays "
            f"{m['seconds'] / sw['seconds']:.1f}x ({m['wall_s'] / sw['wall_s']:.1f}x wall); "
            f"memory {m['extra_mb']:.0f} MB "
            f"vs {s['extra_mb']:.1f} MB ({bench_util.load_average()})"
        )
        shutil.rmtree(cache_dir(n, k), ignore_errors=True)


if __name__ == "__main__":
    main()
