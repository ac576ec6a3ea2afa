"""Token sources side by side with their peers (docs/benchmarks.md, "Token sources"):

open      opening a Megatron .bin/.idx of N documents and reaching the first equal-steps
          batch (shardkit.open_source + TokenLoader, world 8, seq_len 4096, batch 8) against
          megatron-core's GPTDataset on the same files: its document / sample / shuffle index
          build (its compiled helpers, rank 0's work, written to a fresh cache folder) and
          its start from that cache (the indices memory-mapped), each up to dataset[0]. Each
          side runs in a fresh process (nothing cached in memory but the OS page cache, warm
          for both: the files are read once before the first round).
tokens    tokens/s of a whole epoch of batches from a .bin/.idx and from the .npy pair of
          the same tokens (the same loader options), with numpy's copy of the batch bytes
          beside.
prepare   `shardkit.prepare` (JSONL -> Megatron .bin/.idx, workers 1 and 2) against the same
          tokenizer's encode_batch alone over the same texts (batches of 256 as prepare
          does), the tokenizer on one thread (RAYON_NUM_THREADS=1: per process).

Every figure follows bench/bench_util.py's rule: CPU seconds (the process and its reaped
children) and wall seconds, the best of interleaved rounds, beside the load average, and
numpy's streaming and in-cache copy of the same bytes beside a throughput. The files go to --dir (default
/tmp/shardkit-bench-sources). Usage:
  python bench/sources_vs_peers.py open [--documents 1e8] [--mean-length 600] [--rounds 2]
  python bench/sources_vs_peers.py tokens [--tokens 5e7] [--rounds 3]
  python bench/sources_vs_peers.py prepare --jsonl build/demo/stdlib/stdlib.jsonl
      --tokenizer build/demo/stdlib/tokenizer.json [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import bench_util
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.join(os.path.dirname(HERE), "python")


# -- open ------------------------------------------------------------------------------


def write_megatron(prefix, lengths, token_size=2):
    """PREFIX.idx + PREFIX.bin in megatron-core 0.16.1's layout (uint16, one sequence per
    document); the .bin is sparse zeros (only its size is read before the first batch)."""
    n = len(lengths)
    pointers = np.zeros(n, np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * token_size, out=pointers[1:])
    with open(prefix + ".idx.tmp", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(np.uint64(1).tobytes() + np.uint8(8).tobytes())
        f.write(np.uint64(n).tobytes() + np.uint64(n + 1).tobytes())
        f.write(lengths.astype(np.int32).tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(n + 1, dtype=np.int64).tobytes())
    with open(prefix + ".bin.tmp", "wb") as f:
        f.truncate(int(lengths.sum()) * token_size)
    os.replace(prefix + ".bin.tmp", prefix + ".bin")
    os.replace(prefix + ".idx.tmp", prefix + ".idx")


# Each side times its own work after its imports (torch's import alone is seconds of
# CPU: not what is compared) and prints {"cpu", "wall", "out"}.
TIMER = """
import json, bench_util
def timed(work):
    out, cpu, wall = bench_util.timed(work)
    print(json.dumps({"cpu": cpu, "wall": wall, "out": out}))
"""

SHARDKIT_OPEN = (
    TIMER
    + """
import sys, shardkit
what = sys.argv[2]
def work():
    source = shardkit.open_source(sys.argv[1])
    loader = shardkit.TokenLoader(source, seq_len=4096, batch_size=8, rank=0, world_size=8)
    batch = next(iter(loader))
    out = f"first batch {int(batch['row_tokens'].sum())} tokens"
    if what == "plan":  # the whole epoch's plan (num_steps) known too
        out = f"{loader.num_steps} steps, " + out
    return out
timed(work)
"""
)

MEGATRON_OPEN = (
    TIMER
    + """
import sys, warnings
warnings.simplefilter("ignore")
import numpy
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.indexed_dataset import IndexedDataset
from megatron.core.datasets.utils import Split

class Tokenizer:  # what GPTDataset reads of a tokenizer
    vocab_size, eod, pad = 65536, 0, 1
    unique_identifiers = {"class": "bench"}

config = GPTDatasetConfig(random_seed=0, sequence_length=4096, tokenizer=Tokenizer(),
                          reset_position_ids=False, reset_attention_mask=False,
                          eod_mask_loss=False, create_attention_mask=False,
                          path_to_cache=sys.argv[2])
def work():
    indexed = IndexedDataset(sys.argv[1])
    n = len(indexed)
    ds = GPTDataset(indexed, sys.argv[1], numpy.arange(n, dtype=numpy.int32), None,
                    Split.train, config)
    return f"{len(ds)} samples, dataset[0] {len(ds[0]['tokens'])} tokens"
timed(work)
"""
)


def run_script(script, *args):
    """(CPU s, wall s, output) the script measured in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYTHON_DIR, HERE]), OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    r = json.loads(done.stdout.strip().splitlines()[-1])
    return r["cpu"], r["wall"], r["out"]


def interleaved_scripts(sides, rounds):
    """bench_util.interleaved() for sides that measure themselves in a fresh interpreter
    (run_script: its CPU and wall seconds after its imports)."""
    best = {name: bench_util.Best() for name in sides}
    for _ in range(rounds):
        for name, fn in sides.items():
            cpu, wall, out = fn()
            best[name].add(out, cpu, wall)
    return best


def bench_open(args):
    n = int(float(args.documents))
    mean = args.mean_length
    prefix = os.path.join(args.dir, f"open-{n}" + (f"-mean{mean}" if mean else ""))
    if not os.path.exists(prefix + ".idx"):
        t = time.perf_counter()
        rng = np.random.default_rng(0)
        if mean:  # lognormal lengths of this mean (sigma 1), at least 1 token
            mu = np.log(mean) - 0.5
            lengths = np.maximum(1, rng.lognormal(mu, 1.0, n)).astype(np.int32)
        else:  # 1-15 tokens: the index as large as it gets per token
            lengths = rng.integers(1, 16, n).astype(np.int32)
        write_megatron(prefix, lengths)
        print(f"wrote {prefix}.idx/.bin ({n} documents) in {time.perf_counter() - t:.1f} s")
    for path in (prefix + ".idx",):  # warm the page cache for every side alike
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    cache = tempfile.mkdtemp(dir=args.dir, prefix="megatron-cache-")
    fresh = iter(range(10**6))

    def cold():
        return run_script(MEGATRON_OPEN, prefix, os.path.join(cache, f"cold-{next(fresh)}"))

    os.makedirs(os.path.join(cache, "warm"), exist_ok=True)
    run_script(MEGATRON_OPEN, prefix, os.path.join(cache, "warm"))  # builds the cache once
    sides = {
        "shardkit: open + first batch": lambda: run_script(SHARDKIT_OPEN, prefix, "first"),
        "shardkit: open + first batch + num_steps": lambda: run_script(
            SHARDKIT_OPEN, prefix, "plan"
        ),
        "megatron GPTDataset: build indices + dataset[0]": cold,
        "megatron GPTDataset: from its cache + dataset[0]": lambda: run_script(
            MEGATRON_OPEN, prefix, os.path.join(cache, "warm")
        ),
    }
    best = interleaved_scripts(sides, args.rounds)
    kind = f"lognormal lengths of mean {mean}" if mean else "1-15 tokens each"
    print(
        f"open {n:.0e} documents (uint16, {kind}), {args.rounds} interleaved rounds, "
        f"best of each (after imports); {bench_util.load_average()}"
    )
    for name, b in best.items():
        print(f"  {name:50s} CPU {b.cpu:7.3f} s  wall {b.wall:7.3f} s  ({b.out})")
    ours = best["shardkit: open + first batch"]
    for name in list(best)[2:]:
        print(
            f"  ratio {name.split(': ')[1]} / shardkit: CPU {best[name].cpu / ours.cpu:.1f}x, "
            f"wall {best[name].wall / ours.wall:.1f}x"
        )


# -- tokens ----------------------------------------------------------------------------


def bench_tokens(args):
    import shardkit

    total = int(float(args.tokens))
    rng = np.random.default_rng(1)
    lengths = np.maximum(1, rng.lognormal(np.log(600), 1.2, total // 600)).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = rng.integers(0, 65535, int(offsets[-1]), dtype=np.uint16)
    stem = os.path.join(args.dir, "tokens")
    np.save(stem + ".tokens.npy", tokens)
    np.save(stem + ".offsets.npy", offsets)
    prefix = os.path.join(args.dir, "tokens-megatron")
    n = len(lengths)
    pointers = (offsets[:-1] * 2).astype(np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + np.uint64(1).tobytes() + np.uint8(8).tobytes())
        f.write(np.uint64(n).tobytes() + np.uint64(n + 1).tobytes())
        f.write(lengths.astype(np.int32).tobytes() + pointers.tobytes())
        f.write(np.arange(n + 1, dtype=np.int64).tobytes())
    tokens.tofile(prefix + ".bin")
    npy = shardkit.open_source(stem + ".tokens.npy")
    meg = shardkit.open_source(prefix)
    assert meg.num_tokens == npy.num_tokens and np.array_equal(meg.lengths(), npy.lengths())
    options = dict(seq_len=4096, batch_size=8, seed=3, num_threads=1)

    def epoch(source):
        def run():
            real = 0
            for b in bench_util.one_rank_loader(source, **options):
                real += int(b["row_tokens"].sum())
            return real

        return run

    best = bench_util.interleaved(
        {".npy pair": epoch(npy), "megatron .bin/.idx": epoch(meg)}, args.rounds
    )
    print(
        f"one epoch, {offsets[-1]:.2e} uint16 tokens in {n} documents, seq_len 4096, batch 8, "
        f"1 collating thread; best of {args.rounds} interleaved rounds; "
        f"{bench_util.load_average()}"
    )
    for name, b in best.items():
        print(
            f"  {name:20s} {b.out / b.cpu / 1e6:7.1f} M tokens per CPU s, "
            f"{b.out / b.wall / 1e6:7.1f} M tokens/s wall ({b.out} tokens)"
        )
    a, b = best[".npy pair"], best["megatron .bin/.idx"]
    print(f"  megatron / npy: {a.cpu / b.cpu:.3f} (CPU), {a.wall / b.wall:.3f} (wall)")
    # The loader's input_ids are int64: 8 B per token, one [8, 4096] batch of them.
    line, _, _ = bench_util.memcpy_line(8, "tokens", 8 * 4096 * 8)
    print(f"  {line}")


# -- prepare ---------------------------------------------------------------------------


def bench_prepare(args):
    os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers starts its pool
    from tokenizers import Tokenizer

    import shardkit

    with open(args.jsonl, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    tok = Tokenizer.from_file(args.tokenizer)

    def encode_only():
        n = 0
        for i in range(0, len(texts), 256):
            n += sum(len(e.ids) for e in tok.encode_batch(texts[i : i + 256]))
        return n

    def prepare(workers):
        def run():
            out = os.path.join(args.dir, f"prepare-{workers}")
            return shardkit.prepare(
                [args.jsonl], args.tokenizer, out, workers=workers, progress=False
            )["tokens"]

        return run

    sides = {"tokenizer encode_batch alone": encode_only}
    for w in (int(x) for x in args.workers.split(",")):
        sides[f"shardkit prepare --workers {w}"] = prepare(w)
    best = bench_util.interleaved(sides, args.rounds)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    print(
        f"{len(texts)} documents, {mb:.1f} MB of text ({args.jsonl}); tokenizer on one thread "
        f"(RAYON_NUM_THREADS={os.environ['RAYON_NUM_THREADS']}); best of {args.rounds} "
        f"interleaved rounds; {os.cpu_count()} cores, {bench_util.load_average()}"
    )
    base = best["tokenizer encode_batch alone"]
    for name, b in best.items():
        print(
            f"  {name:30s} CPU {b.cpu:6.2f} s  wall {b.wall:6.2f} s  {b.out / b.wall / 1e6:.2f} M "
            f"tokens/s wall; encode_batch's wall / this: {base.wall / b.wall:.2f}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=["open", "tokens", "prepare"])
    parser.add_argument("--dir", default="/tmp/shardkit-bench-sources")
    parser.add_argument("--documents", default="1e7")
    parser.add_argument("--mean-length", type=int, default=0, help="open: lognormal lengths")
    parser.add_argument("--tokens", default="5e7")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jsonl", default="build/demo/stdlib/stdlib.jsonl")
    parser.add_argument("--tokenizer", default="build/demo/stdlib/tokenizer.json")
    parser.add_argument("--workers", default="1,2", help="prepare: worker counts, e.g. 1,2,4,8")
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    {"open": bench_open, "tokens": bench_tokens, "prepare": bench_prepare}[args.what](args)


if __name__ == "__main__":
    main()
