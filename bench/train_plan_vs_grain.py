"""Equal-steps training data, side by side in one run on the same lengths:

1. planning: shardkit.TrainPlan (the global pack plan of one epoch, what every
   rank computes at the start of an epoch) in documents/s on one core, and its
   padding against the lower bound ceil(tokens / seq_len);
2. packed token batches: shardkit.TokenLoader (equal steps, no threads) against Grain's
   FirstFitPackIterDataset and BestFitPackIterDataset (grain 0.2.18) over the same
   documents in memory, interleaved round by round: Grain as its ReadOptions docstring
   recommends for data in memory (num_threads=0) and with its default (16) for reference,
   as unbatched rows (what the packers yield: 3 int32 arrays, 12 B per slot) and through
   .batch(batch) (the same [batch, seq_len] form as shardkit's: 28 B per slot, input_ids,
   labels, position_ids int64 + document_ids int32), and .mp_prefetch(2 workers) tried
   (its workers' CPU counted). Tokens per CPU and wall second, bytes per slot, padding,
   and numpy's streaming / in-cache copy of the same bytes beside (bench_util);
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
minimum over --repeat runs; CPU seconds are the process's and its reaped workers'
(bench_util.cpu_seconds), wall seconds beside. Grain runs in this process except with
.mp_prefetch, whose workers' CPU is counted.
"""

from __future__ import annotations

import argparse
import math
import os
import platform

import bench_util
import numpy as np

import shardkit


def lengths_of(n, seq_len, seed=0):
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(math.log(400), 1.2, n).astype(np.int64), 1, seq_len)


def best(fn, repeat):
    """(output, best CPU s, best wall s) of `repeat` runs (bench_util's rule)."""
    b = bench_util.interleaved({"side": fn}, repeat)["side"]
    return b.out, b.cpu, b.wall


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
        options = dict(seq_len=seq_len, batch_size=batch, world_size=world)
        return bench_util.loader_epoch(
            tokens, offsets, **options, num_threads=threads, equal_steps=equal_steps
        )

    (real, rows), cpu, wall = best(run, repeat)
    return dict(
        tokens_per_s=real / cpu,
        tokens_per_wall_s=real / wall,
        wall=wall,
        cpu=cpu,
        padding=1 - real / (rows * seq_len),
    )


def grain_side(tokens, offsets, seq_len, bins, kind, threads=0, batch=0, mp_workers=0):
    """One Grain pipeline over the documents in memory, as a function of no arguments
    returning (real tokens, rows, bytes delivered). threads: ReadOptions(num_threads=...)
    (Grain's default is 16; its docstring recommends 0 for data already in memory);
    batch > 0: rows stacked into [batch, seq_len] arrays by Grain's .batch (the same
    output form as shardkit's batches); mp_workers > 0: .mp_prefetch with that many
    worker processes (their CPU time is charged: bench_util.cpu_seconds)."""
    import grain.python as gp
    from grain import experimental as ge

    docs = [tokens[offsets[d] : offsets[d + 1]] for d in range(len(offsets) - 1)]
    cls = ge.FirstFitPackIterDataset if kind == "first" else ge.BestFitPackIterDataset

    def run():
        ds = (
            gp.MapDataset.source(docs)
            .map(lambda t: {"tokens": t})
            .to_iter_dataset(gp.ReadOptions(num_threads=threads, prefetch_buffer_size=500))
        )
        ds = cls(ds, length_struct={"tokens": seq_len}, num_packing_bins=bins, shuffle_bins=False)
        if batch:
            ds = ds.batch(batch)
        if mp_workers:
            from absl import flags  # Grain's workers read absl flags (parsed by absl.app)

            if not flags.FLAGS.is_parsed():
                flags.FLAGS.mark_as_parsed()
            ds = ds.mp_prefetch(gp.MultiprocessingOptions(num_workers=mp_workers))
        it = iter(ds)
        real = rows = nbytes = 0
        for ex in it:
            real += int((ex["tokens_segment_ids"] > 0).sum())
            rows += ex["tokens"].size // seq_len
            nbytes += sum(v.nbytes for v in ex.values())
        if mp_workers:
            it.close()
        return real, rows, nbytes

    return run


def grain_sides(tokens, offsets, args):
    bins = args.world * args.batch
    sides = {}
    for kind, name in (("first", "FirstFit"), ("best", "BestFit")):
        sides[f"grain {name}, rows, num_threads=16 (default)"] = grain_side(
            tokens, offsets, args.seq_len, bins, kind, threads=16
        )
        sides[f"grain {name}, rows, num_threads=0"] = grain_side(
            tokens, offsets, args.seq_len, bins, kind
        )
        sides[f"grain {name}, .batch({args.batch}), num_threads=0"] = grain_side(
            tokens, offsets, args.seq_len, bins, kind, batch=args.batch
        )
    sides[f"grain FirstFit, .batch({args.batch}), mp_prefetch(2)"] = grain_side(
        tokens, offsets, args.seq_len, bins, "first", batch=args.batch, mp_workers=2
    )
    return sides


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--docs", type=int, default=2_000_000, help="documents for the plan")
    ap.add_argument("--loader-docs", type=int, default=50_000, help="documents for the loaders")
    bench_util.add_job_arguments(ap, "--seq-len", "--world", "--batch")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--grain-docs", type=int, default=10_000, help="documents for section 2")
    ap.add_argument("--grain-rounds", type=int, default=3, help="interleaved rounds of section 2")
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
        (args.docs, args.loader_docs, args.repeat, args.loader_repeat) = (200_000, 10_000, 1, 1)
        args.grain_docs, args.grain_rounds = 2_000, 1
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

    grain_vs_loader(args)


def shardkit_batches(tokens, offsets, seq_len, batch):
    """shardkit's side of section 2: (real tokens, rows, bytes of the per-slot arrays)."""

    def run():
        lo = shardkit.TokenLoader(
            tokens, offsets, seq_len=seq_len, batch_size=batch, num_threads=0, equal_steps=True
        )
        real = rows = nbytes = 0
        for b in lo:
            real += int(b["row_tokens"].sum())
            rows += b["input_ids"].shape[0]
            nbytes += sum(
                b[k].nbytes for k in ("input_ids", "labels", "position_ids", "document_ids")
            )
        return real, rows, nbytes

    return run


def grain_vs_loader(args):
    small = lengths_of(args.grain_docs, args.seq_len, seed=2)
    offsets = np.concatenate([[0], np.cumsum(small)])
    tokens = (np.arange(offsets[-1]) % 50_000).astype(np.int32)
    ours_name = f"shardkit TokenLoader, [{args.batch}, {args.seq_len}] batches, 0 threads"
    sides = {ours_name: shardkit_batches(tokens, offsets, args.seq_len, args.batch)}
    try:
        sides.update(grain_sides(tokens, offsets, args))
    except ImportError as e:
        print(f"   grain: not installed ({e})")
    print(
        f"\n2. packed rows of {args.grain_docs:,} documents ({offsets[-1] / 1e6:.1f} M tokens), "
        f"best of {args.grain_rounds} interleaved rounds, CPU s of the process and its "
        f"workers ({bench_util.load_average()} before):"
    )
    best = bench_util.interleaved(sides, args.grain_rounds)
    print(f"   ({bench_util.load_average()} after)")
    ours = best[ours_name]
    ours_rate = ours.out[0] / ours.cpu
    print(
        f"   {'side':52s} {'M tok/CPU s':>11s} {'M tok/wall s':>12s} {'B/slot':>6s} "
        f"{'GB/CPU s':>8s} {'padding':>8s} {'shardkit is':>11s}"
    )
    for name, r in best.items():
        real, rows, nbytes = r.out
        print(
            f"   {name:52s} {real / r.cpu / 1e6:11.1f} {real / r.wall / 1e6:12.1f} "
            f"{nbytes / (rows * args.seq_len):6.0f} {nbytes / r.cpu / 1e9:8.2f} "
            f"{100 * (1 - real / (rows * args.seq_len)):7.3f}% "
            f"{ours_rate / (real / r.cpu):10.1f}x"
        )
    real, rows, nbytes = ours.out
    per_slot = nbytes // (rows * args.seq_len)
    line, stream, cache = bench_util.memcpy_line(
        per_slot, "slots", args.batch * args.seq_len * per_slot
    )
    print(f"   {line}")
    print(
        f"   shardkit writes its batches at {nbytes / ours.cpu / 1e9 / stream:.0%} of streaming "
        f"memcpy, {nbytes / ours.cpu / 1e9 / cache:.0%} of in-cache memcpy (per CPU s)"
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
