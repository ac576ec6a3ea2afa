"""ShardPlan against the real peers: lmms-eval's islice, torch's DistributedSampler,
HF datasets' contiguous shards (when installed), tfds's published even_splits."""

import itertools
import random

import numpy as np
import pytest
import torch.utils.data as tud

import shardkit
from shardkit import ShardPlan
from shardkit import torch as shardkit_torch


def test_round_robin_equals_lmms_eval_islice():
    rng = random.Random(0)
    for _ in range(3000):
        n = rng.randrange(0, 200)
        w = rng.randrange(1, 40)
        offset = rng.randrange(0, n + 1)
        limit = rng.choice([None, rng.randrange(0, n + 2)])
        plan = ShardPlan(n, w, offset=offset, limit=limit)
        stop = None if limit is None else offset + limit
        for rank in range(w):
            expected = list(itertools.islice(range(n), rank + offset, stop, w))
            assert list(plan.shard(rank)) == expected, (n, w, offset, limit, rank)
            assert plan.shard(rank).numpy().tolist() == expected


def test_contiguous_counts_equal_tfds_even_splits():
    # tfds.even_splits / split_for_jax_process('test', 6 processes) on 10000
    # examples, as published in Flax's full-eval guide.
    assert ShardPlan(10000, 6, split="contiguous").counts() == [1667] * 4 + [1666] * 2


def test_contiguous_equals_hf_datasets_shard():
    datasets = pytest.importorskip("datasets")
    for n in [0, 1, 5, 17, 100]:
        ds = datasets.Dataset.from_dict({"i": list(range(n))})
        for w in [1, 2, 3, 7, 150]:
            plan = ShardPlan(n, w, split="contiguous")
            for rank in range(w):
                try:
                    theirs = ds.shard(num_shards=w, index=rank, contiguous=True)["i"]
                except IndexError:
                    # datasets raises for a shard that would be empty (N < W);
                    # shardkit gives that rank an empty list.
                    theirs = []
                    assert rank >= n
                assert list(plan.shard(rank)) == theirs


@pytest.mark.parametrize("drop_last", [False, True])
def test_pad_and_drop_equal_torch_distributed_sampler(drop_last):
    for n in range(0, 45):
        for w in range(1, 60):
            data = range(n)
            plan = ShardPlan(n, w, remainder="drop" if drop_last else "pad")
            for rank in range(w):
                torch_sampler = tud.DistributedSampler(
                    data, num_replicas=w, rank=rank, shuffle=False, drop_last=drop_last
                )
                shard = plan.shard(rank)
                assert list(shard) == list(torch_sampler), (n, w, rank, drop_last)
                assert len(shard) == len(torch_sampler)


def test_drop_in_sampler_matches_torch_and_marks_padding():
    for n, w in [(10, 4), (3, 8), (0, 2), (101, 7), (1, 1)]:
        for drop_last in (False, True):
            for rank in range(w):
                ours = shardkit_torch.DistributedSampler(
                    range(n), num_replicas=w, rank=rank, shuffle=False, drop_last=drop_last
                )
                theirs = tud.DistributedSampler(
                    range(n), num_replicas=w, rank=rank, shuffle=False, drop_last=drop_last
                )
                assert list(ours) == list(theirs)
                assert len(ours) == len(theirs)
                assert isinstance(ours, tud.DistributedSampler)
                real = n // w if drop_last else n // w + (rank < n % w)
                assert ours.padding == len(ours) - real
                assert ours.mask().sum() == real


def test_drop_in_sampler_shuffles_one_global_order_per_epoch():
    n, w = 1003, 4
    samplers = [
        shardkit_torch.DistributedSampler(range(n), num_replicas=w, rank=r, seed=5)
        for r in range(w)
    ]
    orders = []
    for epoch in (0, 1):
        for s in samplers:
            s.set_epoch(epoch)
        lists = [list(s) for s in samplers]
        real = [l[: len(l) - s.padding] for l, s in zip(lists, samplers)]
        assert sorted(itertools.chain(*real)) == list(range(n))
        orders.append(lists)
    assert orders[0] != orders[1]
    with pytest.raises(ValueError, match="Invalid rank 4"):
        shardkit_torch.DistributedSampler(range(10), num_replicas=4, rank=4)


def test_random_configurations_cover_exactly_once():
    rng = random.Random(1)
    for _ in range(2000):
        n = rng.randrange(0, 120)
        w = rng.randrange(1, 20)
        split = rng.choice(["round_robin", "contiguous", "balanced"])
        remainder = rng.choice(
            ["uneven", "drop", "pad"] + (["replicate"] if split != "balanced" else [])
        )
        weights = [rng.randrange(0, 100) for _ in range(n)] if split == "balanced" else None
        plan = ShardPlan(
            n,
            w,
            split=split,
            remainder=remainder,
            shuffle=rng.random() < 0.5,
            seed=rng.randrange(100),
            weights=weights,
            offset=rng.randrange(0, n + 1),
        )
        seen = []
        for rank in range(w):
            shard = plan.shard(rank)
            items = shard.numpy()
            mask = shard.mask()
            assert len(items) == len(shard) == plan.counts()[rank]
            assert mask.sum() == len(shard) - shard.padding
            seen.extend(items[mask].tolist())
            workers = [plan.shard(rank, worker=k, num_workers=3) for k in range(3)]
            merged = [None] * len(shard)
            for k, part in enumerate(workers):
                merged[k::3] = list(part)
            assert merged == items.tolist()
        lo, hi = plan.window
        if remainder == "replicate":
            assert sorted(seen) == sorted(list(range(lo, hi)) * w)
        else:
            assert len(seen) == len(set(seen)) == (hi - lo) - plan.dropped
        report = plan.audit()
        assert report.exactly_once
        assert report.padding == sum(plan.padding(r) for r in range(w))
        assert report.delivered == sum(plan.counts()) - report.padding
        assert (report.min_count, report.max_count) == (min(plan.counts()), max(plan.counts()))
        assert report.max_imbalance == report.max_count - report.min_count
        assert report.dropped == plan.dropped and report.duplicates == report.missing == 0
        assert (report.loads is None) == (report.max_load is None)
        assert weights is not None or report.loads is None
        if report.loads is not None:
            assert report.loads == pytest.approx(plan.loads())


def test_huge_n_is_arithmetic_and_immediate():
    n = 2**63 - 1
    plan = ShardPlan(n, 8, shuffle=True, seed=3)
    shard = plan.shard(7)
    assert len(shard) == n // 8
    head = shard.numpy(0, 1000)
    assert ((head >= 0) & (head < n)).all()
    assert len(set(head.tolist())) == 1000
    assert shard[-1] == shard[len(shard) - 1]
    report = plan.audit()
    assert report.exactly_once and report.method == "arithmetic"
    assert plan.locate(int(head[5])) == (7, 5)


def test_errors_are_value_and_index_errors_naming_the_value():
    with pytest.raises(ValueError, match="world_size: must be at least 1, got 0"):
        ShardPlan(10, 0)
    with pytest.raises(ValueError, match="offset: 11 lies beyond the data"):
        ShardPlan(10, 2, offset=11)
    with pytest.raises(ValueError, match="split: unknown split 'diagonal'"):
        ShardPlan(10, 2, split="diagonal")
    with pytest.raises(ValueError, match="weights: expected one weight per item"):
        ShardPlan(10, 2, split="balanced", weights=[1.0] * 9)
    with pytest.raises(ValueError, match="weights: weight of item 3 is nan"):
        ShardPlan(4, 2, split="balanced", weights=[1, 2, 3, float("nan")])
    with pytest.raises(ValueError, match="weights: expected a 1-D array"):
        ShardPlan(4, 2, split="balanced", weights=np.ones((2, 2)))
    plan = ShardPlan(10, 2)
    with pytest.raises(IndexError, match="rank: 2 is outside"):
        plan.shard(2)
    with pytest.raises(IndexError):
        plan.shard(0)[5]
    with pytest.raises(IndexError, match="worker: 2 is outside"):
        plan.shard(0, worker=2, num_workers=2)


def test_balanced_reports_loads_against_the_lower_bound():
    rng = np.random.default_rng(0)
    weights = np.floor(rng.lognormal(6, 1, 4000))
    plan = ShardPlan(len(weights), 8, split="balanced", weights=weights)
    report = plan.audit()
    lower = max(weights.max(), weights.sum() / 8)
    assert report.lower_bound == pytest.approx(lower)
    assert report.load_imbalance < 0.001
    loads = plan.loads()
    assert report.loads == loads and report.max_load == max(loads)
    for rank in range(8):
        assert loads[rank] == pytest.approx(weights[plan.shard(rank).numpy()].sum())


def test_sharded_iterable_dataset_covers_each_item_once_over_workers():
    data = [f"doc{i}" for i in range(53)]
    for workers in (0, 1, 3):
        got = []
        for rank in range(4):
            ds = shardkit_torch.ShardedIterableDataset(
                data, rank=rank, world_size=4, shuffle=True, seed=2
            )
            loader = tud.DataLoader(ds, batch_size=None, num_workers=workers)
            got.append(list(loader))
        assert sorted(itertools.chain(*got)) == sorted(data)
        if workers == 0:
            reference = got
        else:
            assert got == reference  # round-robin over workers reproduces rank order


def test_whale_plan_reads_the_environment_switches():
    with pytest.warns(UserWarning, match="hang"):
        plan = shardkit.whale_plan(
            10, 3, env={"WHALE_UNBALANCED_IO_SLICING": "True", "WHALE_DROP_LAST_FILES": "True"}
        )
    assert plan.remainder == "uneven" and plan.counts() == [4, 3, 3]
    plan = shardkit.whale_plan(2, 3, env={})
    assert plan.remainder == "replicate" and plan.shuffle
    with pytest.raises(ValueError, match="WHALE_DROP_LAST_FILES: 'perhaps'"):
        shardkit.whale_plan(10, 3, env={"WHALE_DROP_LAST_FILES": "perhaps"})
