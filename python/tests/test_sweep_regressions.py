"""Regressions found by tools/sweep.py (issue 13): every argument of the public
constructors and methods is checked as the bindings check theirs, so a wrong
type or an integer outside 64 bits is one line naming the parameter and the
value: no nanobind signature dump without the value, no float silently
truncated (StreamingPacker(1.5) packed into capacity 1)."""

import json
import re

import numpy as np
import pytest

import shardkit


def _one_line(excinfo, pattern):
    message = str(excinfo.value)
    assert "\n" not in message, message
    assert re.search(pattern, message), message


TOKENS = np.arange(200, dtype=np.int32) % 50
OFFSETS = np.array([0, 10, 10, 70, 150, 200], np.int64)


def _loader(**kw):
    kw.setdefault("seq_len", 16)
    kw.setdefault("batch_size", 2)
    return shardkit.TokenLoader(TOKENS, OFFSETS, num_threads=0, **kw)


@pytest.mark.parametrize(
    "call, error, pattern",
    [
        (lambda: shardkit.whale_plan(2**63, 3), ValueError, r"^num_files: 9223372036854775808"),
        (lambda: shardkit.whale_choice(3, 1.5), TypeError, r"^world_size: .*float 1.5"),
        (
            lambda: shardkit.NamedSharding(None, shardkit.PartitionSpec("x")),
            TypeError,
            r"^mesh: expected a shardkit.Mesh, got NoneType None$",
        ),
        (
            lambda: shardkit.NamedSharding(shardkit.Mesh({"x": 2}), None),
            TypeError,
            r"^spec: expected a PartitionSpec",
        ),
        (lambda: shardkit.EvalPlan(10, 3, 2).batch(0, 2.0), TypeError, r"^step: .*float 2.0$"),
        (lambda: shardkit.StreamingPacker(1.5), TypeError, r"^capacity: .*float 1.5$"),
        (lambda: shardkit.StreamingPacker(2**63), ValueError, r"^capacity: 9223372036854775808"),
        (lambda: shardkit.StreamingPacker(8, buffer=1.5), TypeError, r"^buffer: "),
        (lambda: shardkit.StreamingPacker(8, algorithm=1), TypeError, r"^algorithm: "),
        (lambda: shardkit.StreamingPacker(8).push(0, 1.5), TypeError, r"^length: .*float 1.5$"),
        (lambda: shardkit.StreamingPacker(8).push(2**63, 1), ValueError, r"^item: "),
        (lambda: list(shardkit.pack_stream([1, 2.5], 4)), ValueError, r"^lengths: item 1 is 2.5"),
        (lambda: list(shardkit.pack_stream([1, 2], 1.5)), TypeError, r"^capacity: "),
        (lambda: shardkit.TrainPlan([5, 3], 1.5, 2, 2), TypeError, r"^seq_len: .*float 1.5$"),
        (lambda: shardkit.TrainPlan([5, 3], 2**63, 2, 2), ValueError, r"^seq_len: "),
        (
            lambda: shardkit.TrainPlan([5, 3], 8, 2, 2, micro_batches=None),
            TypeError,
            r"^micro_batches: .*NoneType None$",
        ),
        (lambda: shardkit.TrainPlan([5, 3], 8, 2, 2).step(0, 1.5), TypeError, r"^step: "),
        (lambda: _loader(seq_len=1.5), TypeError, r"^seq_len: .*float 1.5$"),
        (lambda: _loader(prefetch=2**63), ValueError, r"^prefetch: 9223372036854775808"),
        (lambda: _loader(seed=-1), ValueError, r"^seed: -1 is outside"),
        (lambda: _loader(mode=None), TypeError, r"^mode: expected a str, got NoneType None$"),
        (lambda: _loader(shuffle=1), TypeError, r"^shuffle: expected a bool, got int 1$"),
        (lambda: _loader(rank=0, world_size=2**63), ValueError, r"^world_size: "),
        (lambda: shardkit.PackedCollator(1.5), TypeError, r"^seq_len: .*float 1.5$"),
        (
            lambda: shardkit.balance_ranks([1.0], 2, packs_per_rank=1.5),
            TypeError,
            r"^packs_per_rank",
        ),
        (lambda: shardkit.balance_ranks([1.0], 2**63), ValueError, r"^world_size: "),
        (lambda: shardkit.rank_and_world(1.5, 2, environ={}), TypeError, r"^rank: .*float 1.5$"),
        (lambda: shardkit.ShardPlan(10, 3).shard(0)[1.5], TypeError, r"^index: .*float 1.5$"),
        (lambda: shardkit.ShardPlan(10, 3).shard(0).numpy(1.5), TypeError, r"^start: "),
        (lambda: shardkit.ShardPlan(10, 3).shard(0).is_padding(2**63), ValueError, r"^index: "),
        (lambda: shardkit.ShardPlan(10, 3).count(None), TypeError, r"^rank: "),
        (
            lambda: shardkit.LoadingPlan(
                shardkit.NamedSharding(shardkit.Mesh({"x": 2}), shardkit.PartitionSpec("x")), 1.5
            ),
            TypeError,
            r"^batch_size: .*float 1.5$",
        ),
        (
            lambda: shardkit.NamedSharding(
                shardkit.Mesh({"x": 2}), shardkit.PartitionSpec("x")
            ).local_shape((8, 4), 1.5),
            TypeError,
            r"^process: .*float 1.5$",
        ),
    ],
)
def test_regression_arguments_are_one_line_naming_the_parameter(call, error, pattern):
    with pytest.raises(error) as excinfo:
        call()
    _one_line(excinfo, pattern)


def test_regression_float_capacity_is_no_longer_truncated_into_another_packing():
    # StreamingPacker(1.5) used to pack into capacity 1, pack_stream(x, 1.5) likewise.
    assert shardkit.StreamingPacker(np.int64(4)).capacity == 4
    # Whole floats are still lengths (as pack() takes them), and give the int packing.
    assert list(shardkit.pack_stream([1.0, 2.0, 3.0], 4)) == list(
        shardkit.pack_stream([1, 2, 3], 4)
    )


# ---- found by the full-size sweep (seed 0) ------------------------------------------


@pytest.mark.parametrize(
    "call, error, pattern",
    [
        (lambda: shardkit.Mesh(None), TypeError, r"^axes: expected \{name: size\}"),
        (
            lambda: shardkit.NamedSharding(
                shardkit.Mesh({"x": 2}), shardkit.PartitionSpec("x")
            ).shard_shape(None),
            ValueError,
            r"^shape: expected a sequence of ints, got None$",
        ),
        (lambda: shardkit.DataRoles({"x": 2}, 3, 0), TypeError, r"^data_axes: expected an axis"),
        (lambda: shardkit.DataRoles(None, "x", 0), ValueError, r"^mesh: expected a shardkit.Mesh"),
        (lambda: shardkit.DataRoles({"x": 2}, "x", 1.5), TypeError, r"^rank: .*float 1.5$"),
        (
            lambda: shardkit.ShardPlan(3, 4, weights="abc"),
            ValueError,
            r"^weights: expected numbers",
        ),
        (lambda: shardkit.balance_ranks("abc", 2), ValueError, r"^costs: expected numbers"),
        (lambda: list(shardkit.pack_stream(None, 4)), TypeError, r"^lengths: expected an iterable"),
        (lambda: shardkit.PackedCollator(4, pad_token_id="x"), TypeError, r"^pad_token_id: "),
        (lambda: shardkit.PackedCollator(4)([[None]]), TypeError, r"^packs: expected packs"),
        (lambda: shardkit.PackedCollator(2**63 - 1), ValueError, r"^seq_len: .* more than 2\^28"),
        (lambda: shardkit.masked_sum([1.0, 2.0], [True, True], axis=None), TypeError, r"^axis: "),
        (lambda: shardkit.steps_for_count(-1, 4), ValueError, r"^max_count: must be at least 0"),
        (lambda: shardkit.pad_for_devices(2**63 - 1, 5), ValueError, r"^n: "),
        (
            lambda: shardkit.ShardPlan(10, 3).shard(0).numpy(2, 1),
            IndexError,
            r"^stop: range \[2, 1\) is outside \[0, 4\)$",
        ),
        (lambda: shardkit.ShardPlan(10, 3).shard(0).numpy(-1), IndexError, r"^start: range"),
    ],
)
def test_regression_sweep_findings_are_one_line_naming_the_parameter(call, error, pattern):
    with pytest.raises(error) as excinfo:
        call()
    _one_line(excinfo, pattern)


def _one_stderr_line(proc, flag):
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and flag in lines[0], proc.stderr
    return lines[0]


def test_regression_cli_sweep_findings(cli, tmp_path):
    # shard --workers 2^53 listed every worker of every rank (a hang).
    line = _one_stderr_line(
        cli("shard", "--items", 2, "--world", 7, "--workers", 2**53 + 1, "--equal-counts"),
        "--workers",
    )
    assert "too many to list" in line
    # eval-plan --batches with no items allocated a batch of 2^62 slots.
    out = cli("eval-plan", "--items", 0, "--world", 100, "--batch", 2**62, "--batches")
    assert out.returncode == 0, out.stderr
    # loader-stats --resume with a state of another configuration named no flag.
    tokens = tmp_path / "t.npy"
    offsets = tmp_path / "o.npy"
    np.save(tokens, np.arange(200, dtype=np.int32) % 50)
    np.save(offsets, np.array([0, 10, 10, 70, 150, 200], np.int64))
    state = tmp_path / "s.json"
    base = ["loader-stats", "--tokens", tokens, "--offsets", offsets, "--batch", 2, "--quiet"]
    assert cli(*base, "--seq-len", 16, "--save-state", state).returncode == 0
    line = _one_stderr_line(cli(*base, "--seq-len", 32, "--resume", state), "--resume")
    assert "--resume: was saved for another" in line
    # loader-stats --workers 2^62 ran every worker one after another (a hang).
    for workers in (4097, 2**62):
        line = _one_stderr_line(cli(*base, "--seq-len", 16, "--workers", workers), "--workers")
        assert f"--workers: {workers} workers per rank are too many" in line
    assert cli(*base, "--seq-len", 16, "--workers", 3).returncode == 0


def test_regression_mixture_arguments_name_the_parameter():
    with pytest.raises(TypeError) as excinfo:
        shardkit.Mixture([10, 20], [1.0, 1.0], block=[])
    _one_line(excinfo, r"^block: expected an integer, got list \[\]$")
    with pytest.raises(ValueError) as excinfo:
        shardkit.Mixture("ab", [1.0, 1.0])
    _one_line(excinfo, r"^sizes: expected a sequence of ints")
    with pytest.raises(TypeError) as excinfo:
        shardkit.Mixture([10, 20], [1.0, 1.0]).numpy(0, 1.5)
    _one_line(excinfo, r"^stop: expected an integer, got float 1.5$")


# ---- the last open findings of the full-size sweep (seed 0) --------------------------


def test_regression_weighted_audit_over_two_to_the_62_ranks_is_bounded_by_the_window(cli, tmp_path):
    # audit --items 4 --world 2^62 --weights w.npy --remainder replicate --limit 4 said
    # "cannot create std::vector larger than max_size()" (one load per rank); with
    # --split balanced the audit looped over 2^62 ranks (no answer).
    weights = tmp_path / "w.npy"
    np.save(weights, np.array([1.0, 2.0, 3.0, 4.0, 100.0]))
    world = 2**62
    base = ["audit", "--items", 5, "--world", world, "--weights", weights, "--limit", 4, "--json"]
    for extra, groups in [
        (["--remainder", "replicate"], [[10, world]]),
        (["--split", "balanced"], [[0, world - 4], [1, 1], [2, 1], [3, 1], [4, 1]]),
        (
            ["--split", "contiguous", "--remainder", "pad"],
            [[0, world - 4], [1, 1], [2, 1], [3, 1], [4, 1]],
        ),
        (["--remainder", "drop"], [[0, world]]),
    ]:
        out = cli(*base, *extra)
        assert out.returncode == 0, (extra, out.stderr)
        doc = json.loads(out.stdout)
        assert doc["exactly_once"] is True, doc
        assert doc["load_groups"] == groups, (extra, doc)
        assert "loads" not in doc  # per-rank loads of 2^62 ranks are not listed
        assert doc["max_load"] == groups[-1][0], doc
    # A listable world keeps its per-rank loads beside the groups.
    doc = json.loads(
        cli(
            "audit", "--items", 5, "--world", 3, "--weights", weights, "--limit", 4, "--json"
        ).stdout
    )
    assert doc["loads"] == [5.0, 2.0, 3.0] and doc["load_groups"] == [[2, 1], [3, 1], [5, 1]]
    # `shard` prints the listed rank's load without a per-rank list.
    out = cli(
        "shard",
        "--items",
        5,
        "--world",
        world,
        "--weights",
        weights,
        "--limit",
        4,
        "--rank",
        3,
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ranks"] == [{"rank": 3, "count": 1, "padding": 0, "load": 4}]


def test_regression_weighted_plan_over_two_to_the_62_ranks_in_python():
    world = 2**62
    plan = shardkit.ShardPlan(5, world, remainder="replicate", limit=4, weights=[1, 2, 3, 4, 100])
    report = plan.audit()
    assert report.exactly_once and report.max_load == 10.0 and report.load_imbalance == 0.0
    assert report.load_groups == [(10.0, world)]
    assert plan.load(world - 1) == 10.0
    # Per-rank lists of 2^62 ranks are refused naming world_size, not MemoryError.
    for call in (lambda: report.loads, plan.loads, plan.counts):
        with pytest.raises(ValueError) as excinfo:
            call()
        _one_line(excinfo, rf"^world_size: {world} ranks are too many to list")
    plan = shardkit.ShardPlan(5, world, split="balanced", limit=4, weights=[1, 2, 3, 4, 100])
    report = plan.audit()
    assert report.load_groups == [(0.0, world - 4), (1.0, 1), (2.0, 1), (3.0, 1), (4.0, 1)]
    assert sorted(plan.load(r) for r in range(4)) == [1.0, 2.0, 3.0, 4.0]
    # Unweighted: no loads, as before.
    assert shardkit.ShardPlan(5, world).audit().load_groups is None


def test_regression_source_rows_of_a_huge_world_walk_only_the_ranks_holding_items():
    # EvalPlan(3, 2^40, 1).source_rows() looped over every rank (no answer).
    assert list(shardkit.EvalPlan(3, 2**40, 1).source_rows()) == [0, 1, 2]
    # One row per item: too many to list is a ValueError naming num_items (it was
    # "cannot create std::vector larger than max_size()" / MemoryError: std::bad_alloc).
    for n in (2**62, 2**50):
        with pytest.raises(ValueError) as excinfo:
            shardkit.EvalPlan(n, 3, 4).source_rows()
        _one_line(excinfo, rf"^num_items: {n} items need one source row each")


def test_regression_huge_mixture_block_is_refused_naming_block_not_memory_error():
    # Mixture([10, 20], [0, 1], block=2**53 + 1).numpy(2**31) -> MemoryError:
    # std::bad_array_new_length; a lookup inside a block scans up to half of it.
    with pytest.raises(ValueError) as excinfo:
        shardkit.Mixture([10, 20], [0.0, 1.0], block=2**53 + 1)
    _one_line(excinfo, r"^block: must be in \[1, 2\^28\], got 9007199254740993")
    # A tiny integral share needs a block above the bound: named by its parameter.
    with pytest.raises(ValueError) as excinfo:
        shardkit.Mixture([10, 20], [1, 2**40])
    _one_line(excinfo, r"^weights: the smallest positive share \(1 of 1099511627777\) needs blocks")
    with pytest.raises(ValueError) as excinfo:
        shardkit.Mixture([10, 20], [1, 1], schedule=[(100, [1, 2**40])])
    _one_line(excinfo, r"^schedule: the smallest positive share")
    # numpy(start) of an endless mixture asks for 2^62 - start samples: a ValueError
    # naming stop (the length), not MemoryError; a bounded range still works.
    mix = shardkit.Mixture([10, 20], [0.0, 1.0], block=2**20)
    with pytest.raises(ValueError) as excinfo:
        mix.numpy(2**31)
    _one_line(excinfo, r"^stop: an array of 4611686016279904256 elements of 8 bytes cannot be")
    sources, items = mix.numpy(2**31, 2**31 + 5)
    assert list(sources) == [1] * 5 and all(0 <= i < 20 for i in items)
    with pytest.raises(ValueError) as excinfo:
        shardkit.ShardPlan(2**62, 1).shard(0).numpy()
    _one_line(excinfo, r"^stop: an array of 4611686018427387904 elements")


def test_regression_state_with_a_key_twice_is_refused_naming_the_key(cli, tmp_path):
    # Python's json keeps the last of duplicate keys, a first-wins reader the first: a
    # state that says two things is refused, through load_state_dict and --resume.
    loader = _loader()
    next(iter(loader))
    state = loader.state_dict()
    # json.dumps writes the keys None and "null" both as "null".
    with pytest.raises(ValueError) as excinfo:
        _loader().load_state_dict({**state, "null": 0, None: 1})
    _one_line(excinfo, r'^state: not valid JSON at byte \d+: key "null" appears twice')
    tokens, offsets = tmp_path / "t.npy", tmp_path / "o.npy"
    np.save(tokens, TOKENS)
    np.save(offsets, OFFSETS)
    saved = tmp_path / "s.json"
    base = ["loader-stats", "--tokens", tokens, "--offsets", offsets, "--batch", 2, "--quiet"]
    assert cli(*base, "--seq-len", 16, "--save-state", saved).returncode == 0
    text = saved.read_text()
    assert text.startswith("[{")  # a list of the consumers' states
    twice = tmp_path / "twice.json"
    twice.write_text('[{"epoch": 5, ' + text[2:])
    line = _one_stderr_line(cli(*base, "--seq-len", 16, "--resume", twice), "--resume")
    assert 'key "epoch" appears twice' in line
    assert cli(*base, "--seq-len", 16, "--resume", saved).returncode == 0


def test_regression_mixture_take_reads_only_integer_positions_and_mask_names_rank():
    # take([1, 2]) was nanobind's multi-line signature dump, take(np.array([1.5]))
    # silently read position 1; ShardPlan(2**62, 1).shard(0).mask() a bare MemoryError.
    mix = shardkit.Mixture([10, 20], [1, 1], block=2, seed=3)
    want = mix.take(np.array([1, 2, 5], np.int64))
    for positions in (
        [1, 2, 5],
        (1, 2, 5),
        np.array([1, 2, 5], np.int32),
        np.array([1, 2, 5], np.uint8),
    ):
        got = mix.take(positions)
        assert [a.tolist() for a in got] == [a.tolist() for a in want]
    assert [a.tolist() for a in mix.take([])] == [[], []]
    for positions, pattern in [
        (np.array([1.5]), r"^positions: expected integers, got dtype float64$"),
        ([1.0, 2.0], r"^positions: expected integers, got dtype float64$"),
        (["a"], r"^positions: expected integers, got dtype str32$"),
        ([[1]], r"^positions: expected a 1-D array of integers, got list \[\[1\]\]$"),
        (None, r"^positions: expected a 1-D array of integers, got NoneType None$"),
        (np.array([2**64 - 1], np.uint64), r"^positions: a value does not fit in int64$"),
    ]:
        with pytest.raises(ValueError) as excinfo:
            mix.take(positions)
        _one_line(excinfo, pattern)
    with pytest.raises(IndexError) as excinfo:
        mix.take([len(mix)])
    _one_line(excinfo, r"^position: ")
    with pytest.raises(ValueError) as excinfo:
        shardkit.ShardPlan(2**62, 1).shard(0).mask()
    _one_line(excinfo, r"^rank: an array of 4611686018427387904 elements of 1 bytes cannot be")
    assert shardkit.ShardPlan(5, 2, remainder="pad").shard(1).mask().tolist() == [True, True, False]


@pytest.mark.parametrize(
    "method", ["source_of", "consumed", "target", "block_counts", "state_dict"]
)
def test_regression_mixture_methods_name_their_argument(method):
    # mix.consumed(1.5) and the like were nanobind's multi-line signature dump.
    mix = shardkit.Mixture([10, 20], [1, 1], block=2, seed=3)
    name = "block" if method == "block_counts" else "position"
    call = getattr(mix, method)
    with pytest.raises(TypeError) as excinfo:
        call(1.5)
    _one_line(excinfo, rf"^{name}: expected an integer, got float 1.5$")
    with pytest.raises(ValueError) as excinfo:
        call(2**63)
    _one_line(excinfo, rf"^{name}: 9223372036854775808 does not fit")
    call(3)
    if method == "block_counts":
        # b * block overflowed for a block index near 2^62.
        with pytest.raises(IndexError) as excinfo:
            call(2**62)
        _one_line(excinfo, r"^block: 4611686018427387904 is not a block of the mixture$")


def test_mixture_order_numpy_checks_the_window_before_sizing_arrays():
    # stop - start of hostile positions overflowed (or sized an absurd array)
    # before the core checked the window.
    from shardkit import _core

    order = _core._MixtureOrder(shardkit.Mixture([10, 20], [1, 1]), 100)
    with pytest.raises(IndexError, match=r"window: \[-9223372036854775808, "):
        order.numpy(-(2**63), 2**63 - 1)
    with pytest.raises(IndexError, match=r"window: \[5, 3\) is outside"):
        order.numpy(5, 3)
    with pytest.raises(ValueError, match="stop: an array of 4611686018427387904 elements"):
        order.numpy(0, 2**62)
    sources, items = order.numpy(0, 10)
    assert len(sources) == len(items) == 10
