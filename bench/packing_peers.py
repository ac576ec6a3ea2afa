"""Packing, side by side in one run on the same lengths: shardkit vs TRL's
pack_dataset bfd, nanoVLM's balanced greedy knapsack and mmdp's first-fit
(binpack) and greedy packers with their default buffers; every shardkit
algorithm on the Wikipedia-512 histogram of Krell et al. beside the paper's
published SPFHP / LPFHP / NNLSHP figures; a multimodal mix with load CV.

    PYTHONPATH=python build/bench-venv/bin/python bench/packing_peers.py [--quick]

TRL is the installed package (trl in requirements-bench.txt; `make bench` installs it
into build/bench-venv, which sees the project venv): its
`_pack_bfd` (what pack_dataset(strategy="bfd") runs per map batch) is called
once on an Arrow table of all the lengths whose list column holds null values
(no token memory), so only its packing is timed. nanoVLM and mmdp are not
packages: their algorithms are transcribed below from the published facts
(mmdp: sort the buffer of 512 items decreasing, first pack whose sum(pack) +
item fits, else a new pack; greedy = next fit. nanoVLM ConstantLengthDataset:
fill a buffer until it holds num_of_sequences x seq_length tokens (1024 x),
drop samples over max_sample_length or with more than 4 images, open
ceil(sum / L) + 5 knapsacks, take items by decreasing length, put each into
the least loaded knapsack (loads re-sorted per item) that fits the tokens and
18 images, else open a new one; every knapsack is emitted). axolotl's multipack
is not measured: installing axolotl replaces numpy, transformers and trl in
the project venv.

Pure-Python peers are O(n) to O(n^2) per buffer in Python and are timed on a
prefix of each data set (said in the output); throughput is items per second
(wall, and per CPU s beside: bench_util's best of the repeats),
efficiency is real tokens / (packs x capacity), "over LB" is packs / ceil(sum /
capacity) - 1 on the same items.
"""

from __future__ import annotations

import argparse
import math
import os
import platform

import bench_util
import numpy as np

import shardkit


def lognormal(rng, n, cap):
    return np.clip(rng.lognormal(math.log(600), 1.0, n).astype(np.int64), 1, cap)


def heavy_mix(rng, n, cap):
    # 85% short chat turns (median 150), 15% Pareto-tailed long documents.
    short = rng.lognormal(math.log(150), 0.7, n)
    long = (rng.pareto(1.2, n) + 1) * 1500
    pick = rng.random(n) < 0.15
    return np.clip(np.where(pick, long, short).astype(np.int64), 1, cap)


def timed(fn, repeat=1):
    """(bench_util.Best: the best wall and CPU s of `repeat` runs, output)."""
    best = bench_util.interleaved({"side": fn}, repeat)["side"]
    return best, best.out


# ---------------------------------------------------------------------------
# Peers


def trl_bfd(lengths, cap):
    import pyarrow as pa
    from trl.data_utils import _pack_bfd

    offsets = np.concatenate([[0], np.cumsum(lengths)])
    column = pa.LargeListArray.from_arrays(
        pa.array(offsets, pa.int64()), pa.nulls(int(offsets[-1]))
    )
    table = pa.table({"input_ids": column})
    packed = _pack_bfd(table, cap)
    return packed.num_rows


def mmdp_binpack(lengths, cap, buffer_size=512):
    # transcription: sort each buffer decreasing, first fit by sum(pack)
    packs = 0
    for start in range(0, len(lengths), buffer_size):
        buffer = sorted(lengths[start : start + buffer_size].tolist(), reverse=True)
        knapsacks = []
        for item in buffer:
            if item > cap:
                continue
            for pack in knapsacks:
                if sum(pack) + item <= cap:
                    pack.append(item)
                    break
            else:
                knapsacks.append([item])
        packs += len(knapsacks)
    return packs


def mmdp_greedy(lengths, cap):
    packs, load = 0, None
    for item in lengths.tolist():
        if item > cap:
            continue
        if load is not None and load + item <= cap:
            load += item
        else:
            packs += 1
            load = item
    return packs


def nanovlm_knapsack(
    lengths,
    images,
    cap,
    num_of_sequences=1024,
    max_images_per_example=4,
    max_images_per_knapsack=18,
    delta=5,
):
    # transcription of the facts of ConstantLengthDataset (see module doc)
    packs, tokens = 0, 0
    budget = num_of_sequences * cap
    i, n = 0, len(lengths)
    L = lengths.tolist()
    I = images.tolist()
    while i < n:
        buf_len, buf_img, held = [], [], 0
        while i < n and held < budget:
            if L[i] <= cap and I[i] <= max_images_per_example:
                buf_len.append(L[i])
                buf_img.append(I[i])
                held += L[i]
            i += 1
        if not buf_len:
            break
        k = (sum(buf_len) + cap - 1) // cap + delta
        load = [0] * k
        imgs = [0] * k
        groups = [[] for _ in range(k)]
        order = sorted(range(len(buf_len)), key=lambda x: buf_len[x], reverse=True)
        for idx in order:
            n_len, n_img = buf_len[idx], buf_img[idx]
            chosen = None
            for ks in sorted(range(len(load)), key=load.__getitem__):
                if load[ks] + n_len <= cap and imgs[ks] + n_img <= max_images_per_knapsack:
                    chosen = ks
                    break
            if chosen is None:
                load.append(0)
                imgs.append(0)
                groups.append([])
                chosen = len(load) - 1
            groups[chosen].append(idx)
            load[chosen] += n_len
            imgs[chosen] += n_img
        packs += sum(1 for g in groups if g)
        tokens += sum(load)
    return packs, tokens


# ---------------------------------------------------------------------------


def report(name, n, best, packs, tokens, cap, lower_bound, note=""):
    """One row; returns (items per wall s, items per CPU s)."""
    eff = tokens / (packs * cap) if packs else 1.0
    over = packs / lower_bound - 1 if lower_bound else 0.0
    rate = n / best.wall if best.wall > 0 else math.inf
    cpu_rate = n / best.cpu if best.cpu > 0 else math.inf
    print(
        f"  {name:<34} {n:>10,} {best.wall:>9.3f}s {rate / 1e6:>10.3f}M/s "
        f"{best.cpu:>8.3f}s {cpu_rate / 1e6:>10.3f}M/s "
        f"{100 * eff:>9.4f}% {100 * over:>9.4f}%  {note}"
    )
    return rate, cpu_rate


def header():
    print(
        f"  {'packer':<34} {'items':>10} {'wall':>10} {'items/s':>11} {'CPU':>9} "
        f"{'per CPU s':>11} {'efficiency':>10} {'over LB':>9}"
    )


def text_case(rng, dist, n, cap, peer_items, trl_items):
    lengths = (lognormal if dist == "lognormal" else heavy_mix)(rng, n, cap)
    total = int(lengths.sum())
    lb = -(-total // cap)
    print(f"\n{dist}, n = {n:,}, capacity {cap}: {total:,} tokens, lower bound {lb:,} packs")
    header()
    rates = {}
    for algorithm in ("bfd", "ffd", "next_fit") + (("balanced",) if n <= 1_000_000 else ()):
        sec, p = timed(
            lambda: shardkit.pack(lengths, cap, algorithm=algorithm),
            repeat=3 if n <= 1_000_000 else 1,
        )
        rates[algorithm] = report(f"shardkit {algorithm}", n, sec, p.num_packs, p.tokens, cap, lb)
    if trl_items:
        m = min(n, trl_items)
        sub = lengths[:m]
        sub_lb = -(-int(sub.sum()) // cap)
        sec_s, p = timed(lambda: shardkit.pack(sub, cap, algorithm="bfd"), repeat=3)
        report("shardkit bfd (same prefix)", m, sec_s, p.num_packs, p.tokens, cap, sub_lb)
        sec, packs = timed(lambda: trl_bfd(sub, cap))
        trl_rate = report(
            "TRL pack_dataset bfd",
            m,
            sec,
            packs,
            int(sub.sum()),
            cap,
            sub_lb,
            "" if m == n else f"(first {m:,} items)",
        )
        print(
            f"  -> shardkit bfd is {rates['bfd'][0] / trl_rate[0]:,.0f}x TRL's bfd in items/s "
            f"(wall), {rates['bfd'][1] / trl_rate[1]:,.0f}x per CPU s ({bench_util.load_average()})"
        )
    if peer_items:
        m = min(n, peer_items)
        sub = lengths[:m]
        sub_lb = -(-int(sub.sum()) // cap)
        for name, peer in (
            ("mmdp binpack (FFD, buffer 512)", mmdp_binpack),
            ("mmdp greedy (next fit)", mmdp_greedy),
        ):
            sec, packs = timed(lambda: peer(sub, cap))
            report(name, m, sec, packs, int(sub.sum()), cap, sub_lb, f"(first {m:,} items)")
        sec, p = timed(lambda: shardkit.pack(sub, cap, algorithm="bfd", buffer=512))
        report("shardkit bfd, buffer 512", m, sec, p.num_packs, p.tokens, cap, sub_lb)


def multimodal_case(rng, n, cap, peer_items):
    lengths = np.clip(rng.lognormal(math.log(500), 0.8, n).astype(np.int64), 16, 2 * cap)
    images = rng.integers(0, 5, n)  # 0-4 images per sample
    keep = (lengths <= cap) & (images <= 4)
    print(
        f"\nmultimodal, n = {n:,} samples, seq_len {cap}, images 0-4 per sample "
        f"(uniform), <= 18 images per pack; samples over {cap} tokens are dropped by all"
    )
    header()
    m = min(n, peer_items)
    sub_len, sub_img = lengths[:m], images[:m]
    k = keep[:m]
    lb = max(-(-int(sub_len[k].sum()) // cap), -(-int(sub_img[k].sum()) // 18))
    sec, (packs, tokens) = timed(lambda: nanovlm_knapsack(sub_len, sub_img, cap))
    report(
        "nanoVLM balanced knapsack",
        m,
        sec,
        packs,
        tokens,
        cap,
        lb,
        f"(first {m:,} samples; buffer 1024 x seq_len tokens, delta 5)",
    )
    for algorithm, buffer in (("balanced", None), ("balanced", 8192), ("bfd", None)):
        sec, p = timed(
            lambda: shardkit.pack(
                sub_len,
                cap,
                algorithm=algorithm,
                images=sub_img,
                max_images=18,
                buffer=buffer,
            ),
            repeat=3,
        )
        report(
            f"shardkit {algorithm}" + (f", buffer {buffer}" if buffer else ""),
            m,
            sec,
            p.num_packs,
            p.tokens,
            cap,
            lb,
        )


# ---------------------------------------------------------------------------
# Wikipedia-512 (Krell et al., arXiv 2107.02027): the histogram is transcribed
# in shardkit/packing/internal/wikipedia512_histogram.h (source named there).
# The paper's packers (SPFHP, LPFHP, NNLSHP) are Graphcore example scripts, not
# an installable package: their published figures are printed beside.

PUBLISHED = {
    3: [("NNLSHP (paper)", 8_155_059, None)],
    12: [("LPFHP (paper)", 8_149_619, None), ("SPFHP (paper)", None, 0.996040)],
}


def wikipedia_lengths():
    import re

    here = os.path.dirname(os.path.abspath(__file__))
    header = os.path.join(here, "..", "shardkit", "packing", "internal", "wikipedia512_histogram.h")
    text = open(header).read()
    body = text[text.index("= {") + 3 : text.index("};")]
    counts = [int(x) for x in re.findall(r"\d+", body)]
    assert len(counts) == 512
    lengths = np.repeat(np.arange(1, 513, dtype=np.int64), counts)
    np.random.default_rng(1).shuffle(lengths)
    return lengths


def load_cv(p):
    tokens = p.pack_tokens()
    return float(tokens.std() / tokens.mean()) if tokens.size else 0.0


def wikipedia_case(algorithms):
    lengths = wikipedia_lengths()
    total = int(lengths.sum())
    lb = -(-total // 512)
    print(
        f"\nWikipedia-512 histogram (Krell et al.): {lengths.size:,} sequences, {total:,} tokens, "
        f"capacity 512, lower bound {lb:,} packs"
    )
    for k in (3, 12):
        print(f" at most {k} sequences per pack")
        print(
            f"  {'packer':<26} {'packs':>11} {'efficiency':>10} {'over LB':>9} {'wall':>9} "
            f"{'CPU':>9} {'load CV':>8}"
        )
        for algorithm in algorithms:
            sec, p = timed(
                lambda: shardkit.pack(lengths, 512, algorithm=algorithm, max_sequences=k)
            )
            print(
                f"  shardkit {algorithm:<17} {p.num_packs:>11,} {100 * p.efficiency:>9.4f}% "
                f"{100 * (p.num_packs / lb - 1):>8.3f}% {sec.wall:>8.2f}s {sec.cpu:>8.2f}s "
                f"{load_cv(p):>8.4f}"
            )
        for name, packs, eff in PUBLISHED[k]:
            if packs is None:
                packs = total / (eff * 512)
                print(f"  {name:<26} {packs:>11,.0f} {100 * eff:>9.4f}%  (published efficiency)")
            else:
                print(
                    f"  {name:<26} {packs:>11,} {100 * total / (packs * 512):>9.4f}% "
                    f"{100 * (packs / lb - 1):>8.3f}%  (published)"
                )


def multimodal_gamma_case(n=1_000_000, cap=4096):
    rng = np.random.default_rng(11)
    lengths = np.minimum(cap, 16 + rng.gamma(2.0, 300.0, n).astype(np.int64))
    images = rng.integers(0, 5, n)
    lb = max(-(-int(lengths.sum()) // cap), -(-int(images.sum()) // 18))
    print(
        f"\nmultimodal gamma mix, n = {n:,}: lengths 16 + gamma(2, 300) clamped to {cap}, "
        f"0-4 images per sample, <= 18 images per pack; lower bound {lb:,}"
    )
    print(
        f"  {'packer':<26} {'packs':>9} {'efficiency':>10} {'over LB':>9} {'wall':>9} "
        f"{'CPU':>9} {'load CV':>8}"
    )
    for algorithm in ("balanced", "bfd", "ffd"):
        sec, p = timed(
            lambda: shardkit.pack(lengths, cap, algorithm=algorithm, images=images, max_images=18)
        )
        print(
            f"  shardkit {algorithm:<17} {p.num_packs:>9,} {100 * p.efficiency:>9.4f}% "
            f"{100 * (p.num_packs / lb - 1):>8.3f}% {sec.wall:>8.2f}s {sec.cpu:>8.2f}s "
            f"{load_cv(p):>8.4f}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1M only, small peer prefixes")
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--capacities", default="4096,8192")
    parser.add_argument(
        "--trl-items",
        type=int,
        default=200_000,
        help="TRL runs on this prefix of each data set (0: skip)",
    )
    parser.add_argument(
        "--peer-items",
        type=int,
        default=50_000,
        help="mmdp / nanoVLM run on this prefix (0: skip)",
    )
    parser.add_argument(
        "--only",
        default="all",
        choices=["all", "wikipedia", "multimodal", "text"],
        help="run one part only",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.quick:
        sizes, args.trl_items, args.peer_items = [1_000_000], 50_000, 20_000
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}; shardkit {shardkit.__version__}"
    )
    try:
        import trl

        print(f"TRL {trl.__version__}")
    except ImportError:
        print("TRL not installed: skipped (pip install -r requirements-bench.txt)")
        args.trl_items = 0
    if args.only in ("all", "wikipedia"):
        wikipedia_case(("bfd", "ffd", "balanced", "histogram", "next_fit"))
    if args.only in ("all", "multimodal"):
        multimodal_gamma_case()
    if args.only in ("wikipedia", "multimodal"):
        return
    for n in sizes:
        for cap in (int(c) for c in args.capacities.split(",")):
            for dist in ("lognormal", "heavy-tailed mix"):
                rng = np.random.default_rng(n + cap)
                text_case(
                    rng,
                    dist,
                    n,
                    cap,
                    args.peer_items if n == sizes[0] else 0,
                    args.trl_items,
                )
    if args.peer_items:
        multimodal_case(np.random.default_rng(7), 1_000_000, 4096, args.peer_items)


if __name__ == "__main__":
    main()
