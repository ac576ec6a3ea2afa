"""A generated sweep of bad and boundary inputs over the whole public surface.

    PYTHONPATH=python python tools/sweep.py --cli build/dev/cli/shardkit \
        [--cli-cases 10000] [--py-cases 10000] [--delivery-cases 4000] \
        [--cli-state-cases 2000] [--kill-cases 60] [--quick] [--seed 0] [--jobs 2]

Generates command lines for every subcommand and calls of every public
constructor and entry point, from boundaries (0, 1, -1, 2^31, 2^53 + 1,
2^63 - 1, 2^63, 2^64), wrong types (floats, strings, None, lists, NaN) and
bad files (missing, empty, a directory, /dev/null, garbage, a corrupted or
truncated .npy), and checks what shardkit promises:

* CLI: exit 0 (with --json: one JSON object on stdout), or exit 1 (audit) /
  2 with exactly one stderr line that names a flag ("--..."); never a signal,
  never more than --timeout seconds.
* Python: a result, or ValueError / IndexError / TypeError whose one-line
  message names one of the parameters passed; never another exception type,
  never a crash of the interpreter (calls run in child processes; a child
  that dies is a crash, one that overruns is a hang).

And what an accepted input delivers (tools/sweep_delivery.py): Python cases
that take a real state of every kind (per-rank, merged, equal-steps, TrainPlan,
Mixture, mixture loader, packer), mutate it and resume, mixtures with extreme
weights, one loader in two threads; CLI cases that resume `loader-stats` from a
mutated state and that kill it while it saves over its checkpoint. A case
accepted that delivers anything the documented rule does not is a finding
("wrong"), beside crashes, hangs and unclear errors. `--quick` runs a few
hundred of each (about 30 s); `--replay KIND SEED` reruns one delivery case.

Prints the counts and every finding (the command or call, what happened);
exits 1 if there is any. docs/reliability.md records the figures.
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import json
import os
import random
import re
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # sweep_delivery

INTS = [0, 1, 2, 3, 7, -1, -2, 2**31, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64, 10**30]
SMALL = [0, 1, 2, 3, 4, 5, 8, 10, 16, 100, 1000]
JUNK = [
    "",
    " ",
    "x",
    "1.5",
    "nan",
    "inf",
    "-inf",
    "1e3",
    "0x10",
    "--",
    "=",
    "1,2",
    "9" * 40,
    "a\nb",
    "\t",
    "-0",
    "+3",
]


def pick_int(rng: random.Random):
    r = rng.random()
    if r < 0.55:
        return rng.choice(SMALL)
    if r < 0.85:
        return rng.choice(INTS)
    return rng.choice(JUNK)


# ---- files -------------------------------------------------------------------


def make_files(root: Path) -> dict:
    import numpy as np

    files = {}

    def write(name, data: bytes):
        path = root / name
        path.write_bytes(data)
        files[name] = str(path)

    write("lengths.txt", b"5\n3\n8\n1\n0\n4096\n")
    write("weights.txt", b"1.5\n2\n0\n7\n")
    write("empty.txt", b"")
    write("comments.txt", b"# nothing\n\n")
    write("garbage.bin", bytes(range(256)) * 4)
    write("negative.txt", b"3\n-1\n")
    write("huge.txt", b"99999999999999999999999\n")
    write("float.txt", b"1.5\n2.25\n")
    import io

    def npy(array):
        b = io.BytesIO()
        np.save(b, array)
        return b.getvalue()

    write("lengths.npy", npy(np.array([5, 3, 8, 1], np.int64)))
    write("big.npy", npy(np.array([2**53 + 1, 2**63 - 1], np.int64)))
    write("u64.npy", npy(np.array([2**64 - 1], np.uint64)))
    write("f32.npy", npy(np.array([1.5, 2], np.float32)))
    write("twod.npy", npy(np.zeros((2, 2), np.int64)))
    write("truncated.npy", npy(np.arange(10, dtype=np.int64))[:-5])
    write("bigendian.npy", npy(np.arange(3, dtype=">i4")))
    bad = bytearray(npy(np.arange(12, dtype=np.int64)))
    i = bad.index(b"(12,)")
    bad[i : i + 5] = b"( 2,)"
    write("shape_lies.npy", bytes(bad))
    tokens = np.arange(200, dtype=np.int32) % 50
    offsets = np.array([0, 10, 10, 70, 150, 200], np.int64)
    write("tokens.npy", npy(tokens))
    write("offsets.npy", npy(offsets))
    write("tokens.bin", tokens.tobytes())
    write("offsets.bin", offsets.tobytes())
    write("offsets_bad.npy", npy(np.array([0, 300, 5], np.int64)))
    write("tokens_u16.npy", npy(tokens.astype(np.uint16)))
    (root / "dir").mkdir()
    files["dir"] = str(root / "dir")
    part = root / "parts"
    part.mkdir()
    (part / "a.tokens.npy").write_bytes(npy(tokens))
    (part / "a.offsets.npy").write_bytes(npy(offsets))
    files["parts"] = str(part)
    files["missing"] = str(root / "missing.txt")
    files["state_out"] = str(root / "state.json")  # written by --save-state, read by --resume
    files["devnull"] = "/dev/null"
    return files


# ---- CLI cases ---------------------------------------------------------------

CLI_FLAGS = {
    "shard": {
        "items": "int",
        "world": "int",
        "rank": "int",
        "offset": "int",
        "limit": "int",
        "seed": "int",
        "epoch": "int",
        "workers": "int",
        "worker": "int",
        "split": ["round_robin", "contiguous", "balanced", "bogus", ""],
        "remainder": ["uneven", "drop", "pad", "replicate", "nope"],
        "weights": "numfile",
        "shuffle": None,
        "equal-counts": None,
        "json": None,
    },
    "pack": {
        "lengths": "numfile",
        "capacity": "int",
        "images": "numfile",
        "max-images": "int",
        "max-sequences": "int",
        "buffer": "int",
        "world": "int",
        "packs-per-rank": "int",
        "algorithm": ["next_fit", "ffd", "bfd", "balanced", "best"],
        "oversize": ["drop", "error", "split", "keep"],
        "cost": ["tokens", "squared", "x"],
        "packs": None,
        "json": None,
    },
    "mix": {
        "sizes": ["10,20", "0,5", "", "5", "-1,3", "9223372036854775807,1", "1.5,2", "a,b"],
        "weights": ["1,1", "0,1", "1", "-1,2", "nan,1", "inf,1", "1,1,1", "x"],
        "by": ["samples", "tokens", "bytes"],
        "lengths": "numfile",
        "block": "int",
        "seed": "int",
        "schedule": ["100:1,0;200:1,1", "0:1,1", "x", "100:1;50:1,0", "-1:1,1"],
        "linear": None,
        "schedule-unit": ["samples", "tokens", "x"],
        "no-repeat": ["0", "1", "0,1", "5", "-1", "x"],
        "start": "int",
        "stop": "int",
        "windows": "int",
        "samples": None,
        "json": None,
    },
    "eval-plan": {
        "items": "int",
        "world": "int",
        "batch": "int",
        "devices": "int",
        "min-device-batch": "int",
        "rank": "int",
        "seed": "int",
        "epoch": "int",
        "split": ["round_robin", "contiguous", "balanced"],
        "shuffle": None,
        "batches": None,
        "json": None,
    },
    "layout": {
        "mesh": [
            "x=2,y=4",
            "x=2",
            "x=0",
            "x=-1",
            "x=3,x=2",
            "x=9223372036854775807",
            "=2",
            "x",
            "x=2,y=2,z=2",
            "data=4,model=2",
            "x=16384,y=16384",
            "x=2\ny=2",
        ],
        "spec": [
            "('x','y'), None",
            "x",
            "None",
            "('x',)",
            "y, x",
            "(x",
            "'x''",
            "\"x''\"",
            "P(x)",
            "z",
            "x, x",
            "",
            "((x))",
        ],
        "shape": ["16,8", "8", "", "0", "-4", "16,8,4", "3", "1,1", "9223372036854775807", "a"],
        "owners": ["0,0,0,0,1,1,1,1", "0,1", "", "-1", "0"],
        "batch": "int",
        "max-devices": "int",
        "json": None,
    },
    "loader-stats": {
        "tokens": "tokfile",
        "offsets": "offfile",
        "dir": "dirfile",
        "seq-len": "int",
        "batch": "int",
        "world": "int",
        "rank": "int",
        "workers": "int",
        "seed": "int",
        "epoch": "int",
        "buffer": "int",
        "threads": "int",
        "prefetch": "int",
        "max-batches": "int",
        "algorithm": ["bfd", "ffd", "next_fit", "x"],
        "oversize": ["split", "drop", "error"],
        "token-dtype": ["int32", "uint16", "uint32", "f"],
        "no-shuffle": None,
        "shard-files": None,
        "whale-policy": ["env", "default", "unbalanced", "drop_last", "x"],
        "per-rank": None,
        "mode": ["pad", "continuous", "drop", "x"],
        "cost": ["tokens", "squared", "x"],
        "save-state": "statefile",
        "resume": "statefile",
        "quiet": None,
        "json": None,
        # the mixture loader (loader-stats --mixture): sources, weights, schedule
        "mixture": "mixsources",
        "weights": ["1,1", "1,2,3", "5,3,2", "0,0", "0,1", "-1,2", "x", "1e308,1", "nan,1", ""],
        "by": ["tokens", "samples", "x"],
        "samples": "int",
        "block": "int",
        "schedule": ["10:1,2", "0:1,0;5:0,1", "5:1,1;3:1,1", "x", ":", "9223372036854775807:1,1"],
        "linear": None,
        "schedule-unit": ["samples", "tokens", "x"],
        "no-repeat": ["0", "1", "0,1", "5", "-1", "x", ""],
    },
}
CLI_FLAGS["audit"] = CLI_FLAGS["shard"]


def cli_case(rng: random.Random, files: dict) -> list:
    command = rng.choice(list(CLI_FLAGS) + ["demo", "bogus"])
    if command == "bogus":
        return [rng.choice(["bogus", "", "--help", "shard-x"])]
    if command == "demo":
        return [
            "demo",
            "--json",
            "--out",
            rng.choice([files["dir"] + "/r.html", "/dev/full", files["dir"]]),
        ]
    spec = CLI_FLAGS[command]
    args = [command]
    names = list(spec)
    # the usual required flags most of the time, so that cases get past them
    required = {
        "shard": ["items", "world"],
        "audit": ["items", "world"],
        "pack": ["lengths", "capacity"],
        "eval-plan": ["items", "world", "batch"],
        "layout": ["mesh", "shape"],
        "loader-stats": ["tokens", "offsets", "seq-len", "batch"],
        "mix": ["sizes", "weights"],
    }[command]
    chosen = [n for n in required if rng.random() < 0.9]
    chosen += rng.sample(names, rng.randint(0, min(5, len(names))))
    for name in dict.fromkeys(chosen):
        kind = spec[name]
        if kind is None:
            args.append(f"--{name}")
            continue
        if kind == "int":
            value = pick_int(rng)
            if command == "loader-stats" and name in ("seq-len", "batch") and rng.random() < 0.7:
                value = rng.choice([8, 16, 32])
        elif kind == "numfile":
            value = files[
                rng.choice(
                    [
                        "lengths.txt",
                        "weights.txt",
                        "empty.txt",
                        "comments.txt",
                        "garbage.bin",
                        "negative.txt",
                        "huge.txt",
                        "float.txt",
                        "lengths.npy",
                        "big.npy",
                        "u64.npy",
                        "f32.npy",
                        "twod.npy",
                        "truncated.npy",
                        "bigendian.npy",
                        "shape_lies.npy",
                        "dir",
                        "missing",
                        "devnull",
                    ]
                )
            ]
        elif kind == "tokfile":
            value = files[
                rng.choice(
                    [
                        "tokens.npy",
                        "tokens.bin",
                        "tokens_u16.npy",
                        "garbage.bin",
                        "truncated.npy",
                        "missing",
                        "dir",
                        "devnull",
                    ]
                )
            ]
        elif kind == "offfile":
            value = files[
                rng.choice(
                    [
                        "offsets.npy",
                        "offsets.bin",
                        "offsets_bad.npy",
                        "shape_lies.npy",
                        "empty.txt",
                        "missing",
                        "devnull",
                    ]
                )
            ]
        elif kind == "statefile":
            value = files[
                rng.choice(
                    ["state_out", "state_out", "garbage.bin", "lengths.txt", "dir", "missing"]
                )
            ]
        elif kind == "dirfile":
            value = files[rng.choice(["parts", "dir", "missing", "lengths.txt"])]
        elif kind == "mixsources":
            pair = files["tokens.npy"] + ":" + files["offsets.npy"]
            pool = [files["parts"], pair, pair, files["missing"], "a:b:c", "", files["tokens.npy"]]
            value = ",".join(rng.choice(pool) for _ in range(rng.randint(1, 3)))
        else:
            value = rng.choice(kind)
        if rng.random() < 0.5:
            args += [f"--{name}", str(value)]
        else:
            args.append(f"--{name}={value}")
    if rng.random() < 0.03:
        args.append(rng.choice(["positional", "-x", "--unknown", "--json=1"]))
    if "--indices" not in args and command == "shard" and rng.random() < 0.2:
        args += ["--indices", "--limit", "50"]
    return args


def run_cli(binary: str, args: list, timeout: float) -> dict:
    start = time.monotonic()
    try:
        proc = subprocess.run(
            [binary, *args], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return {"args": args, "verdict": "hang", "detail": f"over {timeout} s"}
    seconds = time.monotonic() - start
    out = proc.stdout.decode(errors="replace")
    err = proc.stderr.decode(errors="replace")
    code = proc.returncode
    if code < 0:
        return {"args": args, "verdict": "crash", "detail": f"signal {-code}: {err[-300:]}"}
    if code == 0:
        if "--json" in args and args[0] not in ("bogus",):
            try:
                json.loads(out)
            except ValueError:
                return {"args": args, "verdict": "bad-output", "detail": out[:200]}
        return {"args": args, "verdict": "ok", "seconds": seconds}
    if code == 1 and args[0] == "audit":
        return {"args": args, "verdict": "ok", "seconds": seconds}
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("\r")]
    # loader-stats draws a progress bar with '\r' before it fails: keep the last line
    lines = [ln.split("\r")[-1] for ln in lines]
    lines = [ln for ln in lines if ln.strip()]
    if code != 2:
        return {"args": args, "verdict": "bad-exit", "detail": f"exit {code}: {err[-300:]}"}
    if len(lines) != 1:
        return {"args": args, "verdict": "not-one-line", "detail": err[-400:]}
    if "--" not in lines[0] and not lines[0].startswith("shardkit: unknown command"):
        if not (args and args[0] in ("bogus", "", "shard-x")):
            return {"args": args, "verdict": "no-flag", "detail": lines[0][:300]}
    return {"args": args, "verdict": "rejected", "seconds": seconds}


# ---- Python cases ------------------------------------------------------------

PY_PARAMS = {
    "ShardPlan": [
        "num_items",
        "world_size",
        "split",
        "remainder",
        "offset",
        "limit",
        "shuffle",
        "seed",
        "epoch",
        "weights",
        "equal_counts",
    ],
    "shard": ["rank", "worker", "num_workers"],
    "EvalPlan": [
        "num_items",
        "world_size",
        "batch_size",
        "devices",
        "min_device_batch",
        "split",
        "shuffle",
        "seed",
        "epoch",
    ],
    "batch": ["rank", "step"],
    "pack": [
        "lengths",
        "capacity",
        "algorithm",
        "images",
        "max_images",
        "buffer",
        "oversize",
        "max_sequences",
    ],
    "balance_ranks": ["costs", "world_size", "packs_per_rank"],
    "Mesh": ["axes", "owners"],
    "PartitionSpec": ["entries"],
    "NamedSharding": ["mesh", "spec", "shape"],
    "whale_plan": ["num_files", "world_size"],
    "masked_mean": ["values", "mask"],
    # methods and the remaining constructors and entry points
    "shard_methods": ["index", "start", "stop"],
    "whale_choice": ["num_files", "world_size"],
    "eval_batch": ["batch_size", "rank", "step", "devices"],
    "pad_for_devices": ["n", "devices", "min_device_batch"],
    "steps_for_count": ["max_count", "batch_size"],
    "masked_sum": ["values", "mask", "axis"],
    "rank_and_world": ["rank", "world_size"],
    "StreamingPacker": [
        "capacity",
        "algorithm",
        "max_images",
        "max_sequences",
        "oversize",
        "buffer",
        "item",
        "length",
    ],
    "pack_stream": ["lengths", "capacity", "algorithm", "buffer", "oversize"],
    "collate_packing": ["seq_len", "packs", "padding_side", "pad_token_id", "ignore_index"],
    "PackedCollator": [
        "seq_len",
        "padding_side",
        "pad_token_id",
        "ignore_index",
        "lengths",
        "packs",
    ],
    "TrainPlan": [
        "lengths",
        "seq_len",
        "batch_size",
        "world_size",
        "mode",
        "shuffle",
        "seed",
        "epoch",
        "buffer",
        "micro_batches",
        "max_sequences",
        "position",
        "rank",
        "step",
    ],
    "TokenLoader": [
        "seq_len",
        "batch_size",
        "rank",
        "world_size",
        "seed",
        "epoch",
        "buffer",
        "num_threads",
        "prefetch",
        "num_workers",
        "worker",
        "mode",
        "algorithm",
        "oversize",
        "token_dtype",
        "equal_steps",
        "shuffle",
    ],
    "Mixture": ["sizes", "weights", "block", "seed", "start", "stop"],
    "DataRoles": ["mesh", "data_axes", "rank"],
    "LoadingPlan": ["batch_size", "process"],
    "Mesh_methods": ["axes", "process", "shape"],
}

PY_VALUES = [
    0,
    1,
    2,
    3,
    5,
    8,
    100,
    -1,
    2**31,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    1.5,
    2.0,
    float("nan"),
    float("inf"),
    "3",
    "x",
    None,
    [],
    [1, 2],
    True,
]


def py_value(rng: random.Random, name: str):
    if name in ("split",):
        return rng.choice(["round_robin", "contiguous", "balanced", "bogus", 3, None])
    if name == "remainder":
        return rng.choice(["uneven", "drop", "pad", "replicate", "x", None])
    if name == "algorithm":
        return rng.choice(["bfd", "ffd", "next_fit", "balanced", "x", 1])
    if name == "oversize":
        return rng.choice(["drop", "error", "split", "x"])
    if name in ("shuffle", "equal_counts"):
        return rng.choice([True, False, 1, "yes", None])
    if name == "weights" and rng.random() < 0.3:
        return rng.choice([[1.0, 1.0], [0.0, 1.0], [-1.0, 2.0], [float("nan"), 1.0], [1.0]])
    if name in ("weights", "lengths", "costs", "images", "values"):
        return rng.choice(
            [
                [1, 2, 3],
                [0.5, 2.5],
                [],
                [-1, 2],
                [float("nan")],
                [2**63],
                [1e19],
                "abc",
                None,
                [[1, 2]],
                list(range(20)),
                [3, 0, 2, 0, 1],
            ]
        )
    if name in ("mode",):
        return rng.choice(["pad", "continuous", "drop", "x", None, 1])
    if name in ("padding_side",):
        return rng.choice(["right", "left", "middle", None])
    if name == "token_dtype":
        return rng.choice(["int32", "uint16", "uint32", "float32", None])
    if name == "sizes":
        return rng.choice([[10, 20], [0, 5], [], [-1, 3], [2**63, 1], [1.5, 2], "ab", None])
    if name == "data_axes":
        return rng.choice(["x", ["x"], ("x", "y"), "z", [], None, 3, ["x", "x"]])
    if name == "packs":
        return rng.choice([None, [0], [0, 1], [-1], [2**63], [0.5], "a"])
    if name == "mask":
        return rng.choice([[True], [True, False, True], [], [1, 0, 1], "ab"])
    if name == "axes":
        return rng.choice(
            [
                {"x": 2},
                {"x": 2, "y": 4},
                {"x": 2.0},
                {"x": -1},
                {"x": 0},
                {1: 2},
                [("x", 2)],
                {"x": 2**63},
                "x=2",
                None,
                {"x": 2, "y": 2**40},
            ]
        )
    if name == "owners":
        return rng.choice([None, [0, 1], [0, 0, 1, 1], [-1, 0], "01", [0.5, 1]])
    if name == "entries":
        return rng.choice([("x",), (("x", "y"), None), ("x''",), (3,), ((None,),), ("x", "x")])
    if name == "shape":
        return rng.choice([(8, 4), (8,), (), (7,), (-4,), (2**63,), "8", (8.0,), None])
    if name == "mesh":
        return rng.choice(["mesh2", "mesh24", None, 3, {"x": 2, "y": 2}, "x"])
    if name == "spec":
        return rng.choice(["Px", "Pxy", "Pnone", None, "x"])
    return rng.choice(PY_VALUES) if rng.random() < 0.6 else rng.choice(SMALL[1:6])


def py_case(rng: random.Random) -> dict:
    target = rng.choice(list(PY_PARAMS))
    names = PY_PARAMS[target]
    kwargs = {n: py_value(rng, n) for n in names if rng.random() < 0.6 or n in names[:2]}
    return {"target": target, "kwargs": kwargs}


def _call(case: dict):
    import numpy as np

    import shardkit

    t, kw = case["target"], dict(case["kwargs"])

    def plan_kwargs(keys):
        return {k: kw[k] for k in keys if k in kw}

    if t == "ShardPlan":
        p = shardkit.ShardPlan(
            kw.get("num_items", 10), kw.get("world_size", 3), **plan_kwargs(PY_PARAMS[t][2:])
        )
        audit = p.audit()
        if not audit.exactly_once:
            raise AssertionError(f"audit failed: {audit}")
        groups = audit.load_groups
        if groups is not None and sum(ranks for _, ranks in groups) != p.world_size:
            raise AssertionError(f"load_groups do not cover the {p.world_size} ranks: {groups}")
        # The per-rank lists (O(world_size) output) list up to 2^20 ranks and are
        # refused past that, naming world_size; a tiny plan over 2^62 ranks once
        # allocated one load per rank (std::vector larger than max_size()).
        for listing in (p.counts, p.loads, lambda: audit.loads):
            try:
                listing()
            except ValueError as e:
                if p.world_size <= 2**20 or not str(e).startswith("world_size: "):
                    raise
        return [p.count(r) for r in range(min(4, p.world_size))]
    if t == "shard":
        p = shardkit.ShardPlan(20, 4, remainder="pad")
        s = p.shard(kw.get("rank", 0), **plan_kwargs(["worker", "num_workers"]))
        return s.numpy().tolist()[:4]
    if t == "EvalPlan":
        p = shardkit.EvalPlan(
            kw.get("num_items", 10),
            kw.get("world_size", 3),
            kw.get("batch_size", 4),
            **plan_kwargs(PY_PARAMS[t][3:]),
        )
        # One row per item: listed for a small window (every slot's row once), a
        # ValueError naming num_items for one too large to allocate; the sizes in
        # between are huge by request and left out.
        if p.window_size <= 10**6 or p.window_size >= 2**50:
            rows = p.source_rows()
            if len(set(rows.tolist())) != p.window_size:
                raise AssertionError("source_rows are not one distinct row per item")
        return p.num_steps
    if t == "batch":
        p = shardkit.EvalPlan(10, 3, 2)
        return p.batch(kw.get("rank", 0), kw.get("step", 0))[0].tolist()
    if t == "pack":
        r = shardkit.pack(
            kw.get("lengths", [1, 2]), kw.get("capacity", 4), **plan_kwargs(PY_PARAMS[t][2:])
        )
        return r.num_packs
    if t == "balance_ranks":
        return shardkit.balance_ranks(
            kw.get("costs", [1.0]), kw.get("world_size", 2), **plan_kwargs(["packs_per_rank"])
        ).num_steps
    if t == "Mesh":
        return repr(shardkit.Mesh(kw.get("axes", {"x": 2}), kw.get("owners")))
    if t == "PartitionSpec":
        spec = shardkit.PartitionSpec(*kw.get("entries", ("x",)))
        again = eval(repr(spec), {"PartitionSpec": shardkit.PartitionSpec})
        if again != spec:
            raise AssertionError(f"repr does not round-trip: {spec!r}")
        return repr(spec)
    if t == "NamedSharding":
        meshes = {"mesh2": {"x": 2}, "mesh24": {"x": 2, "y": 4}}
        specs = {"Px": ("x",), "Pxy": (("x", "y"),), "Pnone": (None,)}
        m = kw.get("mesh", "mesh2")
        mesh = shardkit.Mesh(meshes[m]) if isinstance(m, str) and m in meshes else m
        s = kw.get("spec", "Px")
        spec = shardkit.PartitionSpec(*specs[s]) if isinstance(s, str) and s in specs else s
        ns = shardkit.NamedSharding(mesh, spec)
        return ns.shard_shape(kw.get("shape", (8, 4)))
    if t == "whale_plan":
        p = shardkit.whale_plan(kw.get("num_files", 10), kw.get("world_size", 3))
        return [p.count(r) for r in range(min(4, p.world_size))]
    if t == "masked_mean":
        mean = shardkit.masked_mean(np.asarray(kw.get("values", [1.0])), kw.get("mask", [True]))
        return np.asarray(mean).tolist()
    if t == "shard_methods":
        s = shardkit.ShardPlan(20, 3, remainder="pad").shard(1)
        k = kw.get("index", 0)
        return (
            s.is_padding(k),
            s[k],
            s.numpy(kw.get("start", 0), kw.get("stop")).tolist()[:3],
        )
    if t == "whale_choice":
        return str(shardkit.whale_choice(kw.get("num_files", 10), kw.get("world_size", 3)))
    if t == "eval_batch":
        p = shardkit.EvalPlan(
            10,
            3,
            kw.get("batch_size", 4),
            **({"devices": kw["devices"]} if "devices" in kw else {}),
        )
        if p.batch_size > 2**24:
            return p.num_steps  # one batch of 2^31 slots is slow by size, not a hang
        return p.batch(kw.get("rank", 0), kw.get("step", 0))[0].tolist()[:4]
    if t == "pad_for_devices":
        return shardkit.pad_for_devices(
            kw.get("n", 10), kw.get("devices", 4), **plan_kwargs(["min_device_batch"])
        )
    if t == "steps_for_count":
        return shardkit.steps_for_count(kw.get("max_count", 10), kw.get("batch_size", 4))
    if t == "masked_sum":
        return np.asarray(
            shardkit.masked_sum(
                np.asarray(kw.get("values", [1.0])), kw.get("mask", [True]), **plan_kwargs(["axis"])
            )
        ).tolist()
    if t == "rank_and_world":
        return shardkit.rank_and_world(kw.get("rank"), kw.get("world_size"), environ={})
    if t == "StreamingPacker":
        opts = plan_kwargs(["algorithm", "max_images", "max_sequences", "oversize", "buffer"])
        packer = shardkit.StreamingPacker(kw.get("capacity", 8), **opts)
        packer.push(kw.get("item", 0), kw.get("length", 3))
        packer.finish()
        return packer.pending
    if t == "pack_stream":
        opts = plan_kwargs(["algorithm", "buffer", "oversize"])
        return len(
            list(shardkit.pack_stream(kw.get("lengths", [1, 2]), kw.get("capacity", 4), **opts))
        )
    if t == "collate_packing":
        packing = shardkit.pack([10, 0, 60, 80, 50], 100)
        tokens = np.arange(200, dtype=np.int32)
        offsets = np.array([0, 10, 10, 70, 150, 200], np.int64)
        opts = plan_kwargs(["seq_len", "packs", "padding_side", "pad_token_id", "ignore_index"])
        return sorted(shardkit.collate_packing(packing, tokens, offsets, **opts))
    if t == "PackedCollator":
        opts = plan_kwargs(["padding_side", "pad_token_id", "ignore_index"])
        collate = shardkit.PackedCollator(kw.get("seq_len", 16), **opts)
        lengths = kw.get("lengths", [3, 4])
        ok = isinstance(lengths, list) and all(
            isinstance(n, int) and 0 <= n <= 1000 for n in lengths
        )
        # a pack of samples of those lengths, or the junk itself as the batch
        rows = [[list(range(n)) for n in lengths]] if ok else lengths
        return sorted(collate(rows))
    if t == "TrainPlan":
        opts = plan_kwargs(PY_PARAMS[t][4:12])
        plan = shardkit.TrainPlan(
            kw.get("lengths", [5, 3, 8]),
            kw.get("seq_len", 8),
            kw.get("batch_size", 2),
            kw.get("world_size", 2),
            **opts,
        )
        if plan.num_steps:
            plan.step(kw.get("rank", 0), kw.get("step", 0))
        return plan.num_steps
    if t == "TokenLoader":
        tokens = np.arange(200, dtype=np.int32) % 50
        offsets = np.array([0, 10, 10, 70, 150, 200], np.int64)
        opts = plan_kwargs(PY_PARAMS[t][2:])
        loader = shardkit.TokenLoader(
            tokens,
            offsets,
            seq_len=kw.get("seq_len", 16),
            batch_size=kw.get("batch_size", 2),
            **opts,
        )
        batch = next(iter(loader), None)
        state = loader.state_dict()
        del loader
        return (batch is None, sorted(state)[:2])
    if t == "Mixture":
        m = shardkit.Mixture(
            kw.get("sizes", [10, 20]),
            kw.get("weights", [1.0, 1.0]),
            **plan_kwargs(["block", "seed"]),
        )
        start, stop = kw.get("start", 0), kw.get("stop", 10)
        if isinstance(start, int) and isinstance(stop, int) and stop - max(start, 0) > 10**6:
            stop = max(start, 0) + 10**6  # an output of 2^31 samples is slow by size, not a hang
        return [a.tolist()[:3] for a in m.numpy(start, stop)]
    if t == "DataRoles":
        meshes = {"mesh2": {"x": 2}, "mesh24": {"x": 2, "y": 4}}
        m = kw.get("mesh", "mesh24")
        mesh = meshes.get(m, m) if isinstance(m, str) else m
        roles = shardkit.DataRoles(mesh, kw.get("data_axes", "x"), kw.get("rank", 0))
        return (roles.dp_rank, roles.dp_size)
    if t == "LoadingPlan":
        mesh = shardkit.Mesh({"x": 2, "y": 2}, [0, 0, 1, 1])
        sharding = shardkit.NamedSharding(mesh, shardkit.PartitionSpec("x"))
        plan = shardkit.LoadingPlan(sharding, kw.get("batch_size", 8))
        return plan.rows(kw.get("process", 0))
    if t == "Mesh_methods":
        mesh = shardkit.Mesh(kw.get("axes", {"x": 2, "y": 2}))
        sharding = shardkit.NamedSharding(mesh, shardkit.PartitionSpec("x"))
        shape = kw.get("shape", (8, 4))
        return (
            sharding.shard_shape(shape),
            sharding.local_shape(shape, kw.get("process", 0)),
            sharding.process_indices(shape, kw.get("process", 0)),
            sharding.local_to_global(shape, kw.get("process", 0)).global_shape,
        )
    raise AssertionError(t)


def run_py_case(case: dict) -> dict:
    if case["target"] == "delivery":
        import sweep_delivery

        return sweep_delivery.run_case(case["kwargs"]["kind"], case["kwargs"]["seed"])
    try:
        _call(case)
        return {"verdict": "ok"}
    except (ValueError, IndexError, TypeError) as e:
        message = str(e)
        names = (
            list(case["kwargs"])
            + PY_PARAMS[case["target"]]
            + [
                "num_items",
                "world_size",
                "axes",
                "entries",
                "spec",
                "mesh",
                "shape",
                "index",
                "rank",
                "step",
                "lengths",
                "capacity",
                "costs",
                "batch_size",
            ]
        )
        if "\n" in message:
            return {"verdict": "not-one-line", "detail": message[:300]}
        if not any(re.search(rf"\b{re.escape(n)}\b", message) for n in names):
            return {"verdict": "no-parameter", "detail": f"{type(e).__name__}: {message[:300]}"}
        return {"verdict": "rejected"}
    except Exception as e:  # noqa: BLE001 - the point is to catch everything else
        return {"verdict": "other-exception", "detail": f"{type(e).__name__}: {str(e)[:300]}"}


def py_child() -> None:
    """One JSON line per case, flushed as soon as the case ends, so that the
    parent can time every case on its own."""
    for case in json.loads(sys.stdin.read()):
        print(json.dumps(run_py_case(case)), flush=True)


def run_py_cases(cases: list, timeout: float, batch: int) -> list:
    """Runs the cases in child processes of up to `batch` cases each. A case
    that gives no result within `timeout` seconds is a hang (the child is
    killed), a child that dies is a crash of the case it was running; either
    way the next child starts at the following case."""
    results: list = []
    start = time.monotonic()
    i = 0
    reported = 0
    with tempfile.TemporaryFile(mode="w+") as err:
        while i < len(cases):
            chunk = cases[i : i + batch]
            err.seek(0)
            err.truncate()
            proc = subprocess.Popen(
                [sys.executable, __file__, "--py-child"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
            )
            proc.stdin.write(json.dumps(chunk, default=repr).encode())
            proc.stdin.close()
            fd = proc.stdout.fileno()
            pending = b""
            got = 0
            deadline = time.monotonic() + timeout
            while got < len(chunk):
                if b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    results.append(json.loads(line))
                    got += 1
                    deadline = time.monotonic() + timeout
                    continue
                ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    proc.kill()
                    proc.wait()
                    results.append({"verdict": "hang", "detail": f"no result within {timeout} s"})
                    got += 1
                    break
                data = os.read(fd, 65536)
                if not data:
                    proc.wait()
                    err.seek(0)
                    detail = f"child exit {proc.returncode}: {err.read()[-300:]}"
                    results.append({"verdict": "crash", "detail": detail})
                    got += 1
                    break
                pending += data
            else:
                proc.wait()
            proc.stdout.close()
            i += got
            if i - reported >= 1000 or i == len(cases):
                reported = i
                print(f"  {i} Python calls, {time.monotonic() - start:.0f} s", file=sys.stderr)
    return results


# ---- main --------------------------------------------------------------------


def run_py_parallel(cases: list, timeout: float, batch: int, jobs: int) -> list:
    """run_py_cases over `jobs` interleaved slices at once, results in order."""
    if jobs <= 1 or len(cases) < 2:
        return run_py_cases(cases, timeout, batch)
    slices = [cases[j::jobs] for j in range(jobs)]
    with futures.ThreadPoolExecutor(jobs) as pool:
        parts = list(pool.map(lambda c: run_py_cases(c, timeout, batch), slices))
    out = [None] * len(cases)
    for j, part in enumerate(parts):
        out[j::jobs] = part
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", default=os.environ.get("SHARDKIT_CLI", "build/dev/cli/shardkit"))
    ap.add_argument("--cli-cases", type=int, default=10000)
    ap.add_argument("--py-cases", type=int, default=10000)
    ap.add_argument(
        "--delivery-cases",
        type=int,
        default=4000,
        help="Python cases with the delivery oracle (tools/sweep_delivery.py), beside --py-cases",
    )
    ap.add_argument(
        "--cli-state-cases",
        type=int,
        default=2000,
        help="loader-stats --resume with a mutated state, beside --cli-cases",
    )
    ap.add_argument("--kill-cases", type=int, default=60, help="kill during --save-state")
    ap.add_argument(
        "--quick", action="store_true", help="300 / 300 / 300 / 100 / 6 cases (about a minute)"
    )
    ap.add_argument(
        "--replay",
        nargs=2,
        metavar=("KIND", "SEED"),
        help="run one delivery case (KIND as printed, or cli / kill) and print its verdict",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--py-child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.py_child:
        py_child()
        return 0
    import sweep_delivery as delivery

    if a.replay:
        kind, seed = a.replay[0], int(a.replay[1])
        if kind in ("cli", "kill"):
            with tempfile.TemporaryDirectory() as tmp:
                setup = delivery.cli_setup(a.cli, tmp)
                run = delivery.cli_state_case if kind == "cli" else delivery.kill_during_save_case
                print(json.dumps(run(a.cli, setup, seed, a.timeout), indent=1))
        else:
            print(json.dumps(delivery.run_case(kind, seed), indent=1))
        return 0
    if a.quick:
        a.cli_cases, a.py_cases, a.delivery_cases, a.cli_state_cases, a.kill_cases = (
            300,
            300,
            300,
            100,
            6,
        )
    rng = random.Random(a.seed)
    start = time.monotonic()
    findings = []
    counts: dict = {}
    seconds: dict = {}

    def count(key, r, what):
        counts[key] = counts.get(key, 0) + 1
        if r["verdict"] not in ("ok", "rejected"):
            findings.append((key.split(" ")[0], what, r["detail"], r.get("op"), r["verdict"]))

    with tempfile.TemporaryDirectory() as tmp:
        files = make_files(Path(tmp))
        cli_cases = [cli_case(rng, files) for _ in range(a.cli_cases)]
        with futures.ThreadPoolExecutor(a.jobs) as pool:
            for i, r in enumerate(pool.map(lambda c: run_cli(a.cli, c, a.timeout), cli_cases)):
                if (i + 1) % 1000 == 0:
                    print(f"  {i + 1} CLI cases, {time.monotonic() - start:.0f} s", file=sys.stderr)
                count("cli " + r["verdict"], r, " ".join(map(repr, r["args"])))
        seconds["cli"] = time.monotonic() - start
        py_cases = [py_case(rng) for _ in range(a.py_cases)]
        t = time.monotonic()
        results = run_py_cases(py_cases, a.timeout, 500)
        for case, r in zip(py_cases, results):
            count("python " + r["verdict"], r, f"{case['target']}({case['kwargs']!r})")
        seconds["python"] = time.monotonic() - t

        # The delivery oracle: states (and weights, threads) that are accepted
        # must deliver what the rule says.
        drng = random.Random(f"delivery:{a.seed}")
        kinds = drng.choices(delivery.KINDS, delivery.KIND_WEIGHTS, k=a.delivery_cases)
        dcases = [
            {"target": "delivery", "kwargs": {"kind": k, "seed": a.seed * 10**6 + i}}
            for i, k in enumerate(kinds)
        ]
        t = time.monotonic()
        results = run_py_parallel(dcases, min(a.timeout, 10.0), 200, a.jobs)
        for case, r in zip(dcases, results):
            kw = case["kwargs"]
            count(f"delivery {kw['kind']} {r['verdict']}", r, f"--replay {kw['kind']} {kw['seed']}")
        seconds["delivery"] = time.monotonic() - t

        t = time.monotonic()
        setup = delivery.cli_setup(a.cli, Path(tmp) / "cli")
        seeds = [a.seed * 10**6 + i for i in range(a.cli_state_cases)]
        with futures.ThreadPoolExecutor(a.jobs) as pool:
            runs = pool.map(lambda s: delivery.cli_state_case(a.cli, setup, s, a.timeout), seeds)
            for s, r in zip(seeds, runs):
                count(f"cli-state {r['verdict']}", r, f"--replay cli {s}")
        seconds["cli-state"] = time.monotonic() - t
        t = time.monotonic()
        for i in range(a.kill_cases):
            s = a.seed * 10**6 + i
            r = delivery.kill_during_save_case(a.cli, setup, s, a.timeout)
            count(f"kill-during-save {r['verdict']}", r, f"--replay kill {s}")
        seconds["kill"] = time.monotonic() - t
    print(
        f"sweep seed {a.seed}: {a.cli_cases} CLI command lines in {seconds['cli']:.0f} s, "
        f"{a.py_cases} Python calls in {seconds['python']:.0f} s, "
        f"{a.delivery_cases} Python delivery cases in {seconds['delivery']:.0f} s, "
        f"{a.cli_state_cases} CLI --resume cases in {seconds['cli-state']:.0f} s, "
        f"{a.kill_cases} kill-during-save cases in {seconds['kill']:.0f} s"
    )
    for key in sorted(counts):
        print(f"  {key:36s} {counts[key]:7d}")
    verdicts: dict = {}
    for key, n in counts.items():
        v = key.split(" ")[-1]
        verdicts[v] = verdicts.get(v, 0) + n
    print("  totals: " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items())))
    print(f"findings: {len(findings)}")
    # Grouped: the first case of every distinct (kind, command or target,
    # mutation, message start), with how many cases gave it.
    groups: dict = {}
    for kind, what, detail, op, verdict in findings:
        head = re.sub(r"[0-9]+", "N", detail)[:50]
        if kind == "delivery":
            head = re.sub(r"[0-9]+", "N", detail.split(": ")[-1])[:40]
        where = what.split("(")[0].split(" ")[0]
        if what.startswith("--replay"):
            where = what.split(" ")[1]
        key = (kind, verdict, where, op, head)
        groups.setdefault(key, [0, what, detail])[0] += 1
    for (kind, verdict, _, op, _), (n, what, detail) in sorted(groups.items(), key=str):
        tag = f"{kind} {verdict}" + (f", mutation {op}" if op else "")
        detail = detail.replace("\n", " | ")
        print(f"  [{tag}] x{n} {what[:300]}\n      -> {detail[:500]}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
