"""Context parallelism: causal attention work per CP rank, side by side on the
same rows (docs/loader.md, "Context parallelism").

Rows are packed by shardkit.TrainPlan(cp_size=C) (every document packed at its
length rounded up to 2C, so the per-document split fits) from lognormal and
SFT-like document lengths, and each row is split over C ranks five ways:
contiguous (C runs), document-blind head-tail (2C chunks, rank r takes r and
2C-1-r: torch's _HeadTailLoadBalancer), per-document head-tail (shardkit's
default layout, TransformerEngine's THD rule) and balanced
(cp_strategy="balanced": short documents whole on one CP rank, LPT) and
ptrr (cp_strategy="ptrr": tokens dealt round-robin with mirrored passes). Work of a rank = the keys its real
queries attend causally within their documents (shardkit.cp_rank_work).
Reported per row: max/mean work over the C ranks (mean over rows, and worst),
and the padding inside documents each per-document split costs. Then the deal across DP ranks:
the busiest CP rank's work summed per DP rank per step, max/mean over the DP
ranks, for cost="tokens" against cost="squared" (which deals by that work).
Then planning speed with and without CP (documents per CPU second).

    PYTHONPATH=python .venv/bin/python bench/context_parallel_balance.py [--quick]
"""

import argparse
import functools

import bench_util
import numpy as np

import shardkit

SPLITS = ("contiguous", "head_tail", "document_head_tail", "balanced", "ptrr")


def lengths_of(kind, tokens, rng):
    out, total = [], 0
    while total < tokens:
        if kind == "lognormal":
            n = int(max(1, rng.lognormal(np.log(2000), 1.3)))
        else:  # SFT-like: mostly short conversations, a few long documents
            n = (
                int(rng.integers(4096, 32768))
                if rng.random() < 0.05
                else int(max(8, rng.lognormal(np.log(400), 0.8)))
            )
        out.append(n)
        total += n
    return np.asarray(out, dtype=np.int64)


def row_ratios(plan, seq_len, cp):
    """Per split, max/mean work of every row; the padding inside documents of
    head-tail and of balanced, over the real tokens; and the same ratios over
    the full rows only (the epoch's last, partly filled rows left out)."""
    ratios = {s: [] for s in SPLITS}
    full = {s: [] for s in SPLITS}
    real = padded = balanced_padding = 0
    for s in range(plan.num_steps):
        for r in range(plan.world_size):
            for row in plan.step(r, s):
                lens = [n for _, _, n in row if n > 0]
                if not lens:
                    continue
                real += sum(lens)
                padded += sum(-(-n // (2 * cp)) * 2 * cp for n in lens)
                balanced_padding += shardkit.cp_document_padding(
                    lens, seq_len, cp, cp_strategy="balanced"
                )
                is_full = sum(lens) >= 0.9 * seq_len
                for split in SPLITS:
                    w = shardkit.cp_rank_work(lens, seq_len, cp, split)
                    ratios[split].append(max(w) / (sum(w) / cp))
                    if is_full:
                        full[split].append(ratios[split][-1])
    return ratios, full, (padded - real) / real, balanced_padding / real


def dp_imbalance(plan, seq_len, cp, split="document_head_tail"):
    """Mean and worst over full steps of max/mean over DP ranks of the summed
    busiest-CP-rank work of each DP rank's rows."""
    values = []
    for s in range(plan.num_steps):
        per_rank = []
        for r in range(plan.world_size):
            rows = plan.step(r, s)
            if any(not row for row in rows):
                per_rank = None  # the last step's filler
                break
            per_rank.append(
                sum(
                    max(shardkit.cp_rank_work([n for _, _, n in row], seq_len, cp, split))
                    for row in rows
                )
            )
        if per_rank:
            values.append(max(per_rank) / np.mean(per_rank))
    return float(np.mean(values)), float(np.max(values))


def cp_plan(lengths, seq_len, cp, cost, strategy):
    """The plan of the DP-balance and speed tables: 2 rows on each of 8 DP ranks."""
    return shardkit.TrainPlan(
        lengths, seq_len, batch_size=2, world_size=8, cp_size=cp, cost=cost, cp_strategy=strategy
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer rows and sizes")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = 16 if args.quick else 64
    sizes = (16384, 131072) if args.quick else (16384, 65536, 131072)
    print(
        "| lengths | S | C | contiguous mean / worst | head-tail (blind) mean / worst | per-document head-tail mean / worst | balanced mean / worst (full rows: worst) | ptrr mean / worst | padding head-tail / balanced |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    worst_full = 0.0
    for kind in ("lognormal", "sft"):
        for seq_len in sizes:
            lengths = lengths_of(kind, rows * seq_len, rng)
            for cp in (2, 4, 8):
                plan = shardkit.TrainPlan(
                    lengths, seq_len=seq_len, batch_size=1, world_size=8, cp_size=cp
                )
                ratios, full, padding, balanced_padding = row_ratios(plan, seq_len, cp)
                cell = {s: f"{np.mean(ratios[s]):.3f} / {np.max(ratios[s]):.3f}" for s in SPLITS}
                cell["balanced"] += f" ({np.max(full['balanced']):.3f})"
                cells = " | ".join(cell[s] for s in SPLITS)
                worst_full = max(worst_full, np.max(full["balanced"]))
                print(
                    f"| {kind} | {seq_len // 1024}k | {cp} | {cells} "
                    f"| {100 * padding:.3f}% / {100 * balanced_padding:.3f}% |"
                )
    print(f"\nbalanced, worst full row (>= 90% of seq_len real): {worst_full:.3f}")

    print()
    print(
        "| lengths | S | C | DP max/mean, cost=tokens: mean / worst | cost=squared (CP work): mean / worst | cost=squared, balanced: mean / worst |"
    )
    print("|---|---|---|---|---|---|")
    for kind in ("lognormal", "sft"):
        seq_len = 32768
        lengths = lengths_of(kind, (64 if args.quick else 256) * seq_len, rng)
        for cp in (2, 8):
            cells = []
            for cost, strategy in (
                ("tokens", "head_tail"),
                ("squared", "head_tail"),
                ("squared", "balanced"),
            ):
                plan = cp_plan(lengths, seq_len, cp, cost, strategy)
                split = "balanced" if strategy == "balanced" else "document_head_tail"
                cells.append("%.3f / %.3f" % dp_imbalance(plan, seq_len, cp, split))
            print(f"| {kind} | {seq_len // 1024}k | {cp} | {' | '.join(cells)} |")

    print()
    n = 200_000 if args.quick else 4_000_000
    lengths = np.maximum(1, rng.lognormal(np.log(2000), 1.3, n)).astype(np.int64)
    configs = (
        (1, "tokens", "head_tail"),
        (8, "tokens", "head_tail"),
        (1, "squared", "head_tail"),
        (8, "squared", "head_tail"),
        (8, "squared", "balanced"),
    )
    # bench_util: rounds interleave the configurations (a shared machine drifts), best CPU s
    sides = bench_util.interleaved(
        {c: functools.partial(cp_plan, lengths, 32768, *c) for c in configs}, 5
    )
    best = {c: sides[c].cpu for c in configs}
    print("| plan | cost | cp_strategy | documents per CPU second (best of 5) | vs cp_size=1 |")
    print("|---|---|---|---|---|")
    for cp, cost, strategy in configs:
        ratio = best[1, cost, "head_tail"] / best[cp, cost, strategy]
        rate = n / best[cp, cost, strategy] / 1e6
        print(f"| cp_size={cp} | {cost} | {strategy} | {rate:.2f} M | {ratio:.3f} |")
    print(bench_util.load_average())


if __name__ == "__main__":
    main()
