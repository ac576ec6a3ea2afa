"""shardkit.pack(..., compat="trl") against the real TRL, pack for pack.

    PYTHONPATH=python build/bench-venv/bin/python bench/trl_compat.py [--cases 500]
    PYTHONPATH=python build/bench-venv/bin/python bench/trl_compat.py \\
        --write-fixture python/tests/data/trl_pack_dataset.json

Runs trl.data_utils.pack_dataset (strategy "bfd" and "bfd_split", map batch
sizes 1000 (its default), small ones and one batch for all) on random data
sets and compares every packed row with shardkit's packs under compat="trl"
(buffer = the map batch size): the same pieces (item, start, length) in the
same rows in the same order. Token t of item i is i * 2^20 + t, so each row
of TRL's output names its pieces. Under "bfd" every item fits the sequence
length (TRL truncates longer ones; shardkit does not truncate). Exit status 1
on any difference. --write-fixture stores a few small cases with TRL's rows
for the test suite (which has no TRL).
"""

from __future__ import annotations

import argparse
import json
import random
import sys

import numpy as np

import shardkit

SHIFT = 1 << 20


def trl_rows(lengths, seq_length, strategy, batch_size):
    from datasets import Dataset
    from trl.data_utils import pack_dataset

    ids = [[i * SHIFT + t for t in range(n)] for i, n in enumerate(lengths)]
    ds = Dataset.from_dict({"input_ids": ids})
    packed = pack_dataset(ds, seq_length, strategy, map_kwargs={"batch_size": batch_size})
    rows = []
    for row, seq_lengths in zip(packed["input_ids"], packed["seq_lengths"]):
        pieces, at = [], 0
        for n in seq_lengths:
            first = row[at]
            pieces.append([first // SHIFT, first % SHIFT, n])
            at += n
        rows.append(pieces)
    return rows


def shardkit_rows(lengths, seq_length, strategy, batch_size):
    p = shardkit.pack(
        np.asarray(lengths, dtype=np.int64),
        seq_length,
        algorithm="bfd",
        compat="trl",
        oversize="split" if strategy == "bfd_split" else "drop",
        buffer=batch_size,
    )
    return [[[item, start, n] for item, start, n, _ in p.pieces(b)] for b in range(p.num_packs)]


def random_case(rng):
    seq_length = rng.choice([1, 2, 4, 7, 16, 64, 128, 512, 1000])
    # n >= 1: pack_dataset raises on an empty data set (no seq_lengths column).
    n = rng.choice([1, 3, 10, 50, 200, 1500, 2500])
    shape = rng.randrange(4)
    strategy = rng.choice(["bfd", "bfd_split"])
    top = seq_length if strategy == "bfd" else 3 * seq_length
    lengths = []
    for _ in range(n):
        if shape == 0:
            v = rng.randint(0, top)
        elif shape == 1:
            v = min(top, int(rng.lognormvariate(0, 1) * seq_length / 4))
        elif shape == 2:
            v = rng.choice([1, seq_length // 2 or 1, seq_length, top])
        else:
            v = rng.randint(0 if rng.random() < 0.05 else 1, max(1, seq_length // 8))
        lengths.append(v)
    batch_size = rng.choice([1000, 1000, 7, 64, max(1, n)])
    return {
        "lengths": lengths,
        "seq_length": seq_length,
        "strategy": strategy,
        "batch_size": batch_size,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--write-fixture", default=None)
    args = parser.parse_args()
    import datasets
    import trl

    print(
        f"TRL {trl.__version__}, datasets {datasets.__version__}, shardkit {shardkit.__version__}"
    )
    datasets.disable_progress_bars()
    rng = random.Random(args.seed)
    cases = [random_case(rng) for _ in range(args.cases)]
    # TRL's own docstring example.
    cases.insert(
        0, {"lengths": [5, 2, 3, 1], "seq_length": 4, "strategy": "bfd_split", "batch_size": 1000}
    )
    failures = 0
    packs = 0
    fixture = []
    trl_raised = 0
    for k, case in enumerate(cases):
        try:
            expected = trl_rows(**case)
        except Exception as e:  # TRL fails on a map batch of only empty items
            trl_raised += 1
            print(f"case {k}: TRL raised {type(e).__name__}, skipped")
            continue
        got = shardkit_rows(**case)
        packs += len(expected)
        if expected != got:
            failures += 1
            print(
                f"case {k} differs: {case['strategy']} seq_length {case['seq_length']} "
                f"batch {case['batch_size']} n {len(case['lengths'])}"
            )
        if args.write_fixture and len(fixture) < 40 and len(case["lengths"]) <= 300:
            fixture.append({**case, "trl_rows": expected})
    compared = len(cases) - trl_raised
    print(
        f"{compared} cases compared, {packs} packs: {compared - failures} identical, "
        f"{failures} differ; {trl_raised} cases TRL itself could not pack"
    )
    if args.write_fixture:
        with open(args.write_fixture, "w") as f:
            json.dump(
                {
                    "source": "rows of trl.data_utils.pack_dataset (trl "
                    f"{trl.__version__}, datasets {datasets.__version__}), written by: "
                    "PYTHONPATH=python build/bench-venv/bin/python bench/trl_compat.py "
                    f"--cases {args.cases} --seed {args.seed} --write-fixture "
                    f"{args.write_fixture}",
                    "piece": "[item, start, length]",
                    "cases": fixture,
                },
                f,
            )
        print(f"wrote {len(fixture)} cases to {args.write_fixture}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
