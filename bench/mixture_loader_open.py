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

Megatron in the same run, on the same files: for each size the script writes a
megatron-core ``PREFIX.idx`` per source (the same documents' lengths, one sequence per
document) whose sequence pointers address the source's own ``.tokens.npy`` past its header,
with ``PREFIX.bin`` a symbolic link to that file, so both sides read the same token bytes.
Megatron's side is what a training run does before its first batch of the equivalent
mixture: a ``GPTDataset`` per source (``IndexedDataset`` + document / sample / shuffle
indices, sequence_length 2048, one epoch of the source) and a ``BlendedDataset`` over the
three with weights 0.5 / 0.3 / 0.2 (its size: the most samples no source runs out of), then
``blended[0:8]`` (8 sequences of 2048 tokens, shardkit's first batch). ``cold`` builds every
index into a fresh cache folder (rank 0's work); ``cached`` starts from a cache built once
before the rounds (the indices memory-mapped, as every later start of a run is). Each in a
fresh process, measured as shardkit's side, interleaved with it. It needs megatron-core
(``make bench`` installs it into build/bench-venv; run the script with that interpreter);
without it the script says so and measures shardkit alone.

    PYTHONPATH=python build/bench-venv/bin/python bench/mixture_loader_open.py \
        [--sizes 1000000,10000000,100000000] [--repeats 2] [--dir /tmp] [--before DIR] \
        [--mean-tokens 8]

Documents are 8 tokens long on average (lengths uniform in 1..15); ``--mean-tokens M``
draws them uniformly in 1 .. 2M - 1 instead (M = 8 writes the same files). The token
files hold about N * M uint16: 2 GB at N = 1e6, M = 1024.

With ``--steady B`` the script instead times the B equal-steps batches after the first,
with ``read="mmap"`` against ``read="pread"`` (the loader option, docs/loader.md), each in
a fresh process, interleaved: CPU and wall ms per batch, the peak RSS and the batches'
tokens per wall second, with the memcpy baseline of the batch's bytes (bench_util.memcpy_line).
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


def write_sources(directory: str, total: int, mean_tokens: int = 8) -> list:
    """Three sources of total // 2, total // 3 and the rest documents, each document's
    length drawn uniformly from 1 .. 2 * mean_tokens - 1 (mean: mean_tokens)."""
    import numpy as np

    rng = np.random.default_rng(0)
    prefixes = []
    sizes = [total // 2, total // 3, total - total // 2 - total // 3]
    for k, n in enumerate(sizes):
        prefix = os.path.join(directory, f"s{k}")
        lengths = rng.integers(1, 2 * mean_tokens, size=n, dtype=np.int64)
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


def write_megatron_index(prefix: str) -> None:
    """PREFIX.idx (megatron-core 0.16.1's layout: uint16, one sequence per document) of
    the documents of PREFIX.offsets.npy, its pointers into PREFIX.tokens.npy past the
    header; PREFIX.bin a link to that file (Megatron maps the .bin whole)."""
    import numpy as np

    offsets = np.load(prefix + ".offsets.npy", mmap_mode="r")
    with open(prefix + ".tokens.npy", "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        header = f.tell()
    n = offsets.shape[0] - 1
    with open(prefix + ".idx.tmp", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(np.uint64(1).tobytes() + np.uint8(8).tobytes())
        f.write(np.uint64(n).tobytes() + np.uint64(n + 1).tobytes())
        f.write(np.diff(offsets).astype(np.int32).tobytes())
        f.write((offsets[:-1] * 2 + header).astype(np.int64).tobytes())
        f.write(np.arange(n + 1, dtype=np.int64).tobytes())
    os.replace(prefix + ".idx.tmp", prefix + ".idx")
    if not os.path.exists(prefix + ".bin"):
        os.symlink(os.path.basename(prefix + ".tokens.npy"), prefix + ".bin")


def status_mb(key: str) -> float:
    # VmHWM, not ru_maxrss: the latter is inherited from the parent across
    # fork + exec (the parent wrote the sources).
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(key)


def measured(work) -> dict:
    """work() -> (samples, first batch tokens) timed by bench_util.timed, with the peak
    RSS above the RSS before it and the anonymous RSS it added."""
    import bench_util

    before = status_mb("VmRSS")
    anon0 = status_mb("RssAnon")
    (samples, tokens), cpu, wall = bench_util.timed(work)
    return {
        "samples": samples,
        "cpu_s": round(cpu, 3),
        "wall_s": round(wall, 3),
        "peak_rss_delta_mb": round(status_mb("VmHWM") - before, 1),
        "anon_rss_delta_mb": round(status_mb("RssAnon") - anon0, 1),
        "first_batch_tokens": tokens,
        "load_average": os.getloadavg(),
    }


def one_run(prefixes: list, equal_steps: bool) -> dict:
    import shardkit

    sources = [(p + ".tokens.npy", p + ".offsets.npy") for p in prefixes]

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
        batch = next(iter(loader))
        return loader.samples_per_epoch, int(batch["row_tokens"].sum())

    return measured(open_and_first_batch)


def steady_run(prefixes: list, read: str, batches: int) -> dict:
    """The mixture loader's batches after the first (equal steps, read as `read`):
    CPU and wall seconds per batch over `batches` batches, and the peak RSS above
    the RSS before the loader was opened."""
    import bench_util

    import shardkit

    before = status_mb("VmRSS")
    sources = [(p + ".tokens.npy", p + ".offsets.npy") for p in prefixes]
    loader = shardkit.TokenLoader.mixture(
        sources, [0.5, 0.3, 0.2], seq_len=2048, batch_size=8, seed=1, token_dtype="uint16",
        read=read,
    )  # fmt: skip
    it = iter(loader)
    first = next(it)
    batch_bytes = sum(v.nbytes for v in first.values() if hasattr(v, "nbytes"))
    del first

    def rest():
        tokens = 0
        for done in range(batches):
            batch = next(it, None)
            if batch is None:
                raise SystemExit(
                    f"--steady {batches}: the epoch ends after {done + 1} batches "
                    "(ask for fewer, or more --sizes)"
                )
            tokens += int(batch["row_tokens"].sum())
        return tokens

    tokens, cpu, wall = bench_util.timed(rest)
    return {
        "cpu_per_batch_ms": round(1000 * cpu / batches, 3),
        "wall_per_batch_ms": round(1000 * wall / batches, 3),
        "tokens": tokens,
        "batch_bytes": batch_bytes,
        "peak_rss_delta_mb": round(status_mb("VmHWM") - before, 1),
        "load_average": os.getloadavg(),
    }


def steady(prefixes: dict, batches: int, repeats: int, mean_tokens: int) -> None:
    """steady_run under mmap and pread, each in a fresh process, interleaved; best CPU.
    Mtokens/s: the batches' real tokens (padding not counted) per wall second."""
    best: dict = {}
    for _ in range(repeats):
        for n in prefixes:
            for read in ("mmap", "pread"):
                out = subprocess.run(
                    [sys.executable, __file__, "--run", json.dumps([prefixes[n], [read, batches]])],
                    capture_output=True, text=True,
                )  # fmt: skip
                if out.returncode:
                    lines = out.stderr.strip().splitlines() or [f"exit {out.returncode}"]
                    raise SystemExit(f"N={n} read={read}: {lines[-1]}")
                r = json.loads(out.stdout.strip().splitlines()[-1])
                if (n, read) not in best or r["cpu_per_batch_ms"] < best[n, read][
                    "cpu_per_batch_ms"
                ]:
                    best[n, read] = r
    print(f"steady state: {batches} equal-steps batches of [8, 2048] after the first, best of "
          f"{repeats} (CPU of all the process's threads), documents of {mean_tokens} tokens "
          "on average")  # fmt: skip
    print(f"{'N':>10} {'read':>6} {'CPU ms/batch':>13} {'wall ms/batch':>14} "
          f"{'peak RSS +MB':>13} {'tokens':>10} {'Mtokens/s':>10}  load average")  # fmt: skip
    for (n, read), r in sorted(best.items()):
        load = " ".join(f"{x:.2f}" for x in r["load_average"])
        rate = r["tokens"] / (r["wall_per_batch_ms"] * batches / 1000) / 1e6
        print(f"{n:>10} {read:>6} {r['cpu_per_batch_ms']:>13.3f} {r['wall_per_batch_ms']:>14.3f} "
              f"{r['peak_rss_delta_mb']:>13.1f} {r['tokens']:>10} {rate:>10.1f}  {load}")  # fmt: skip
    import bench_util

    batch_bytes = next(iter(best.values()))["batch_bytes"]
    print(f"a batch: {batch_bytes} B (its arrays), {batch_bytes / (8 * 2048):g} B per slot")
    print(bench_util.memcpy_line(round(batch_bytes / (8 * 2048), 2), "slots", batch_bytes)[0])


def megatron_run(prefixes: list, cache: str) -> dict:
    """Megatron's start of the equivalent blend (see the docstring), in this process."""
    import warnings

    warnings.simplefilter("ignore")
    import numpy as np
    from megatron.core.datasets.blended_dataset import BlendedDataset
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    class Tokenizer:  # what GPTDataset reads of a tokenizer
        vocab_size, eod, pad = 65536, 0, 1
        unique_identifiers = {"class": "bench"}

    weights = [0.5, 0.3, 0.2]
    config = GPTDatasetConfig(
        random_seed=1,
        sequence_length=2048,
        tokenizer=Tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        path_to_cache=cache,
        blend=(list(prefixes), weights),
        split="1,0,0",
    )

    # BlendedDataset writes its cache on rank 0 of the process group: a group of one
    # (set up before the timing, as a launcher's is).
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(
            "gloo", init_method=f"file://{cache}.group-{os.getpid()}", rank=0, world_size=1
        )

    def start():
        datasets = []
        for prefix in prefixes:
            indexed = IndexedDataset(prefix)
            n = len(indexed)
            indices = np.arange(n, dtype=np.int32)
            datasets.append(GPTDataset(indexed, prefix, indices, None, Split.train, config))
        size = int(min(len(d) / w for d, w in zip(datasets, weights)))
        blended = BlendedDataset(datasets, weights, size, config)
        tokens = sum(len(blended[i]["tokens"]) for i in range(8))
        return size, tokens

    return measured(start)


def megatron_available() -> str:
    """'' when megatron-core imports here, else why not."""
    try:
        import warnings

        warnings.simplefilter("ignore")
        import megatron.core.datasets.blended_dataset  # noqa: F401
    except ImportError as e:
        return str(e)
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--before", default=None)
    parser.add_argument(
        "--steady",
        type=int,
        default=0,
        help="instead: time this many batches after the first, read='mmap' against 'pread'",
    )
    parser.add_argument(
        "--mean-tokens",
        type=int,
        default=8,
        help="the documents' mean length in tokens (lengths uniform in 1 .. 2 * this - 1)",
    )
    parser.add_argument("--run", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mean_tokens < 1:
        parser.error(f"--mean-tokens {args.mean_tokens}: must be at least 1")
    if args.run:
        prefixes, side = json.loads(args.run)
        if isinstance(side, list):  # [read, batches]: the steady state
            print(json.dumps(steady_run(prefixes, *side)))
        elif isinstance(side, str):  # a Megatron cache folder
            print(json.dumps(megatron_run(prefixes, side)))
        else:
            print(json.dumps(one_run(prefixes, side)))
        return
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    if args.mean_tokens != 8:
        print(f"documents of {args.mean_tokens} tokens on average")
    why_not = megatron_available()
    if why_not and not args.steady:
        print(f"megatron-core is not importable here ({why_not}): its side is skipped")
    root = tempfile.mkdtemp(prefix="mixture_open_", dir=args.dir)
    try:
        prefixes = {}
        for n in sizes:
            directory = os.path.join(root, str(n))
            os.makedirs(directory)
            prefixes[n] = write_sources(directory, n, args.mean_tokens)
            if not why_not and not args.steady:
                for prefix in prefixes[n]:
                    write_megatron_index(prefix)
        if args.steady:
            steady(prefixes, args.steady, args.repeats, args.mean_tokens)
            return
        builds = {"after": os.environ.get("PYTHONPATH", "")}
        if args.before:
            builds = {"before": os.path.abspath(args.before), **builds}
        # (label, build, side): shardkit's with equal steps and per rank, per build;
        # Megatron's cold (a fresh cache folder each run) and cached.
        sides = [
            (label, build, equal_steps)
            for equal_steps, label in ((True, "yes"), (False, "per rank"))
            for build in builds
        ]
        if not why_not:
            sides += [("-", "megatron cold", None), ("-", "megatron cached", None)]
        fresh = iter(range(10**6))

        def run(n, build, side):
            env = dict(os.environ, PYTHONPATH=builds.get(build, builds["after"]))
            if build == "megatron cold":
                side = os.path.join(root, f"cache-{n}-cold-{next(fresh)}")
            elif build == "megatron cached":
                side = os.path.join(root, f"cache-{n}-warm")
            out = subprocess.run(
                [sys.executable, __file__, "--run", json.dumps([prefixes[n], side])],
                check=True,
                capture_output=True,
                text=True,
                env=env,
            )
            if build == "megatron cold":
                shutil.rmtree(side, ignore_errors=True)
            return json.loads(out.stdout.strip().splitlines()[-1])

        if not why_not:
            for n in sizes:  # the cache a later start of a run finds (not measured)
                run(n, "megatron cached", None)
        best: dict = {}
        for _ in range(args.repeats):
            for n in sizes:
                for label, build, side in sides:
                    r = run(n, build, side)
                    key = (n, label, build)
                    if key not in best or r["cpu_s"] < best[key]["cpu_s"]:
                        best[key] = r
        print(f"machine: {platform.machine()} {os.cpu_count()} cpus, {platform.platform()}")
        print(
            f"{'N':>10} {'samples':>10} {'equal_steps':>11} {'side':>15} {'cpu s':>8} "
            f"{'wall s':>8} {'peak RSS +MB':>13} {'anon RSS +MB':>13} {'batch tokens':>12}  "
            "load average"
        )
        order = [(label, build) for label, build, _ in sides]
        for (n, label, build), r in sorted(
            best.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1:]))
        ):
            load = " ".join(f"{x:.2f}" for x in r["load_average"])
            print(
                f"{n:>10} {r['samples']:>10} {label:>11} {build:>15} {r['cpu_s']:>8.3f} "
                f"{r['wall_s']:>8.3f} {r['peak_rss_delta_mb']:>13.1f} "
                f"{r['anon_rss_delta_mb']:>13.1f} {r['first_batch_tokens']:>12}  {load}"
            )
        print("samples: shardkit, the documents of the epoch's window; Megatron, the")
        print("blend's sequences of 2048 tokens. batch tokens: the first batch's real tokens")
        print("(shardkit: 8 rows of 2048, padding not counted; Megatron: 8 samples of 2048).")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
