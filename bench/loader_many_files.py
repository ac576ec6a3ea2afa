"""A loader over a source of many files: CPU time per batch against the same documents in
one file (the changed-file check, docs/reliability.md, costs one fstat per file a batch
reads; this measures what a directory of many `.npy` pairs pays for it).

Writes ``--documents`` lognormal-ish documents (20-400 uint16 tokens) once as one pair and
once as a directory of ``--parts`` pairs, then runs rank 0's shuffled epoch of
``TokenLoader(seq_len=2048, batch_size=8, world_size=1)`` over each, per rank and with equal
steps, the sides interleaved round by round, best of ``--rounds``: CPU microseconds per batch
(``bench_util.cpu_seconds``), wall beside, load average. The shardkit measured is the one on
``PYTHONPATH``: point it at another build to compare builds.

    PYTHONPATH=python .venv/bin/python bench/loader_many_files.py [--parts 1000] \
        [--documents 200000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from bench_util import interleaved, load_average, one_rank_loader


def write_pairs(folder: Path, docs: np.ndarray, tokens: np.ndarray, parts: int) -> None:
    folder.mkdir()
    for k, ids in enumerate(np.array_split(np.arange(len(docs)), parts)):
        lengths = docs[ids]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        start = int(docs[: ids[0]].sum()) if len(ids) else 0
        np.save(folder / f"p{k:05d}.tokens.npy", tokens[start : start + int(offsets[-1])])
        np.save(folder / f"p{k:05d}.offsets.npy", offsets)


def epoch(path: str, equal_steps: bool):
    import shardkit

    loader = one_rank_loader(
        shardkit.open_source(path),
        seq_len=2048,
        batch_size=8,
        shuffle=True,
        equal_steps=equal_steps,
    )
    return sum(1 for _ in loader)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", type=int, default=1000)
    ap.add_argument("--documents", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    docs = rng.integers(20, 400, args.documents)
    tokens = rng.integers(0, 50_000, int(docs.sum())).astype(np.uint16)
    with tempfile.TemporaryDirectory(prefix="many_files_", ignore_cleanup_errors=True) as tmp:
        root = Path(tmp)
        write_pairs(root / "one", docs, tokens, 1)
        write_pairs(root / "many", docs, tokens, args.parts)
        sides = {}
        for name, folder in (("1 file pair", "one"), (f"{args.parts} file pairs", "many")):
            for equal_steps in (False, True):
                label = f"{name}, {'equal steps' if equal_steps else 'per rank'}"
                path = str(root / folder)
                sides[label] = lambda p=path, e=equal_steps: epoch(p, e)
        best = interleaved(sides, args.rounds)
        print(f"{args.documents} documents, {int(docs.sum())} tokens; {load_average()}")
        for label, b in best.items():
            print(
                f"{label:>32}: {b.out} batches, {b.cpu / b.out * 1e6:8.1f} CPU us/batch, "
                f"{b.wall / b.out * 1e6:8.1f} wall us/batch"
            )


if __name__ == "__main__":
    main()
