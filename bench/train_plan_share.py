"""Equal steps with the shared host plan vs the per-rank plan, per CPU second summed
over a host's ranks (issue 25: "equal steps vs per-rank per CPU second, goal >= 0.95
with the shared host plan").

    PYTHONPATH=python .venv/bin/python bench/train_plan_share.py [--docs 50000]
        [--world 8] [--seq-len 4096] [--batch 8] [--rounds 5] [--threads 0]

One host of --world ranks (local rank = rank) reads one epoch of the same corpus three
ways, every rank's loader built and drained in this process, one rank after the other:

  per-rank    TokenLoader(equal_steps=False): each rank packs its own 1/W of the documents
  equal       TokenLoader(equal_steps=True): each rank plans the whole epoch (all W ranks'
              documents) and keeps its rows
  shared      TokenLoader(equal_steps=True, share_plan=True): local rank 0 plans the epoch
              once and writes every rank's steps to a sealed file in shared memory
              (SHARDKIT_SHARE_PLAN_DIR, default /dev/shm); ranks 1..W-1 map it

Outputs (the same on every side): [batch, seq_len] batches with input_ids, labels,
position_ids (int64) and document_ids (int32), 28 B per slot; the figure is real (not
padding) tokens delivered per CPU second, summed over all W ranks' loaders (construction
included: the plan, the file, the mapping). The three sides run interleaved, one side's
W ranks per turn, best of --rounds rounds; the load average beside. The ranks run one
after another (CPU time does not depend on it; a real host runs them at once, which this
2-core machine cannot).
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import shutil
import tempfile

import bench_util
import numpy as np

import shardkit


def lengths_of(n, seq_len, seed=1):
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(math.log(400), 1.2, n).astype(np.int64), 1, seq_len)


def side(tokens, offsets, args, equal_steps, share, steps):
    def run():
        kw = dict(
            seq_len=args.seq_len,
            batch_size=args.batch,
            world_size=args.world,
            num_threads=args.threads,
            equal_steps=equal_steps,
        )
        if share:
            kw.update(share_plan=True)
        # Local rank 0 first (it writes the file the others map).
        loaders = [
            shardkit.TokenLoader(
                tokens, offsets, rank=r, **kw, **({"local_rank": r} if share else {})
            )
            for r in range(args.world)
        ]
        real = batches = 0
        for lo in loaders:
            # Equal steps: the epoch's `steps` batches, without the call past the last one
            # (which builds the next epoch's loader: with share_plan, local rank 0 plans
            # the next epoch there, work of the next epoch).
            for b in itertools.islice(lo, steps) if equal_steps else lo:
                real += int(b["row_tokens"].sum())
                batches += 1
        del loaders
        return real, batches

    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=50_000)
    bench_util.add_job_arguments(ap, "--world", "--seq-len", "--batch")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0, help="collating threads per loader")
    args = ap.parse_args()
    lengths = lengths_of(args.docs, args.seq_len)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tokens = (np.arange(offsets[-1]) % 50_000).astype(np.int32)
    share_dir = tempfile.mkdtemp(prefix="shardkit_share_bench_", dir="/dev/shm")
    os.environ["SHARDKIT_SHARE_PLAN_DIR"] = share_dir
    print(
        f"machine: {bench_util.machine()}; {args.docs:,} documents, {int(offsets[-1]):,} "
        f"tokens, W = {args.world} ranks on one host, seq_len {args.seq_len}, batch "
        f"{args.batch}, {args.threads} collating threads; best of {args.rounds} interleaved "
        f"rounds"
    )
    steps = shardkit.TrainPlan(
        lengths, seq_len=args.seq_len, batch_size=args.batch, world_size=args.world
    ).num_steps
    sides = {
        "per-rank": side(tokens, offsets, args, False, False, None),
        "equal": side(tokens, offsets, args, True, False, steps),
        "shared": side(tokens, offsets, args, True, True, steps),
    }
    best = bench_util.interleaved(sides, args.rounds)
    shutil.rmtree(share_dir)
    base = best["per-rank"]
    for name in ("equal", "shared"):
        assert best[name].out[1] == steps * args.world, (name, best[name].out, steps)
    assert best["equal"].out == best["shared"].out == (base.out[0], steps * args.world), best
    print(
        f"{'side':>9s} {'tokens':>12s} {'batches':>8s} {'CPU s':>7s} {'wall s':>7s} "
        f"{'M tok/CPU s':>12s} {'vs per-rank':>11s}"
    )
    for name, b in best.items():
        real, batches = b.out
        rate = real / b.cpu
        print(
            f"{name:>9s} {real:12,d} {batches:8d} {b.cpu:7.3f} {b.wall:7.3f} "
            f"{rate / 1e6:12.1f} {rate / (base.out[0] / base.cpu):11.2f}"
        )
    print(f"after: {bench_util.load_average()}")
    print(bench_util.memcpy_line(28, "slots", 28 * args.batch * args.seq_len)[0])


if __name__ == "__main__":
    main()
