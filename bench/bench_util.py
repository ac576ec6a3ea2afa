"""The one measuring rule of the side-by-side benchmarks in bench/ (docs/benchmarks.md):

- every side's CPU time (this process's and its reaped children's, so a peer that works in
  worker processes is charged for them) and wall time, beside the load average;
- the sides of one comparison interleaved round by round in one process, the best round
  of each kept (the one least disturbed by the other users of a shared machine), so that
  their ratio holds under load;
- a memory-bandwidth baseline beside every throughput: numpy `copyto` of the same bytes,
  streaming (buffers far larger than the caches) and in cache (one buffer of a batch's
  size copied again and again).
"""

from __future__ import annotations

import math
import os
import platform
import time

import numpy as np


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f})"


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"python {platform.python_version()}, {load_average()}"
    )


def cpu_seconds() -> float:
    """CPU seconds of this process (time.process_time: fine-grained) and of its children
    that have been waited for (os.times: 10 ms ticks, only worker processes reach it)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def timed(fn):
    """(fn(), CPU seconds, wall seconds) of one call."""
    c, w = cpu_seconds(), time.perf_counter()
    out = fn()
    return out, cpu_seconds() - c, time.perf_counter() - w


# The job shape of the comparisons (docs/benchmarks.md): batches of 8 rows of 4096 tokens,
# W = 8 ranks; each a command-line option of the benches that take it.
JOB_SHAPE = {"--seq-len": 4096, "--batch": 8, "--world": 8}


def add_job_arguments(parser, *flags):
    """Adds the integer options `flags` (of JOB_SHAPE), defaulting to the job shape."""
    for flag in flags:
        parser.add_argument(flag, type=int, default=JOB_SHAPE[flag])


def one_rank_loader(*source, **options):
    """`shardkit.TokenLoader(*source, rank=0, world_size=1, **options)` (the shardkit on
    the path): the whole epoch in one loader, what the one-loader benches time."""
    import shardkit

    return shardkit.TokenLoader(*source, rank=0, world_size=1, **options)


def loader_epoch(tokens, offsets, **options):
    """Rank 0's epoch of `shardkit.TokenLoader(tokens, offsets, rank=0, **options)` (the
    shardkit on the path): the real tokens and the rows it delivered."""
    import shardkit

    real = rows = 0
    for b in shardkit.TokenLoader(tokens, offsets, rank=0, **options):
        real += int(b["row_tokens"].sum())
        rows += b["input_ids"].shape[0]
    return real, rows


class Best:
    """The best (smallest) CPU and wall seconds over rounds; the output of the last."""

    def __init__(self):
        self.cpu = math.inf
        self.wall = math.inf
        self.out = None

    def add(self, out, cpu, wall):
        self.out = out
        self.cpu = min(self.cpu, cpu)
        self.wall = min(self.wall, wall)


def interleaved(sides, rounds):
    """Runs every side of `sides` (name -> zero-argument function) once per round, in
    turn, for `rounds` rounds; returns name -> Best."""
    best = {name: Best() for name in sides}
    for _ in range(rounds):
        for name, fn in sides.items():
            best[name].add(*timed(fn))
    return best


def copy_gbps(nbytes, rounds=5, streaming_bytes=256 << 20):
    """numpy copyto bandwidth in GB/s, bytes copied per CPU second of this thread (the best
    of `rounds`; like the sides' figures, per CPU s, so a loaded machine's waits do not
    count): (streaming, in_cache). Streaming copies `streaming_bytes` between
    two buffers far larger than the caches; in cache copies one `nbytes` buffer into
    another again and again (what a pooled batch buffer sees)."""
    big_src = np.ones(streaming_bytes, dtype=np.uint8)
    big_dst = np.zeros_like(big_src)
    small_src = np.ones(max(1, nbytes), dtype=np.uint8)
    small_dst = np.zeros_like(small_src)
    repeats = max(1, streaming_bytes // max(1, nbytes))
    stream = cache = math.inf
    for _ in range(rounds):
        t = time.thread_time()
        np.copyto(big_dst, big_src)
        stream = min(stream, time.thread_time() - t)
        t = time.thread_time()
        for _ in range(repeats):
            np.copyto(small_dst, small_src)
        cache = min(cache, time.thread_time() - t)
    return streaming_bytes / stream / 1e9, repeats * small_src.nbytes / cache / 1e9


def memcpy_line(bytes_per_unit, unit, batch_bytes):
    """One line: the copy baselines of `batch_bytes`, and how many `unit`s per second they
    make at `bytes_per_unit` bytes each; returns (line, streaming GB/s, in-cache GB/s)."""
    stream, cache = copy_gbps(batch_bytes)
    line = (
        f"memcpy baseline (numpy copyto, per CPU s, {load_average()}): streaming "
        f"{stream:.2f} GB/s = {stream * 1e9 / bytes_per_unit / 1e6:.1f} M {unit}/s at "
        f"{bytes_per_unit} B each; in cache ({batch_bytes / 1e3:.0f} kB buffer) "
        f"{cache:.2f} GB/s = {cache * 1e9 / bytes_per_unit / 1e6:.1f} M {unit}/s"
    )
    return line, stream, cache
