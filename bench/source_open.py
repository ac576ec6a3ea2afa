"""Opening a token source: the validation pass over its offsets (and, since issue 25, the
LengthsDigest of every length in the same pass), per CPU second.

Writes the three synthetic npy sources of bench/mixture_loader_open.py for ``--size``
documents together (int64 offsets, 8 bytes a document), then in a fresh process per build
opens each source ``--repeats`` times (``shardkit._core._TokenSource.of``, what
``TokenLoader`` calls) and keeps the best CPU time of each; the builds (this one, and with
``--before DIR`` another build's ``shardkit`` package) alternate round by round. Prints the
offsets bytes per CPU second (the pass reads each offset once) and the load average.

    PYTHONPATH=python .venv/bin/python bench/source_open.py [--size 100000000] \
        [--repeats 5] [--rounds 2] [--before DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from mixture_loader_open import write_sources


def one_run(prefixes: list, repeats: int) -> dict:
    from shardkit import _core

    best = float("inf")
    for _ in range(repeats):
        cpu = time.process_time()
        for p in prefixes:
            _core._TokenSource.of(p + ".tokens.npy", p + ".offsets.npy", token_dtype="uint16")
        best = min(best, time.process_time() - cpu)
    offsets = sum(os.path.getsize(p + ".offsets.npy") for p in prefixes)
    return {"cpu_s": best, "offsets_bytes": offsets, "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--before", default=None)
    parser.add_argument("--run", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        print(json.dumps(one_run(json.loads(args.run), args.repeats)))
        return
    builds = {"after": os.environ.get("PYTHONPATH", "")}
    if args.before:
        builds = {"before": os.path.abspath(args.before), **builds}
    with tempfile.TemporaryDirectory(prefix="source_open_", ignore_cleanup_errors=True) as root:
        prefixes = write_sources(root, args.size)
        best: dict = {}
        for _ in range(args.rounds):
            for build, path in builds.items():
                out = subprocess.run(
                    [sys.executable, __file__, "--repeats", str(args.repeats), "--run"]
                    + [json.dumps(prefixes)],
                    check=True,
                    capture_output=True,
                    text=True,
                    env=dict(os.environ, PYTHONPATH=path),
                )
                r = json.loads(out.stdout.strip().splitlines()[-1])
                if build not in best or r["cpu_s"] < best[build]["cpu_s"]:
                    best[build] = r
        for build, r in best.items():
            print(
                f"{build:>6}: {args.size} documents, {r['offsets_bytes'] / 1e6:.0f} MB of offsets "
                f"opened in {r['cpu_s'] * 1e3:.1f} CPU ms = "
                f"{r['offsets_bytes'] / 1e9 / r['cpu_s']:.2f} GB/s, load {r['load']:.2f}"
            )


if __name__ == "__main__":
    main()
