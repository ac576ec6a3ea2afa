"""Property fuzz of whole plans (issue 13): random configurations of every
public constructor, boundaries and wrong types included, from a seeded
generator. Each must give a result that passes an independent check (coverage
counted here, not taken from the plan's own audit), or raise ValueError /
IndexError / TypeError with a one-line message that names a parameter: never
another exception, a crash, a hang or a silent acceptance. About a minute in
total on a loaded 2-core machine.
"""

import random
import sys
from pathlib import Path

import numpy as np
import pytest

import shardkit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from sweep import PY_PARAMS  # noqa: E402

BOUNDARY = [0, 1, 2, 3, 5, 7, 8, 13, 64, 2**31, 2**53 + 1, 2**62, 2**63 - 1]
WRONG = [-1, -(2**63), 2**63, 2**64, 1.5, 2.0, float("nan"), float("inf"), "3", None, [2]]
ERRORS = (ValueError, IndexError, TypeError)


def _size(rng, small=40):
    r = rng.random()
    if r < 0.8:
        return rng.randrange(0, small)
    if r < 0.93:
        return rng.choice(BOUNDARY)
    return rng.choice(WRONG)


def _check_error(e, names):
    message = str(e)
    assert "\n" not in message, message
    assert any(n in message for n in names), (type(e).__name__, message, names)


def _expect(call, names):
    """The call's result, or None after checking its rejection."""
    try:
        return call()
    except ERRORS as e:
        _check_error(e, names)
        return None


# The parameters of each call, as the sweep (tools/sweep.py) names them.
SHARD_NAMES = PY_PARAMS["ShardPlan"] + PY_PARAMS["shard"]


def test_shard_plans_cover_their_window_or_refuse_naming_the_parameter():
    rng = random.Random(13)
    checked = 0
    for _ in range(5000):
        n, w = _size(rng), _size(rng, 12)
        kw = {
            "split": rng.choice(["round_robin", "contiguous", "balanced", "nope"]),
            "remainder": rng.choice(["uneven", "drop", "pad", "replicate", "x"]),
            "shuffle": rng.random() < 0.5,
            "seed": rng.choice([0, 1, 2**64 - 1, rng.getrandbits(64), -1, 2**64, 1.5]),
            "epoch": rng.choice([0, 3, 2**63, rng.getrandbits(64), -5]),
        }
        if rng.random() < 0.3:
            kw["offset"] = _size(rng)
        if rng.random() < 0.3:
            kw["limit"] = rng.choice([None, _size(rng)])
        if kw["split"] == "balanced" or rng.random() < 0.1:
            count = n if isinstance(n, int) and 0 <= n < 100 else 5
            kw["weights"] = rng.choice(
                [[rng.random() * 10 for _ in range(count)], [1.0] * (count + 1), [-1.0] * count]
            )
        plan = _expect(lambda: shardkit.ShardPlan(n, w, **kw), SHARD_NAMES)
        if plan is None or plan.num_items > 300 or plan.world_size > 40:
            continue
        checked += 1
        lo, hi = plan.window
        seen = []
        for r in range(plan.world_size):
            shard = plan.shard(r)
            items = shard.numpy()
            mask = shard.mask()
            assert len(items) == len(shard) == plan.counts()[r]
            assert mask[len(shard) - shard.padding :].sum() == 0
            assert all(lo <= i < hi for i in items.tolist())
            seen += items[mask].tolist()
        if plan.remainder == "replicate":
            assert sorted(seen) == sorted(list(range(lo, hi)) * plan.world_size)
            orders = {tuple(plan.shard(r).numpy().tolist()) for r in range(plan.world_size)}
            if hi - lo >= 10:  # each rank its own order (fewer items: orders may repeat)
                assert len(orders) == plan.world_size
        else:
            assert len(seen) == len(set(seen)) == (hi - lo) - plan.dropped
        _expect(lambda: plan.shard(rng.choice([-1, plan.world_size, 2**63 - 1])), SHARD_NAMES)
    assert checked > 300, checked


def test_eval_plans_put_every_item_in_one_unmasked_slot_or_refuse():
    rng = random.Random(14)
    checked = 0
    names = [n for n in PY_PARAMS["EvalPlan"] if n != "shuffle"]  # this check never named it
    for _ in range(4000):
        n, w, b = _size(rng), _size(rng, 9), _size(rng, 9)
        kw = {
            "devices": rng.choice([1, 1, 2, 4, 0, -1, 2.0]),
            "split": rng.choice(["round_robin", "contiguous", "balanced"]),
            "shuffle": rng.random() < 0.3,
        }
        if rng.random() < 0.2:
            kw["min_device_batch"] = rng.choice([None, 0, 3, 16, -2])
        plan = _expect(lambda: shardkit.EvalPlan(n, w, b, **kw), names)
        if plan is None or plan.num_items > 200 or plan.world_size > 50 or plan.num_steps > 50:
            continue
        if plan.batch_size > 10000:  # batch() allocates batch_size slots
            continue
        checked += 1
        seen = []
        for r in range(plan.world_size):
            for s in range(plan.num_steps):
                idx, mask = plan.batch(r, s)
                assert idx.shape == mask.shape == (plan.batch_size,)
                assert ((0 <= idx) & (idx < max(plan.num_items, 1))).all() or plan.num_items == 0
                seen += idx[mask].tolist()
        assert sorted(seen) == list(range(plan.num_items))
        _expect(lambda: plan.batch(0, plan.num_steps), ["step"])
    assert checked > 300, checked


def test_packings_keep_every_item_under_capacity_or_refuse():
    rng = random.Random(15)
    checked = 0
    names = PY_PARAMS["pack"]
    for _ in range(3000):
        count = rng.randrange(0, 60)
        lengths = [rng.choice([0, 1, 5, 100, 4095, 4096, 5000]) for _ in range(count)]
        if rng.random() < 0.1:
            lengths = rng.choice([[-1, 2], [1.5], [2**63], [1e19], "x", [[1]]])
        capacity = rng.choice([1, 16, 100, 4096, 0, -3, 1.9, float("inf"), 2**64])
        kw = {
            "algorithm": rng.choice(["next_fit", "ffd", "bfd", "balanced", "worst"]),
            "oversize": rng.choice(["drop", "error", "split", "keep"]),
        }
        if rng.random() < 0.2:
            kw["buffer"] = rng.choice([1, 4, 0, -1, None])
        if rng.random() < 0.2:
            kw["max_sequences"] = rng.choice([1, 3, 0, None])
        p = _expect(lambda: shardkit.pack(lengths, capacity, **kw), names)
        if p is None:
            continue
        checked += 1
        offsets, items = p.offsets.tolist(), p.items.tolist()
        starts, lens = p.starts.tolist(), p.lengths.tolist()
        got = {}
        for b in range(p.num_packs):
            entries = range(offsets[b], offsets[b + 1])
            assert sum(lens[e] for e in entries) <= capacity
            for e in entries:
                got.setdefault(items[e], []).append((starts[e], lens[e]))
        dropped = set(p.dropped_items.tolist())
        assert len(dropped) == p.dropped
        for i, n in enumerate(lengths):
            if i in dropped:
                assert i not in got
                continue
            pieces = sorted(got[i])  # every kept item, empty ones included, exactly once
            assert pieces[0][0] == 0 and sum(length for _, length in pieces) == n, (i, pieces)
            for (s0, l0), (s1, _) in zip(pieces, pieces[1:]):
                assert s0 + l0 == s1
    assert checked > 200, checked


def test_meshes_and_shardings_place_every_device_inside_the_shape_or_refuse():
    rng = random.Random(16)
    checked = 0
    names = ["axes", "owners", "spec", "shape", "mesh"]
    for _ in range(600):
        axes = {
            name: rng.choice([1, 2, 3, 4, 0, -1, 2.0, 2**63])
            for name in rng.sample(["x", "y", "z", "x''"], rng.randrange(1, 4))
        }
        mesh = _expect(lambda: shardkit.Mesh(axes), names)
        if mesh is None:
            continue
        entries = [
            rng.choice([None, rng.choice(list(axes)), tuple(rng.sample(list(axes), 1)), "w"])
            for _ in range(rng.randrange(0, 3))
        ]
        spec = _expect(lambda: shardkit.PartitionSpec(*entries), names)
        if spec is None:
            continue
        assert eval(repr(spec), {"PartitionSpec": shardkit.PartitionSpec}) == spec
        sharding = _expect(lambda: shardkit.NamedSharding(mesh, spec), names)
        if sharding is None:
            continue
        shape = tuple(rng.choice([0, 1, 2, 4, 6, 8, 12, 24, -2]) for _ in range(len(entries) + 1))
        indices = _expect(lambda: sharding.devices_indices_map(shape), names)
        if indices is None:
            continue
        checked += 1
        for slices in indices.values():
            for s, extent in zip(slices, shape):
                start, stop, _ = s.indices(extent)
                assert 0 <= start <= stop <= extent
    assert checked > 50, checked


@pytest.mark.parametrize("seed", range(3))
def test_wrong_types_anywhere_are_type_or_value_errors(seed):
    rng = random.Random(100 + seed)
    calls = [
        (lambda v: shardkit.ShardPlan(v, 2), ["num_items"]),
        (lambda v: shardkit.ShardPlan(10, v), ["world_size"]),
        (lambda v: shardkit.ShardPlan(10, 2, offset=v), ["offset"]),
        (lambda v: shardkit.ShardPlan(10, 2, limit=v), ["limit"]),
        (lambda v: shardkit.ShardPlan(10, 2, seed=v), ["seed"]),
        (lambda v: shardkit.ShardPlan(10, 2).shard(v), ["rank"]),
        (lambda v: shardkit.EvalPlan(10, 2, v), ["batch_size"]),
        (lambda v: shardkit.EvalPlan(10, 2, 2, devices=v), ["devices"]),
        (lambda v: shardkit.pack([1, 2], v), ["capacity"]),
        (lambda v: shardkit.pack([1, 2], 4, buffer=v), ["buffer"]),
        (lambda v: shardkit.Mesh({"x": v}), ["axes"]),
        (lambda v: shardkit.masked_mean(np.ones(2), v), ["mask"]),
    ]
    for _ in range(200):
        call, names = rng.choice(calls)
        value = rng.choice(WRONG + [object(), b"1", 3 + 0j, {"a": 1}])
        try:
            call(value)
        except ERRORS as e:
            _check_error(e, names)
