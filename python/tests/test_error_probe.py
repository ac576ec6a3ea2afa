"""A systematic probe of the Python surface's errors (issue 20, item 4).

Every public constructor and function of shardkit (and the mixture, roles,
loader and layout surfaces) is called from a valid base call with each argument
in turn replaced by wrongly-typed and out-of-range values. Each call must either
succeed or raise ValueError / TypeError / IndexError with a one-line message
that names the argument: never nanobind's "incompatible function arguments"
signature dump, a multi-line message, a bare MemoryError / bad_alloc,
OverflowError, SystemError or a hang.
"""

import math
import re
import signal
import subprocess
from contextlib import contextmanager

import numpy as np
import pytest
from conftest import cli_path

import shardkit

BAD = [None, "abc", 1.5, -1, 2**40, 2**62, 2**63, 2**64, [1, 2], {"a": 1}, object(), math.nan]

# A value that makes another argument inconsistent may be refused naming that
# one: here (a dict of 1 device against owners of 4, tokens shorter than the
# offsets), and wherever the message names another argument of the call and
# the value given (a product of several arguments, stop < start).
CONFLICTS = {
    ("Mesh", "axes"): "owners",
    ("TokenLoader", "tokens"): "offsets",
    ("TokenLoader(cp)", "tokens"): "offsets",
    ("balance_ranks", "packing"): "costs",  # a Packing, or the per-pack costs themselves
}


def names(message, label, param, value, kwargs):
    if param in message or CONFLICTS.get((label, param), param) in message:
        return True
    other = any(f"{p}:" in message or f"{p} " in message for p in kwargs if p != param)
    return other and isinstance(value, int) and str(value) in message


def mesh():
    return shardkit.Mesh({"dp": 2, "tp": 2}, owners=[0, 1, 2, 3])


def sharding():
    return shardkit.NamedSharding(mesh(), shardkit.PartitionSpec("dp"))


def mixture():
    return shardkit.Mixture([10, 20], [0.5, 0.5])


TOKENS = np.arange(200, dtype=np.int32)
OFFSETS = np.arange(0, 201, 10, dtype=np.int64)
# The arguments the plan and the loader probes share with their CP variants.
PLAN_BASE = dict(lengths=[5, 10, 3, 8, 12, 7], seq_len=16, batch_size=2, world_size=2)
LOADER_BASE = dict(tokens=TOKENS, offsets=OFFSETS, seq_len=16, batch_size=2)


def consume(result):
    if hasattr(result, "__next__"):
        for _ in zip(range(100), result):
            pass


# (label, callable taking keyword arguments, the valid base keyword arguments,
# or a function making them: no bound object lives in a module global)
SURFACE = [
    (
        "ShardPlan",
        shardkit.ShardPlan,
        dict(
            num_items=10,
            world_size=4,
            split="round_robin",
            remainder="uneven",
            offset=0,
            limit=None,
            shuffle=False,
            seed=0,
            epoch=0,
            weights=None,
            equal_counts=False,
        ),
    ),
    (
        "ShardPlan.shard",
        lambda **k: shardkit.ShardPlan(10, 4).shard(**k),
        dict(rank=1, worker=0, num_workers=1),
    ),
    ("whale_choice", shardkit.whale_choice, dict(num_files=10, world_size=4, env={})),
    ("whale_plan", shardkit.whale_plan, dict(num_files=10, world_size=4, seed=0, epoch=0, env={})),
    (
        "pack",
        shardkit.pack,
        dict(
            lengths=[3, 5, 2],
            capacity=8,
            algorithm="bfd",
            images=None,
            max_images=None,
            buffer=None,
            oversize="drop",
            max_sequences=None,
            compat="none",
        ),
    ),
    (
        "StreamingPacker",
        shardkit.StreamingPacker,
        dict(
            capacity=8,
            algorithm="bfd",
            max_images=None,
            max_sequences=None,
            oversize="drop",
            buffer=None,
            state=None,
        ),
    ),
    ("pack_stream", lambda **k: list(shardkit.pack_stream(**k)), dict(lengths=[3, 5], capacity=8)),
    (
        "balance_ranks",
        shardkit.balance_ranks,
        dict(
            packing=[1.0, 2.0, 3.0, 4.0],
            world_size=2,
            packs_per_rank=1,
            cost="tokens",
            drop_last=False,
        ),
    ),
    (
        "PackedCollator",
        shardkit.PackedCollator,
        dict(
            seq_len=8,
            padding_side="right",
            pad_token_id=0,
            ignore_index=-100,
            block_mask=False,
            causal=True,
        ),
    ),
    (
        "EvalPlan",
        shardkit.EvalPlan,
        dict(
            num_items=10,
            world_size=2,
            batch_size=3,
            devices=1,
            min_device_batch=None,
            split="round_robin",
            shuffle=False,
            seed=0,
            epoch=0,
            offset=0,
            limit=None,
            window="strict",
        ),
    ),
    ("EvalPlan.batch", lambda **k: shardkit.EvalPlan(10, 2, 3).batch(**k), dict(rank=1, step=0)),
    ("rank_and_world", shardkit.rank_and_world, dict(rank=None, world_size=None, environ={})),
    ("discover", shardkit.discover, dict(environ={})),
    ("pad_for_devices", shardkit.pad_for_devices, dict(n=10, devices=4, min_device_batch=None)),
    ("steps_for_count", shardkit.steps_for_count, dict(max_count=10, batch_size=3)),
    (
        "masked_sum",
        shardkit.masked_sum,
        dict(values=np.ones(4), mask=np.array([True, False, True, True]), axis=0),
    ),
    (
        "Mixture",
        shardkit.Mixture,
        dict(
            sizes=[10, 20],
            weights=[0.5, 0.5],
            by="samples",
            lengths=None,
            block=None,
            seed=0,
            schedule=None,
            interpolation="step",
            repeat=True,
            schedule_unit="samples",
        ),
    ),
    (
        "Mixture(by=tokens)",
        shardkit.Mixture,
        dict(sizes=[2, 2], weights=[0.5, 0.5], by="tokens", lengths=[[1, 2], [3, 4]]),
    ),
    (
        "Mixture(schedule)",
        shardkit.Mixture,
        dict(
            sizes=[10, 20],
            weights=[0.5, 0.5],
            schedule=[(100, [0.2, 0.8])],
            interpolation="linear",
            schedule_unit="samples",
            repeat=[True, False],
        ),
    ),
    ("Mixture.numpy", lambda **k: mixture().numpy(**k), dict(start=0, stop=10)),
    ("Mixture.take", lambda **k: mixture().take(**k), dict(positions=[0, 3])),
    ("Mixture.source_of", lambda **k: mixture().source_of(**k), dict(position=3)),
    ("Mixture.state_dict", lambda **k: mixture().state_dict(**k), dict(position=3)),
    ("Mixture.consumed", lambda **k: mixture().consumed(**k), dict(position=3)),
    ("Mixture.block_counts", lambda **k: mixture().block_counts(**k), dict(block=0)),
    (
        "Mixture.from_state",
        lambda **k: shardkit.Mixture.from_state(**k),
        dict(state=mixture().state_dict(3), weights=[0.3, 0.7], schedule=None),
    ),
    (
        "DataRoles",
        shardkit.DataRoles,
        lambda: dict(mesh=mesh(), data_axes="dp", rank=0, broadcast_axes=()),
    ),
    ("Mesh", shardkit.Mesh, dict(axes={"x": 2, "y": 2}, owners=[0, 0, 1, 1])),
    (
        "NamedSharding",
        shardkit.NamedSharding,
        lambda: dict(mesh=mesh(), spec=shardkit.PartitionSpec("dp")),
    ),
    ("NamedSharding.shard_shape", lambda **k: sharding().shard_shape(**k), dict(shape=(8, 4))),
    (
        "NamedSharding.process_indices",
        lambda **k: sharding().process_indices(**k),
        dict(shape=(8, 4), process=1),
    ),
    ("LoadingPlan", shardkit.LoadingPlan, lambda: dict(sharding=sharding(), batch_size=8)),
    (
        "TrainPlan",
        shardkit.TrainPlan,
        dict(
            **PLAN_BASE,
            mode="pad",
            shuffle=True,
            seed=0,
            epoch=0,
            algorithm="bfd",
            buffer=None,
            cost="tokens",
            images=None,
            max_images=None,
            oversize="split",
            micro_batches=1,
            max_sequences=None,
            position=0,
            state=None,
        ),
    ),
    (
        "TokenLoader",
        shardkit.TokenLoader,
        dict(
            **LOADER_BASE,
            rank=0,
            world_size=2,
            shuffle=True,
            seed=0,
            epoch=0,
            algorithm="bfd",
            oversize="split",
            buffer=None,
            worker=0,
            num_workers=1,
            pad_token_id=0,
            ignore_index=-100,
            padding_side="right",
            num_threads=1,
            prefetch=2,
            token_dtype="int32",
            equal_steps=True,
            mode="pad",
            cost="tokens",
            block_mask=False,
            causal=True,
        ),
    ),
    ("save_state", shardkit.save_state, dict(path="ck.json", state={})),  # in tmp_path
    # Context parallelism (issue 24): the CP options beside a valid base.
    (
        "TrainPlan(cp)",
        shardkit.TrainPlan,
        dict(
            **PLAN_BASE,
            cp_size=2,
            cp_strategy="head_tail",
            cp_granularity=None,
        ),
    ),
    (
        "TokenLoader(cp)",
        shardkit.TokenLoader,
        dict(
            **LOADER_BASE,
            cp_size=2,
            cp_rank=1,
            cp_granularity=None,
            num_threads=0,
        ),
    ),
    (
        "DataRoles(cp)",
        shardkit.DataRoles,
        dict(mesh={"dp": 2, "cp": 2}, data_axes="dp", rank=0, cp_axes="cp"),
    ),
    (
        "cp_rank_work",
        shardkit.cp_rank_work,
        dict(lengths=[5, 3], seq_len=16, cp_size=2, split="contiguous", cp_granularity=None),
    ),
    (
        "cp_restore_index",
        shardkit.cp_restore_index,
        dict(lengths=[5, 3], seq_len=16, cp_size=2, cp_granularity=None),
    ),
]


@contextmanager
def deadline(seconds):
    def hang(*_):
        raise TimeoutError(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def problem(label, param, value, f, kwargs):
    """None when the call succeeds or fails clearly; else what is wrong."""
    try:
        with deadline(10):
            consume(f(**kwargs))
        return None
    except (ValueError, TypeError, IndexError) as e:
        message = str(e)
        where = f"{label}({param}={value!r}): {type(e).__name__}: {message[:300]!r}"
        if "\n" in message:
            return "multi-line message: " + where
        if "incompatible function arguments" in message or "bad_alloc" in message:
            return "unclear message: " + where
        if not names(message, label, param, value, kwargs):
            return "message does not name the argument: " + where
        return None
    except Exception as e:  # noqa: BLE001 (every other type is the finding)
        return f"{type(e).__name__}: {label}({param}={value!r}): {str(e)[:300]!r}"


def test_base_calls_succeed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for label, f, kwargs in SURFACE:
        consume(f(**(kwargs() if callable(kwargs) else kwargs)))


@pytest.mark.parametrize("label, f, kwargs", SURFACE, ids=[s[0] for s in SURFACE])
def test_every_argument_refuses_bad_values_with_one_line_naming_it(
    label, f, kwargs, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    kwargs = kwargs() if callable(kwargs) else kwargs
    found = []
    for param in kwargs:
        for value in BAD:
            what = problem(label, param, value, f, {**kwargs, param: value})
            if what:
                found.append(what)
    assert not found, f"{len(found)} unclear errors:\n" + "\n".join(found)


# ---- the CLI: every numeric flag of every subcommand -------------------------

CLI_VALUES = [
    "-1",
    "0",
    "1e3",
    "abc",
    "4611686018427387904",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
]


@pytest.fixture
def cli_files(tmp_path):
    np.save(tmp_path / "t.npy", TOKENS)
    np.save(tmp_path / "o.npy", OFFSETS)
    (tmp_path / "l.txt").write_text("3\n5\n2\n")
    (tmp_path / "i.txt").write_text("0\n1\n0\n")
    return tmp_path


def cli_bases(d):
    """(label, command, valid base flags, {flag: companion flags it needs})."""
    source = f"{d}/t.npy:{d}/o.npy"
    loader = ["--seq-len", "16", "--batch", "2", "--quiet"]
    return [
        ("shard", "shard", ["--items", "10", "--world", "4"], {"--worker": ["--workers", "2"]}),
        ("audit", "audit", ["--items", "10", "--world", "4"], {"--worker": ["--workers", "2"]}),
        ("mix", "mix", ["--sizes", "10,20", "--weights", "1,1"], {}),
        (
            "pack",
            "pack",
            ["--lengths", f"{d}/l.txt", "--capacity", "8"],
            {"--packs-per-rank": ["--world", "2"], "--max-images": ["--images", f"{d}/i.txt"]},
        ),
        ("eval-plan", "eval-plan", ["--items", "10", "--world", "2", "--batch", "3"], {}),
        (
            "loader-stats",
            "loader-stats",
            ["--tokens", f"{d}/t.npy", "--offsets", f"{d}/o.npy", *loader],
            {"--samples": None, "--block": None},  # mixture flags: below
        ),
        (
            "loader-stats --mixture",
            "loader-stats",
            ["--mixture", f"{source},{source}", "--weights", "1,1", *loader],
            {},
        ),
        ("layout", "layout", ["--mesh", "x=2,y=2", "--spec", "'x'", "--shape", "8,4"], {}),
    ]


def numeric_flags(binary, command):
    """The flags whose value is one number (metavar a single letter: N, W, E, ...)."""
    text = subprocess.run([binary, command, "--help"], capture_output=True, text=True).stdout
    return re.findall(r"^  (--[a-z-]+) [A-Za-z]\b(?![,.:])", text, re.M)


def test_cli_numeric_flags_refuse_bad_values_with_one_line_naming_the_flag(cli_files):
    """Each numeric flag with -1, 0, 1e3, "abc" and values near 2^62, 2^63,
    2^64: success, or exit != 0 with one stderr line "shardkit <command>:
    --flag: ..." that shows the value as given when it names this flag (an
    epoch of 2^64 - 1 printed as -1 was one of the issue's findings)."""
    binary = cli_path()
    found = []
    cases = 0
    for label, command, base, companions in cli_bases(cli_files):
        for flag in numeric_flags(binary, command):
            if companions.get(flag, []) is None:
                continue
            for value in CLI_VALUES:
                args = [*base, *companions.get(flag, [])]
                if flag in args:
                    args[args.index(flag) + 1] = value
                else:
                    args += [flag, value]
                cases += 1
                r = subprocess.run(
                    [binary, command, *args], capture_output=True, text=True, timeout=60
                )
                if r.returncode == 0:
                    continue
                m = re.match(rf"shardkit {command}: (--[a-z-]+): ", r.stderr)
                if (
                    r.stderr.count("\n") != 1
                    or m is None
                    or (m[1] == flag and value not in r.stderr)
                ):
                    found.append(f"{label} {flag} {value}: exit {r.returncode}: {r.stderr[:200]!r}")
    assert cases > 300
    assert not found, f"{len(found)} unclear CLI errors:\n" + "\n".join(found)
