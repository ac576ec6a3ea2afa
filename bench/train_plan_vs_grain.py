"""Equal-steps training data, side by side in one run on the same lengths:

1. planning: shardkit.TrainPlan (the global pack plan of one epoch, what every
   rank computes at the start of an epoch) in documents/s on one core, and its
   padding against the lower bound ceil(tokens / seq_len);
2. packed token batches: shardkit.TokenLoader (equal steps, one thread) against
   Grain's FirstFitPackIterDataset and BestFitPackIterDataset (grain 0.2.18)
   over the same documents in memory: tokens/s and padding;
3. the loader with the equal-steps plan against the per-rank plan (rank 0 of
   8), interleaved run by run, with 0, 1 and 2 collating threads: tokens per
   CPU second of the process (0 threads: all work in the caller's thread) and
   tokens per wall second (with threads, what a training loop sees; the
   loader then plans on one more thread of its own, beside the collating
   ones, so the wall figure needs threads + 2 free cores to mean anything).

    PYTHONPATH=python build/bench-venv/bin/python bench/train_plan_vs_grain.py [--quick]
        [--only-loaders] [--loader-repeat N]

Lengths: lognormal (median 400, sigma 1.2), clipped to seq_len on every side
(Grain truncates longer documents, so no side sees one). Each figure is the
minimum over --repeat runs; CPU seconds are the process's (time.process_time),
wall seconds beside. Grain runs in this process without multiprocessing.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time

import numpy as np

import shardkit


def lengths_of(n, seq_len, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(math.log(400), 1.2, n).astype(np.int64), 1, seq_len)


def best(fn, repeat):
    out, cpu, wall = None, math.inf, math.inf
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        out = fn()
        cpu, wall = min(cpu, time.process_time() - c), min(wall, time.perf_counter() - w)
    return out, cpu, wall


def plan_side(lengths, seq_len, world, batch, repeat):
    plan, cpu, wall = best(lambda: shardkit.TrainPlan(lengths, seq_len, batch, world), repeat)
    s = plan.summary
    rows = plan.num_steps * world * batch
    return dict(
        docs_per_s=len(lengths) / cpu,
        wall=wall,
        cpu=cpu,
        over_bound=rows / s.lower_bound - 1,
        stream_over_bound=s.packs / s.lower_bound - 1,
        imbalance=s.max_full_step_imbalance,
    )


def loader_side(tokens, offsets, seq_len, batch, world, equal_steps, repeat, threads=0):
    def run():
        lo = shardkit.TokenLoader(
            tokens,
            offsets,
            seq_len=seq_len,
            batch_size=batch,
            rank=0,
            world_size=world,
            num_threads=threads,
            equal_steps=equal_steps,
        )
        real = rows = 0
        for b in lo:
            real += int(b["row_tokens"].sum())
            rows += b["input_ids"].shape[0]
        return real, rows

    (real, rows), cpu, wall = best(run, repeat)
    return dict(
        tokens_per_s=real / cpu,
        tokens_per_wall_s=real / wall,
        wall=wall,
        cpu=cpu,
        padding=1 - real / (rows * seq_len),
    )


def grain_side(tokens, offsets, seq_len, bins, kind, repeat):
    import grain.python as gp
    from grain import experimental as ge

    docs = [tokens[offsets[d] : offsets[d + 1]] for d in range(len(offsets) - 1)]
    cls = ge.FirstFitPackIterDataset if kind == "first" else ge.BestFitPackIterDataset

    def run():
        ds = gp.MapDataset.source(docs).map(lambda t: {"tokens": t}).to_iter_dataset()
        packed = cls(
            ds, length_struct={"tokens": seq_len}, num_packing_bins=bins, shuffle_bins=False
        )
        real = rows = 0
        for ex in packed:
            real += int((ex["tokens_segment_ids"] > 0).sum())
            rows += 1
        return real, rows

    (real, rows), cpu, wall = best(run, repeat)
    return dict(tokens_per_s=real / cpu, wall=wall, cpu=cpu, padding=1 - real / (rows * seq_len))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--docs", type=int, default=2_000_000, help="documents for the plan")
    ap.add_argument("--loader-docs", type=int, default=50_000, help="documents for the loaders")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--loader-repeat",
        type=int,
        default=10,
        help="rounds of section 3 (each run is short; the best of many is what an unloaded "
        "machine would give)",
    )
    ap.add_argument("--only-loaders", action="store_true", help="section 3 only")
    ap.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    args = ap.parse_args()
    if args.quick:
        args.docs, args.loader_docs, args.repeat, args.loader_repeat = 200_000, 10_000, 1, 1
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}; seq_len {args.seq_len}, world {args.world}, "
        f"batch {args.batch}; min of {args.repeat} run(s)"
    )

    small = lengths_of(args.loader_docs, args.seq_len, seed=1)
    offsets = np.concatenate([[0], np.cumsum(small)])
    tokens = (np.arange(offsets[-1]) % 50_000).astype(np.int32)
    if not args.only_loaders:
        plan_and_grain(args, tokens, offsets)
    loaders(args, tokens, offsets)


def plan_and_grain(args, tokens, offsets):
    lengths = lengths_of(args.docs, args.seq_len)
    p = plan_side(lengths, args.seq_len, args.world, args.batch, args.repeat)
    print(
        f"\n1. TrainPlan over {args.docs:,} documents: {p['docs_per_s'] / 1e6:.2f} M docs / CPU s "
        f"({p['cpu']:.3f} CPU s, {p['wall']:.3f} s wall); rows over the lower bound "
        f"{100 * p['over_bound']:.3f}% (packs alone {100 * p['stream_over_bound']:.3f}%); "
        f"max imbalance of a full step {100 * p['imbalance']:.3f}%"
    )

    ours = loader_side(tokens, offsets, args.seq_len, args.batch, 1, True, args.repeat)
    print(
        f"\n2. packed batches of {args.loader_docs:,} documents ({offsets[-1] / 1e6:.1f} M tokens), "
        "one process:"
    )
    print(f"   {'side':46s} {'M tokens / CPU s':>17s} {'padding':>9s} {'shardkit is':>12s}")
    print(
        f"   {'shardkit TokenLoader (equal steps, 1 thread)':46s} "
        f"{ours['tokens_per_s'] / 1e6:17.1f} {100 * ours['padding']:8.3f}% {'1x':>12s}"
    )
    for kind in ("first", "best"):
        try:
            g = grain_side(
                tokens, offsets, args.seq_len, args.world * args.batch, kind, args.repeat
            )
        except ImportError as e:
            print(f"   grain {kind}-fit: not installed ({e})")
            continue
        name = f"grain {'FirstFit' if kind == 'first' else 'BestFit'}PackIterDataset ({args.world * args.batch} bins)"
        print(
            f"   {name:46s} {g['tokens_per_s'] / 1e6:17.1f} {100 * g['padding']:8.3f}% "
            f"{ours['tokens_per_s'] / g['tokens_per_s']:11.1f}x"
        )


def loaders(args, tokens, offsets):
    # 3. The same rank with the equal-steps plan and with the per-rank plan,
    # interleaved run by run so that both see the same load: 0 threads (all in
    # the caller's thread: CPU per token) and 1 or 2 collating threads (plus
    # the planning thread: wall-clock tokens/s, what a training loop sees).
    print(
        f"\n3. TokenLoader rank 0 of {args.world}, equal steps vs per-rank plan, best of "
        f"{args.loader_repeat} interleaved rounds (load average now {os.getloadavg()[0]:.1f}):"
    )
    print(
        f"   {'threads':>7s} {'equal M tok/CPU s':>18s} {'per-rank':>9s} {'ratio':>6s}"
        f" {'equal M tok/wall s':>19s} {'per-rank':>9s} {'ratio':>6s}"
    )
    keys = ("tokens_per_s", "tokens_per_wall_s")
    for threads in (0, 1, 2):
        eq = {k: 0.0 for k in keys}
        pr = {k: 0.0 for k in keys}
        for _ in range(args.loader_repeat):
            e = loader_side(tokens, offsets, args.seq_len, args.batch, args.world, True, 1, threads)
            p_ = loader_side(
                tokens, offsets, args.seq_len, args.batch, args.world, False, 1, threads
            )
            eq = {k: max(eq[k], e[k]) for k in keys}
            pr = {k: max(pr[k], p_[k]) for k in keys}
        print(
            f"   {threads:7d} {eq['tokens_per_s'] / 1e6:18.1f} {pr['tokens_per_s'] / 1e6:9.1f} "
            f"{eq['tokens_per_s'] / pr['tokens_per_s']:6.2f} {eq['tokens_per_wall_s'] / 1e6:19.1f} "
            f"{pr['tokens_per_wall_s'] / 1e6:9.1f} {eq['tokens_per_wall_s'] / pr['tokens_per_wall_s']:6.2f}"
        )


if __name__ == "__main__":
    main()
