"""Every edge's default of a loader option is the core's (LoaderOptions,
shardkit/loader/loader.h), read here through the binding: the Python loaders,
the torch datasets and the CLI spell none of their own."""

import inspect
import json

import numpy as np

import shardkit
from shardkit import _core


def _corpus(tmp_path, n=40):
    lengths = np.random.default_rng(3).integers(1, 90, size=n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.arange(offsets[-1], dtype=np.int32) % 1000
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    return tokens, offsets


def _default(function, name):
    return inspect.signature(function).parameters[name].default


def test_the_core_default_is_equal_steps_on():
    # The documented default of a training loader (docs/loader.md).
    assert _core._loader_option_defaults["equal_steps"] is True


def test_python_loader_defaults_are_the_cores(tmp_path):
    core = _core._loader_option_defaults["equal_steps"]
    assert _default(shardkit.TokenLoader, "equal_steps") == core
    assert _default(shardkit.TokenLoader.mixture, "equal_steps") == core
    tokens, offsets = _corpus(tmp_path)
    loader = shardkit.TokenLoader(tokens, offsets, seq_len=128, batch_size=2)
    # What the core holds for a loader given no equal_steps.
    assert loader.equal_steps == core and (loader.num_steps is not None) == core
    mixed = shardkit.TokenLoader.mixture(
        [(tokens, offsets), (tokens, offsets)], [1, 1], seq_len=128, batch_size=2
    )
    assert mixed.equal_steps == core


def test_torch_dataset_defaults_are_the_cores(tmp_path, torch):
    from shardkit.torch import ConstantLengthDataset, TokenDataset

    core = _core._loader_option_defaults["equal_steps"]
    assert _default(ConstantLengthDataset, "equal_steps") == core
    tokens, offsets = _corpus(tmp_path)
    ds = TokenDataset(tokens, offsets, seq_len=128, batch_size=2, rank=0, world_size=1)
    assert ds.equal_steps == core and ds.loader(0, 1).equal_steps == core


def test_cli_loader_default_is_the_cores(cli, tmp_path):
    _corpus(tmp_path)
    base = ["loader-stats", "--tokens", tmp_path / "t.npy", "--offsets", tmp_path / "o.npy"]
    base += ["--seq-len", 128, "--batch", 2, "--world", 2, "--quiet", "--json"]
    core = _core._loader_option_defaults["equal_steps"]
    r = cli(*base)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["equal_steps"] is core
    r = cli(*base, "--per-rank")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["equal_steps"] is False


def _signature_options(cls):
    """The keyword options the binding's signature lists (after roles/data_axes)."""
    text = cls.__init__.__nb_signature__[0][0]
    params = text.split("*, ", 1)[1].rsplit(") -> None", 1)[0].split(", ")
    return {p.split(":")[0]: p.split(" = ")[1] for p in params}


def test_shard_plan_keywords_are_its_options_table():
    options = _signature_options(shardkit.ShardPlan)
    assert set(options) == {
        "split", "remainder", "offset", "limit", "shuffle", "seed", "epoch", "weights",
        "equal_counts",
    }  # fmt: skip
    # Each one reaches the plan: the window, the order and the balance (the
    # oracle: the definitions in docs/sharding.md written out here).
    plan = shardkit.ShardPlan(10, 2, offset=2, limit=5, split="contiguous", remainder="drop")
    assert [list(plan.shard(r)) for r in range(2)] == [[2, 3], [4, 5]]
    weights = [9, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    balanced = shardkit.ShardPlan(10, 2, split="balanced", weights=weights, equal_counts=True)
    assert sorted(len(balanced.shard(r)) for r in range(2)) == [5, 5]
    shuffled = shardkit.ShardPlan(10, 1, shuffle=True, seed=3, epoch=1)
    assert sorted(shuffled.shard(0)) == list(range(10))
    assert list(shuffled.shard(0)) != list(range(10))


def test_eval_plan_keywords_are_its_options_table():
    options = _signature_options(shardkit.EvalPlan)
    for name in ("roles", "mesh", "data_axes"):
        options.pop(name)
    assert set(options) == {
        "devices", "min_device_batch", "split", "shuffle", "seed", "epoch", "offset", "limit",
        "window",
    }  # fmt: skip
    assert options["min_device_batch"] == "None" and options["window"] == "'strict'"
    plan = shardkit.EvalPlan(10, 2, 4, devices=2, min_device_batch=3)
    assert plan.batch_size == 6  # 2 devices x max(4 / 2, 3)
    assert shardkit.EvalPlan(10, 2, 4, min_device_batch=None).batch_size == 4


def test_cli_eval_plan_window_flags_select_the_window(cli):
    # Items [offset, min(N, offset + limit)) each once (docs/eval.md, Window).
    r = cli("eval-plan", "--items", 20, "--world", 3, "--batch", 2, "--offset", 4, "--limit", 9,
            "--batches", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    seen = [
        i
        for rank in out["ranks"]
        for step in rank["batches"]
        for i, m in zip(step["indices"], step["mask"])
        if m
    ]
    assert sorted(seen) == list(range(4, 13))
    # harness: limit 0 is every item from the offset; strict: no item.
    harness = cli("eval-plan", "--items", 20, "--world", 3, "--batch", 2, "--offset", 15,
                  "--limit", 0, "--window", "harness", "--json")  # fmt: skip
    assert sum(rank["real"] for rank in json.loads(harness.stdout)["ranks"]) == 5
    strict = cli("eval-plan", "--items", 20, "--world", 3, "--batch", 2, "--offset", 15,
                 "--limit", 0, "--json")  # fmt: skip
    assert sum(rank["real"] for rank in json.loads(strict.stdout)["ranks"]) == 0
    bad = cli("eval-plan", "--items", 20, "--world", 3, "--batch", 2, "--window", "loose")
    assert bad.returncode == 2 and "window" in bad.stderr and "loose" in bad.stderr, bad.stderr


def _help_choices(cli, command, flag):
    line = next(
        x for x in cli(command, "--help").stdout.splitlines() if x.strip().startswith(f"--{flag} ")
    )
    listed = line.split("NAME", 1)[1].split(":")[0]
    names = [c.replace("(default)", "").strip() for c in listed.split("|")]
    default = next(
        c.replace("(default)", "").strip() for c in listed.split("|") if "(default)" in c
    )
    return names, default


def test_cli_split_and_remainder_help_lists_what_the_core_takes(cli):
    shard = _signature_options(shardkit.ShardPlan)
    for flag in ("split", "remainder"):
        names, default = _help_choices(cli, "shard", flag)
        assert repr(default) == shard[flag]  # the core's default, read through the binding
        for name in names:  # every listed name is one the core accepts
            shardkit.ShardPlan(4, 2, **{flag: name}, weights=[1, 2, 3, 4])
    names, default = _help_choices(cli, "eval-plan", "split")
    assert repr(default) == _signature_options(shardkit.EvalPlan)["split"]
    assert "balanced" not in names  # EvalPlan refuses it
    for name in names:
        shardkit.EvalPlan(4, 2, 2, split=name)
