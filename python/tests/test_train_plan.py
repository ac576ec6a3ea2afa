"""shardkit.TrainPlan: equal steps, every document once, resume and elastic
resume, errors. The oracle is the lengths themselves: the pieces delivered
must tile every document exactly once."""

import json
import random

import numpy as np
import pytest
from tiling import lognormal_lengths, tiles

import shardkit


def lognormal(n, seed=0, median=300, sigma=1.2):
    rng = np.random.default_rng(seed)
    return lognormal_lengths(rng, median, sigma, n)


def delivered(plan, steps=None, epoch=None):
    out = []
    for s in range(plan.num_steps if steps is None else steps):
        for r in range(plan.world_size):
            info = plan.step_info(r, s)
            for row, e in zip(info.rows, info.row_epochs):
                if epoch is None or e == epoch:
                    out.extend(row)
    return out


@pytest.mark.parametrize("mode", ["pad", "continuous", "drop"])
def test_random_configurations_equal_steps_exactly_once(mode):
    rng = random.Random(hash(mode) % 1000)
    for _ in range(25):
        n = rng.randrange(0, 300)
        seq_len = rng.choice([16, 64, 256, 1024])
        lengths = lognormal(n, seed=rng.randrange(1000), median=seq_len // 3 + 1)
        world = rng.choice([1, 2, 3, 4, 8])
        batch = rng.randrange(1, 4)
        plan = shardkit.TrainPlan(
            lengths,
            seq_len,
            batch,
            world,
            mode=mode,
            seed=rng.randrange(100),
            epoch=rng.randrange(3),
            algorithm=rng.choice(["next_fit", "ffd", "bfd", "balanced"]),
            buffer=rng.choice([None, 4, 64]),
            cost=rng.choice(["tokens", "squared"]),
        )
        filler = 0
        for s in range(plan.num_steps):
            for r in range(world):
                rows = plan.step(r, s)
                assert len(rows) == batch
                for row in rows:
                    assert sum(length for _, _, length in row) <= seq_len
                    if not row:
                        filler += 1
                        assert mode == "pad" and s == plan.num_steps - 1
        pieces = delivered(plan, epoch=plan.epoch)
        if mode == "drop":
            tail = plan.summary.dropped_packs
            assert tail < world * batch
            covered = sum(length for _, _, length in pieces)
            assert covered + plan.summary.dropped_tokens == int(lengths.sum())
        else:
            tiles(lengths, pieces)
        audit = plan.audit()
        assert audit.exactly_once and audit.equal_steps and audit.filler_last_only, audit.error
        assert audit.filler_rows == filler


def test_steps_stream_equals_random_access():
    lengths = lognormal(500, seed=3)
    plan = shardkit.TrainPlan(lengths, 1024, 2, 4, seed=9)
    for r in range(4):
        assert list(plan.steps(r)) == [plan.step(r, s) for s in range(plan.num_steps)]
        assert list(plan.steps(r, 3)) == [plan.step(r, s) for s in range(3, plan.num_steps)]


def test_resume_and_elastic_resume():
    lengths = lognormal(800, seed=5)
    plan = shardkit.TrainPlan(lengths, 2048, 2, 4, seed=1, epoch=2)
    k = plan.num_steps // 2
    state = plan.state_dict(k)
    assert json.loads(json.dumps(state)) == state
    assert set(state) == {"version", "kind", "epoch", "position", "stream", "checksum"}
    same = shardkit.TrainPlan(lengths, 2048, 2, 4, seed=1, state=state)
    assert same.num_steps == plan.num_steps - k
    assert all(
        same.step(r, s) == plan.step(r, k + s) for r in range(4) for s in range(same.num_steps)
    )
    for world, batch in [(3, 2), (4, 5), (1, 1), (7, 3)]:
        other = shardkit.TrainPlan(lengths, 2048, batch, world, seed=1, state=state)
        tiles(lengths, delivered(plan, k) + delivered(other))
    end = plan.state_dict()
    assert end["epoch"] == 3 and end["position"] == 0
    with pytest.raises(ValueError, match="^state: "):
        shardkit.TrainPlan(lengths, 1024, 2, 4, seed=1, state=state)  # another seq_len
    with pytest.raises(ValueError, match="^state: "):
        shardkit.TrainPlan(lengths[:-1], 2048, 2, 4, seed=1, state=state)
    with pytest.raises(ValueError, match="^state: "):
        shardkit.TrainPlan(lengths, 2048, 2, 4, seed=1, state={**state, "version": 9})


def test_continuous_follows_into_the_next_epoch():
    lengths = lognormal(300, seed=8, median=200)
    plan = shardkit.TrainPlan(lengths, 512, 3, 4, mode="continuous", epoch=0)
    assert plan.summary.filler_rows == 0
    nxt = shardkit.TrainPlan(lengths, 512, 3, 4, mode="continuous", state=plan.state_dict())
    assert nxt.epoch == 1
    for r in range(4):
        assert plan.step(r, plan.num_steps) == nxt.step(r, 0)
    # Two epochs through one stream: each document once per epoch.
    pieces = {0: [], 1: []}
    for s in range(plan.num_steps + nxt.num_steps):
        for r in range(4):
            info = plan.step_info(r, s)
            for row, e in zip(info.rows, info.row_epochs):
                if e in pieces:
                    pieces[e].extend(row)
    tiles(lengths, pieces[0])
    tiles(lengths, pieces[1])


def test_filler_rows_and_real_tokens_per_rank():
    lengths = [100] * 10
    plan = shardkit.TrainPlan(lengths, 100, 2, 4, shuffle=False)  # 10 rows over 8 per step
    assert plan.num_steps == 2
    last = [plan.step_info(r, 1) for r in range(4)]
    assert sum(i.filler_rows for i in last) == 6
    assert sum(i.tokens for i in last) == 200
    assert all(i.tokens == 100 * sum(1 for row in i.rows if row) for i in last)
    dropped = shardkit.TrainPlan(lengths, 100, 2, 4, shuffle=False, mode="drop")
    assert dropped.num_steps == 1
    assert dropped.summary.dropped_packs == 2 and dropped.summary.dropped_tokens == 200


def test_oversize_drop_is_counted_and_images_budget():
    lengths = [10, 50, 7, 3, 40]
    plan = shardkit.TrainPlan(lengths, 32, 1, 2, oversize="drop")
    assert plan.summary.dropped == 2
    audit = plan.audit()
    assert audit.exactly_once and audit.dropped == 2
    images = [1, 0, 2, 1, 0]
    plan = shardkit.TrainPlan([5, 6, 7, 8, 9], 64, 1, 2, images=images, max_images=2)
    for s in range(plan.num_steps):
        for r in range(2):
            for row in plan.step(r, s):
                assert sum(images[d] for d, _, _ in row) <= 2


def test_edges():
    empty = shardkit.TrainPlan([], 16, 2, 4)
    assert empty.num_steps == 0 and empty.audit().exactly_once
    huge = shardkit.TrainPlan([3, 4, 5], 16, 1, 2**40)
    assert huge.num_steps == 1
    assert huge.step(2**40 - 1, 0) == [[]]
    assert huge.audit().filler_rows == 2**40 - 1
    one = shardkit.TrainPlan(lognormal(50), 512, 4, 1)
    assert one.audit().exactly_once


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(seq_len=0), "seq_len"),
        (dict(batch_size=0), "batch_size"),
        (dict(world_size=0), "world_size"),
        (dict(mode="even"), "mode"),
        (dict(cost="flops"), "cost"),
        (dict(algorithm="best"), "algorithm"),
        (dict(oversize="error"), "oversize"),
        (dict(buffer=0), "buffer"),
        (dict(seed=-1), "seed"),
        (dict(micro_batches=0), "micro_batches"),
        (dict(position=10**6), "position"),
        (dict(lengths=[3, -1]), "lengths"),
        (dict(lengths=[2**62, 2**62]), "lengths"),
        (dict(lengths=[[1, 2]]), "lengths"),
        (dict(world_size=2**40, batch_size=2**20, seq_len=2**10), "batch_size"),
    ],
)
def test_errors_name_the_parameter(kwargs, name):
    args = dict(lengths=[5, 6, 7], seq_len=8, batch_size=2, world_size=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=f"^{name}: "):
        shardkit.TrainPlan(**args)


def test_step_out_of_range_is_index_error():
    plan = shardkit.TrainPlan([5, 6, 7], 8, 1, 2)
    with pytest.raises(IndexError, match="^rank: "):
        plan.step(2, 0)
    with pytest.raises(IndexError, match="^step: "):
        plan.step(0, plan.num_steps)
