"""EvalPlan against plain-Python references (lmms-eval's islice, tfds
even_splits, Flax's pad_shard_unpad rule), torch's DistributedSampler, the CLI
and process discovery."""

import itertools
import json
import math
import random

import numpy as np
import pytest

import shardkit
from shardkit import EvalPlan
from shardkit.eval import discover


def reference_items(n, w, r, split):
    if split == "round_robin":  # lmms-eval
        return list(itertools.islice(range(n), r, n, w))
    q, extra = divmod(n, w)  # tfds even_splits
    begin = r * q + min(r, extra)
    return list(range(begin, begin + q + (r < extra)))


def check(n, w, b, d, split):
    plan = EvalPlan(n, w, b, devices=d, split=split)
    steps = math.ceil(math.ceil(n / w) / b)
    assert plan.num_steps == steps
    assert plan.total_padding == steps * w * b - n
    assert sum(plan.padding(r) for r in range(w)) == plan.total_padding
    seen = [0] * n
    outputs = []
    for r in range(w):
        real, rows = [], []
        for step, idx, mask in plan.batches(r):
            assert idx.shape == (b,) and mask.shape == (b,)
            assert ((0 <= idx) & (idx < max(n, 1))).all()  # padded slots hold valid indices
            real += idx[mask].tolist()
            rows.append(np.stack([idx, idx * 7], axis=1))
            pidx, pmask = plan.batch(r, step, per_device=True)
            assert pidx.shape == (d, b // d)
            assert (pidx.reshape(-1) == idx).all() and (pmask.reshape(-1) == mask).all()
        assert real == reference_items(n, w, r, split)
        assert plan.real(r) == len(real)
        for i in real:
            seen[i] += 1
        outputs.append(np.concatenate(rows) if rows else np.zeros((0, 2), np.int64))
    assert seen == [1] * n
    back = plan.unshard(outputs)
    assert back.shape == (n, 2)
    assert (back[:, 0] == np.arange(n)).all() and (back[:, 1] == 7 * np.arange(n)).all()


def test_every_item_once_in_equal_steps_over_random_configs():
    rng = random.Random(5)
    for _ in range(300):
        d = 2 ** rng.randrange(4)
        check(
            rng.randrange(0, 400),
            rng.randrange(1, 17),
            d * rng.randrange(1, 9),
            d,
            rng.choice(["round_robin", "contiguous"]),
        )


@pytest.mark.parametrize(
    "n,w,b,d",
    [
        (0, 1, 1, 1),
        (0, 4, 8, 2),
        (3, 8, 4, 1),
        (1, 1, 1, 1),
        (64, 8, 8, 8),
        (65, 8, 8, 8),
        (4097, 8, 512, 8),
    ],
)
def test_edges(n, w, b, d):
    for split in ("round_robin", "contiguous"):
        check(n, w, b, d, split)


def test_flax_4097_examples_on_8_hosts_batch_512_gives_2_steps_everywhere():
    for split in ("round_robin", "contiguous"):
        plan = EvalPlan(4097, 8, 512, devices=8, split=split)
        assert plan.num_steps == 2
        assert [plan.real(r) for r in range(8)] == [513] + [512] * 7
        # Each host batching only its own share would run 2 steps on host 0 and
        # 1 on the others: the SPMD hang of Flax's example.
        assert [math.ceil(plan.real(r) / 512) for r in range(8)] == [2] + [1] * 7


def test_padding_is_marked_where_torch_duplicates_silently():
    torch_data = pytest.importorskip("torch.utils.data")
    n, w = 10, 4
    plan = EvalPlan(n, w, 1)
    delivered = []
    for r in range(w):
        torch_list = list(
            torch_data.DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=False)
        )
        delivered += torch_list
        ours = [int(idx[0]) for _, idx, mask in plan.batches(r) if mask[0]]
        assert ours == torch_list[: len(ours)]  # same round robin order as torch
    # torch delivers 12 indices for 10 items (2 counted twice, unmarked)...
    assert len(delivered) == 12 and len(set(delivered)) == 10
    # ...shardkit has the same 3 steps per rank and masks exactly those 2 slots.
    assert plan.num_steps == 3 and plan.total_padding == 2


def test_unshard_accepts_lists_of_objects_and_torch_tensors():
    plan = EvalPlan(5, 2, 2)
    strings = [[f"s{i}" for _, idx, _ in plan.batches(r) for i in idx.tolist()] for r in range(2)]
    assert plan.unshard(strings) == ["s0", "s1", "s2", "s3", "s4"]
    torch = pytest.importorskip("torch")
    tensors = [
        torch.cat([torch.from_numpy(idx) for _, idx, _ in plan.batches(r)]) for r in range(2)
    ]
    assert plan.unshard(tensors).tolist() == [0, 1, 2, 3, 4]


def test_shuffled_plan_unshards_to_item_order():
    plan = EvalPlan(100, 3, 8, shuffle=True, seed=3)
    outs = [np.concatenate([idx for _, idx, _ in plan.batches(r)]) for r in range(3)]
    assert plan.unshard(outs).tolist() == list(range(100))
    assert plan.locate(42)[0] in range(3)


def test_min_device_batch_follows_pad_shard_unpad():
    plan = EvalPlan(100, 2, 8, devices=4, min_device_batch=16)
    assert (plan.device_batch, plan.batch_size) == (16, 64)
    for n in range(40):
        for d in range(1, 6):
            for m in (None, 3, 9):
                db = max(math.ceil(n / d), m or 0)
                assert shardkit.pad_for_devices(n, d, min_device_batch=m) == (db, db * d - n)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match=r"^batch_size: must be at least 1, got 0"):
        EvalPlan(10, 2, 0)
    with pytest.raises(ValueError, match=r"^devices: 3 devices do not divide batch_size 8"):
        EvalPlan(10, 2, 8, devices=3)
    with pytest.raises(ValueError, match=r"^world_size: "):
        EvalPlan(10, 0, 8)
    with pytest.raises(ValueError, match=r"^num_items: "):
        EvalPlan(-1, 2, 8)
    with pytest.raises(ValueError, match=r"^split: balanced is not supported"):
        EvalPlan(10, 2, 8, split="balanced")
    plan = EvalPlan(10, 2, 4)
    with pytest.raises(IndexError, match=r"^rank: 2 is outside \[0, 2\)"):
        plan.batch(2, 0)
    with pytest.raises(IndexError, match=r"^step: 2 is outside \[0, 2\)"):
        plan.batch(0, 2)
    with pytest.raises(ValueError, match=r"^outputs_by_rank: rank 1 has 7 rows, expected 8"):
        plan.unshard([np.zeros(8), np.zeros(7)])
    with pytest.raises(ValueError, match=r"^outputs_by_rank: expected one entry per rank"):
        plan.unshard([np.zeros(8)])


def test_fingerprint_differs_when_any_parameter_does():
    base = EvalPlan(100, 4, 8)
    assert base.fingerprint == EvalPlan(100, 4, 8).fingerprint
    others = [
        EvalPlan(101, 4, 8),
        EvalPlan(100, 5, 8),
        EvalPlan(100, 4, 16),
        EvalPlan(100, 4, 8, devices=2),
        EvalPlan(100, 4, 8, split="contiguous"),
        EvalPlan(100, 4, 8, shuffle=True),
        EvalPlan(100, 4, 8, shuffle=True, seed=1),
    ]
    assert len({base.fingerprint, *(p.fingerprint for p in others)}) == 1 + len(others)


class FakeEngine:
    """The collectives of W ranks simulated in one process: rank r's view."""

    def __init__(self, rank, rows):
        self.rank, self.world_size, self.rows = rank, len(rows), rows

    def allgather_int64(self, values):
        self.rows[self.rank] = np.asarray(values)
        return np.stack(self.rows)


def test_agree_steps_takes_the_largest_filtered_share():
    from shardkit.eval import PlanMismatchError, agree_steps, check_plan

    plan = EvalPlan(100, 3, 4)
    fp = int(np.array([plan.fingerprint], np.uint64).view(np.int64)[0])
    rows = [np.array([fp, c, 3, -1]) for c in (10, 33, 0)]
    assert agree_steps(10, 4, FakeEngine(0, rows), plan) == 9  # ceil(33 / 4)
    rows[2] = np.array([fp ^ 1, 0, 3, -1])
    with pytest.raises(PlanMismatchError, match="ranks 2"):
        check_plan(plan, FakeEngine(0, rows))
    with pytest.raises(ValueError, match="^local_count: "):
        agree_steps(-1, 4, FakeEngine(0, rows))


def test_masked_metrics():
    from shardkit import masked_count, masked_mean, masked_sum

    v = np.array([[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]])
    m = np.array([True, True, False])
    assert masked_count(m) == 2
    assert masked_sum(v, m).tolist() == [4.0, 6.0]
    assert masked_mean(v, m).tolist() == [2.0, 3.0]
    assert math.isnan(masked_mean(np.array([1.0]), np.array([False])))


def test_discover_order_and_errors():
    assert discover(environ={}) == (0, 1, 0, "default")
    both = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "SLURM_PROCID": "5",
        "SLURM_NTASKS": "8",
        "SLURM_LOCALID": "1",
        "PMI_RANK": "3",
        "PMI_SIZE": "4",
    }
    assert discover(environ=both).source == "torchrun"
    del both["RANK"]
    assert discover(environ=both).source == "pmi"
    del both["PMI_SIZE"]
    assert discover(environ=both) == (5, 8, 1, "slurm")
    with pytest.raises(ValueError, match=r"^OMPI_COMM_WORLD_RANK: rank 4 is outside"):
        discover(environ={"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"})


def test_cli_eval_plan_json(cli):
    r = cli("eval-plan", "--items", 4097, "--world", 8, "--batch", 512, "--devices", 8, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["steps"] == 2 and out["padding"] == 2 * 8 * 512 - 4097
    assert out["ranks"][0] == {"rank": 0, "real": 513, "padding": 511}
    assert all(x["real"] + x["padding"] == 1024 for x in out["ranks"])
    r = cli(
        "eval-plan", "--items", 10, "--world", 3, "--batch", 2, "--rank", 1, "--batches", "--json"
    )
    batches = json.loads(r.stdout)["ranks"][0]["batches"]
    plan = EvalPlan(10, 3, 2)
    for step, b in enumerate(batches):
        idx, mask = plan.batch(1, step)
        assert b == {"indices": idx.tolist(), "mask": mask.tolist()}


@pytest.mark.parametrize(
    "args,message",
    [
        (["--batch", 0], "--batch: must be at least 1, got 0"),
        (["--batch", 4, "--devices", 3], "--devices: 3 devices do not divide batch_size 4"),
        (["--batch", 4, "--rank", 3], "--rank: 3 is outside [0, 3)"),
        (["--batch", "x"], "--batch"),
    ],
)
def test_cli_eval_plan_bad_input(cli, args, message):
    r = cli("eval-plan", "--items", 10, "--world", 3, *args)
    assert r.returncode == 2
    assert message in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_demo_reports_the_evaluation_section(cli, tmp_path):
    r = cli("demo", "--json", "--out", tmp_path / "demo.html")
    assert r.returncode == 0, r.stderr
    ev = json.loads(r.stdout)["eval"]
    n = json.loads(r.stdout)["data"]["documents"]
    for row in ev["batches"]:
        b = row["batch"]
        assert row["steps"] == math.ceil(math.ceil(n / 8) / b)
        assert row["padding"] == row["steps"] * 8 * b - n
        assert row["torch_duplicates"] == math.ceil(n / 8) * 8 - n
    assert ev["flax"]["steps"] == 2 and ev["unshard_in_order"] is True


def harness_items(n, w, r, offset, limit):
    """lm-eval / lmms-eval: `limit = int(limit) if limit else None`, then
    islice(range(N), rank + offset, offset + limit, world_size)."""
    limit = int(limit) if limit else None
    stop = None if limit is None else offset + limit
    return list(itertools.islice(range(n), r + offset, stop, w))


def test_harness_window_reads_limit_and_offset_as_lm_eval_does():
    rng = random.Random(13)
    for _ in range(300):
        n, w, b = rng.randrange(40), rng.randrange(1, 5), rng.randrange(1, 4)
        offset = rng.randrange(50)
        limit = rng.choice([None, 0, rng.randrange(1, 45)])
        plan = EvalPlan(n, w, b, offset=offset, limit=limit, window="harness")
        rows = []
        for r in range(w):
            real, out = [], []
            for _step, idx, mask in plan.batches(r):
                real += idx[mask].tolist()
                out.append(idx)
            assert real == harness_items(n, w, r, offset, limit), (n, w, r, offset, limit)
            rows.append(np.concatenate(out) if out else np.zeros(0, np.int64))
        window = list(range(plan.window_begin, plan.window_begin + plan.window_size))
        assert sorted(i for r in range(w) for i in harness_items(n, w, r, offset, limit)) == window
        assert plan.unshard(rows).tolist() == window


def test_strict_window_is_the_default_and_refuses_offset_beyond_the_data():
    with pytest.raises(ValueError, match=r"^offset: 11 lies beyond the data"):
        EvalPlan(10, 2, 4, offset=11)
    none = EvalPlan(10, 2, 4, offset=3, limit=0)
    assert (none.window_size, none.num_steps, none.window) == (0, 0, "strict")
    everything = EvalPlan(10, 2, 4, offset=3, limit=0, window="harness")
    assert (everything.window_begin, everything.window_size) == (3, 7)
    beyond = EvalPlan(10, 2, 4, offset=11, window="harness")
    assert (beyond.window_size, beyond.num_steps) == (0, 0)
    assert EvalPlan(10, 2, 4).fingerprint == EvalPlan(10, 2, 4, window="harness").fingerprint
    assert everything.fingerprint != EvalPlan(10, 2, 4).fingerprint
    with pytest.raises(ValueError, match=r"^window: expected strict or harness"):
        EvalPlan(10, 2, 4, window="lenient")
    with pytest.raises(ValueError, match=r"^limit: "):
        EvalPlan(10, 2, 4, limit=-1, window="harness")
    with pytest.raises(TypeError, match=r"^limit: expected an integer, got float 0.5"):
        EvalPlan(10, 2, 4, limit=0.5, window="harness")


def test_regression_batch_arguments_name_the_parameter_and_the_value():
    plan = EvalPlan(10, 3, 2)
    with pytest.raises(TypeError, match=r"^step: expected an integer, got float 2.0$"):
        plan.batch(0, 2.0)
    with pytest.raises(ValueError, match=r"^step: 9223372036854775808 does not fit"):
        plan.batch(0, 2**63)
    with pytest.raises(TypeError, match=r"^rank: expected an integer, got NoneType None$"):
        plan.padding(None)
    with pytest.raises(TypeError, match=r"^max_count: expected an integer"):
        shardkit.steps_for_count(1.5, 2)
    with pytest.raises(ValueError, match=r"^n: 18446744073709551616 does not fit"):
        shardkit.pad_for_devices(2**64, 2)


def test_regression_huge_batch_is_a_value_error_naming_batch_size_not_a_bare_memory_error():
    plan = EvalPlan(10, 3, 2**55)
    with pytest.raises(ValueError, match=r"^batch_size: 36028797018963968 slots per batch"):
        plan.batch(0, 0)
