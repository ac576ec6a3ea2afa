"""Per-step balance of vision work across ranks: nanoVLM's ConstantLengthDataset
(each rank packs its own strided share with its balanced greedy knapsack, as
transcribed in bench/packing_peers.py, here with max 6 images per sample so
that no sample is dropped; step s pairs every rank's s-th pack, and the run
stops with the rank that has the fewest), shardkit's ConstantLengthDataset
before this change (one TrainPlan over lengths and image counts, balanced
packer, deal by tokens) and MultimodalPlan (deal by vision cost), on the
issue's mixes.

Mixes (seed 1): 1,500 VQA-style samples, 20-300 text tokens, 0-6 images;
  fixed:  64 vision tokens per image, inlined in the LM sequence;
  tiles:  1-13 tiles of 64-256 tokens per image (vision cost), 64 LM tokens
          per image after the connector.
seq_len 1024, 18 images per pack, 1 row per rank per step. Vision mean /
worst: heaviest rank / mean rank per step, over the steps without filler rows;
padding: of every row of the plan (the last step's filler rows included); in
packs: of the packs alone; bound: the least padding of any equal-steps plan that never
splits a sample (ceil(ceil(tokens / seq_len) / W) steps). nanoVLM has no filler rows: its ranks run different
numbers of packs (the steps past the shortest rank are not counted).

    PYTHONPATH=python .venv/bin/python bench/multimodal_balance.py
"""

from __future__ import annotations

import numpy as np
from shardkit.multimodal import MultimodalPlan

from shardkit import TrainPlan


def mix(tiles: bool, seed: int = 1, n: int = 1500):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 7, n)
    vision, lengths = [], []
    for c in counts:
        v = rng.integers(1, 14, c) * rng.integers(64, 257, c) if tiles else np.full(c, 64, np.int64)
        vision.append(v)
        lengths.append(int(rng.integers(20, 301)) + (64 * c if tiles else int(v.sum())))
    return np.asarray(lengths, np.int64), counts.astype(np.int64), vision


def ratios(per_step_rank: np.ndarray) -> np.ndarray:
    mean = per_step_rank.mean(axis=1)
    out = np.ones(len(per_step_rank))
    nz = mean > 0
    out[nz] = per_step_rank.max(axis=1)[nz] / mean[nz]
    return out


def _knapsack(lengths, images, cap, num_of_sequences=1024, max_images=18, delta=5):
    """nanoVLM's _balanced_greedy_knapsack per buffer (bench/packing_peers.py's
    transcription), returning the packs as lists of sample positions."""
    out, i, n = [], 0, len(lengths)
    while i < n:
        buf, held = [], 0
        while i < n and held < num_of_sequences * cap:
            if lengths[i] <= cap and images[i] <= 6:
                buf.append(i)
                held += lengths[i]
            i += 1
        if not buf:
            break
        k = -(-sum(lengths[j] for j in buf) // cap) + delta
        load, imgs, groups = [0] * k, [0] * k, [[] for _ in range(k)]
        for j in sorted(buf, key=lambda x: lengths[x], reverse=True):
            chosen = None
            for ks in sorted(range(len(load)), key=load.__getitem__):
                if load[ks] + lengths[j] <= cap and imgs[ks] + images[j] <= max_images:
                    chosen = ks
                    break
            if chosen is None:
                load.append(0), imgs.append(0), groups.append([])
                chosen = len(load) - 1
            groups[chosen].append(j)
            load[chosen] += lengths[j]
            imgs[chosen] += images[j]
        out += [g for g in groups if g]
    return out


def nanovlm(lengths, counts, vision, world, squared):
    cost = [float((v**2).sum() if squared else v.sum()) for v in vision]
    per_rank = []
    for r in range(world):
        share = list(range(r, len(lengths), world))
        packs = _knapsack([int(lengths[i]) for i in share], [int(counts[i]) for i in share], 1024)
        per_rank.append([[share[j] for j in p] for p in packs])
    steps = min(len(p) for p in per_rank)
    vis = np.array(
        [[sum(cost[i] for i in per_rank[r][s]) for r in range(world)] for s in range(steps)]
    )
    tok = np.array(
        [[sum(int(lengths[i]) for i in per_rank[r][s]) for r in range(world)] for s in range(steps)]
    )
    packs = sum(len(p) for p in per_rank)
    pad = 1 - sum(int(lengths[i]) for p in per_rank for q in p for i in q) / (packs * 1024)
    return ratios(vis), ratios(tok), pad, pad


def today(lengths, counts, vision, world, squared):
    plan = TrainPlan(
        lengths,
        1024,
        1,
        world,
        shuffle=False,
        algorithm="balanced",
        images=counts,
        max_images=18,
        oversize="drop",
    )
    cost = np.array([float((v**2).sum() if squared else v.sum()) for v in vision])
    steps = plan.summary.num_steps
    vis = np.zeros((steps, world))
    tok = np.zeros((steps, world))
    full = np.ones(steps, bool)
    for r in range(world):
        for s, rows in enumerate(plan.steps(r)):
            for row in rows:
                full[s] &= bool(row)
                for d, _, length in row:
                    vis[s, r] += cost[d]
                    tok[s, r] += length
    pad = 1 - plan.summary.tokens / (steps * world * 1024)
    return (
        ratios(vis[full]),
        ratios(tok[full]),
        pad,
        1 - plan.summary.tokens / (plan.summary.packs * 1024),
    )


def ours(lengths, counts, vision, world, squared):
    flat = np.concatenate(vision) if len(vision) else np.zeros(0, np.int64)
    plan = MultimodalPlan(
        lengths,
        counts,
        flat,
        seq_len=1024,
        world_size=world,
        max_images=18,
        vision_cost="squared" if squared else "tokens",
        shuffle=False,
    )
    b = plan.balance
    full = np.ones(plan.num_steps, bool)
    if plan.summary["filler_rows"]:
        full[-1] = False
    s = plan.summary
    pad = 1 - s["tokens"] / (plan.num_steps * world * 1024)
    return (
        b["vision_ratio"][full],
        b["token_ratio"][full],
        pad,
        1 - s["tokens"] / (s["packs"] * 1024),
        bound(s["tokens"], world),
    )


def bound(tokens, world, seq_len=1024):
    """The least padding of any equal-steps plan of one row per rank that never splits a
    sample: at least ceil(tokens / seq_len) rows hold data, so at least
    ceil(that / world) steps run."""
    rows = -(-tokens // seq_len)
    return 1 - tokens / (-(-rows // world) * world * seq_len)


def main():
    print(
        f"{'mix':6} {'cost':8} {'W':>2} {'plan':16} {'vision mean':>11} {'worst':>6} "
        f"{'tokens mean':>11} {'worst':>6} {'padding':>8} {'in packs':>8} {'bound':>8}"
    )
    for tiles in (False, True):
        lengths, counts, vision = mix(tiles)
        for squared in (False, True):
            for world in (4, 8):
                for name, fn in (
                    ("nanoVLM", nanovlm),
                    ("today (TrainPlan)", today),
                    ("MultimodalPlan", ours),
                ):
                    v, t, pad, in_packs, *least = fn(lengths, counts, vision, world, squared)
                    print(
                        f"{'tiles' if tiles else 'fixed':6} {'squared' if squared else 'tokens':8} "
                        f"{world:2} {name:16} {v.mean():11.3f} {v.max():6.3f} "
                        f"{t.mean():11.3f} {t.max():6.3f} {100 * pad:7.2f}% {100 * in_packs:7.2f}%"
                        + (f" {100 * least[0]:7.2f}%" if least else "")
                    )


if __name__ == "__main__":
    main()
