"""shardkit.DataRoles against a brute force over random meshes, the mesh adapters (dict,
shardkit.Mesh, torch DeviceMesh, jax.sharding.Mesh), the argument conversion of plans and
loaders, and the replica check."""

import itertools
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import jax_launch
import numpy as np
import pytest
import torchrun_launch
from thread_engines import ThreadEngines

import shardkit
from shardkit import DataRoles, Mesh
from shardkit.layout import (
    ReplicaCheck,
    ReplicaDivergenceError,
    batch_fingerprint,
    data_rank_and_world,
)

HERE = Path(__file__).resolve().parent
PYTHON_DIR = str(HERE.parent)
WORKERS = HERE / "workers"


def _brute(axes, owners, data_axes, rank, broadcast_axes):
    """The roles by enumeration: every device's coordinates from itertools.product."""
    names = list(axes)
    coords = list(itertools.product(*(range(axes[n]) for n in names)))  # row-major

    def data_key(c):
        return tuple(c[names.index(a)] for a in data_axes)

    def origin(c):
        return all(c[names.index(a)] == 0 for a in broadcast_axes)

    sets = {}
    for d, c in enumerate(coords):
        sets.setdefault(owners[d], set()).add(data_key(c))
    mine = sets[rank]
    classes = sorted({min(s) for s in sets.values()})
    group = sorted(r for r, s in sets.items() if s == mine)
    loaders = {r for d, c in enumerate(coords) if origin(c) for r in [owners[d]]}
    first = min(d for d in range(len(coords)) if owners[d] == rank)
    c = list(coords[first])
    for a in broadcast_axes:
        c[names.index(a)] = 0
    source = rank if rank in loaders else owners[coords.index(tuple(c))]
    saver = min(r for r in group if r in loaders)
    return dict(
        dp_rank=classes.index(min(mine)),
        dp_size=len(classes),
        replica_group=group,
        loads=rank in loaders,
        source=source,
        saver=saver,
        reporter=min(group),
    )


def _random_config(rng):
    names = rng.sample(["dp", "tp", "pp", "cp", "ep"], rng.randint(1, 4))
    axes = {n: rng.randint(1, 4) for n in names}
    size = int(np.prod(list(axes.values())))
    order = list(names)
    rng.shuffle(order)
    k = rng.randint(0, len(order))
    data = order[:k]
    broadcast = [a for a in order[k:] if rng.random() < 0.5]
    owners = list(range(size))
    if rng.random() < 0.5:
        rng.shuffle(owners)  # any rank order
    return axes, owners, data, broadcast


def test_roles_equal_the_brute_force_over_random_meshes_and_rank_orders():
    rng = random.Random(11)
    for _ in range(300):
        axes, owners, data, broadcast = _random_config(rng)
        mesh = Mesh(axes, owners=owners)
        groups = {}
        for rank in range(len(owners)):
            roles = DataRoles(mesh, data, rank, broadcast_axes=broadcast)
            want = _brute(axes, owners, data, rank, broadcast)
            got = {k: getattr(roles, k) for k in want}
            assert got == want, (axes, owners, data, broadcast, rank)
            groups.setdefault(roles.dp_rank, []).append(roles)
        # A partition into dp_size groups of the non-data size, one saver each.
        dp_size = int(np.prod([axes[a] for a in data]))
        assert sorted(groups) == list(range(dp_size))
        for members in groups.values():
            assert len(members) == len(owners) // dp_size
            assert sum(m.saves for m in members) == 1
            assert sum(m.reports for m in members) == 1


def test_processes_with_several_devices_must_hold_whole_shards():
    # A JAX-style mesh (owners = process index): data=4 x model=2, 2 processes.
    roles = DataRoles(Mesh({"data": 4, "model": 2}, owners=[0, 0, 1, 1, 0, 0, 1, 1]), "data", 1)
    assert (roles.dp_rank, roles.dp_size, roles.data_coordinates) == (1, 2, [1, 3])
    want = _brute({"data": 4, "model": 2}, [0, 0, 1, 1, 0, 0, 1, 1], ["data"], 1, [])
    assert roles.replica_group == want["replica_group"] == [1]
    with pytest.raises(ValueError, match="data_axes: ranks 0 and 1 hold overlapping"):
        DataRoles(Mesh({"data": 2, "model": 2}, owners=[0, 0, 0, 1]), "data", 0)


def test_dict_meshes_use_the_mpi_rank_order_and_rank_defaults_to_discovery(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "3")
    roles = DataRoles({"tp": 2, "dp": 2}, ["dp"])  # data axis inner
    assert (roles.rank, roles.dp_rank, roles.replica_group) == (3, 1, [1, 3])
    assert DataRoles([("tp", 2), ("dp", 2)], "dp", 0).replica_group == [0, 2]


def test_errors_name_the_value():
    with pytest.raises(ValueError, match="data_axes: 'data' is not an axis of the mesh dp=2"):
        DataRoles({"dp": 2}, "data", 0)
    with pytest.raises(IndexError, match="rank: 4 holds no device"):
        DataRoles({"dp": 2, "tp": 2}, "dp", 4)
    with pytest.raises(ValueError, match="broadcast_axes: 'dp' is a data axis"):
        DataRoles({"dp": 2, "tp": 2}, "dp", 0, broadcast_axes="dp")
    with pytest.raises(ValueError, match="data_axes: expected axis names"):
        DataRoles({"dp": 2}, ["dp", 3], 0)
    with pytest.raises(ValueError, match="mesh: expected a shardkit.Mesh"):
        DataRoles(42, "dp", 0)
    with pytest.raises(ValueError, match="axes"):
        DataRoles({"dp": 2**40, "tp": 2**40}, "dp", 0)


def test_plans_and_loaders_take_roles_instead_of_rank_and_world():
    roles = DataRoles({"dp": 3, "tp": 2}, "dp", rank=5)  # dp_rank 2 of 3
    assert data_rank_and_world(None, None, roles) == (2, 3)
    assert data_rank_and_world(7, 9) == (7, 9)
    with pytest.raises(ValueError, match="rank: 1 differs from the roles' dp_rank 2"):
        data_rank_and_world(1, None, roles)
    with pytest.raises(ValueError, match="data_axes: mesh= and data_axes= go together"):
        data_rank_and_world(None, None, mesh={"dp": 2})
    assert data_rank_and_world(None, None, mesh=Mesh.rank_order({"dp": 2, "tp": 2}), data_axes="dp")
    assert list(roles.shard(10)) == list(shardkit.ShardPlan(10, 3).shard(2)) == [2, 5, 8]
    plan = shardkit.ShardPlan(10, 3, shuffle=True, seed=4)
    assert list(roles.shard(plan)) == list(plan.shard(2))
    with pytest.raises(ValueError, match="plan: world_size 2 differs from dp_size 3"):
        roles.shard(shardkit.ShardPlan(10, 2))
    # The two tensor-parallel ranks of one group get identical loader batches.
    tokens = np.arange(4000, dtype=np.int32)
    offsets = np.arange(0, 4001, 40, dtype=np.int64)
    batches = []
    for rank in (4, 5):
        r = DataRoles({"dp": 3, "tp": 2}, "dp", rank=rank)
        loader = shardkit.TokenLoader(tokens, offsets, seq_len=64, batch_size=2, roles=r, seed=3)
        assert (loader.rank, loader.world_size) == (2, 3)
        batches.append([b["documents"].tolist() for b in loader])
    assert batches[0] == batches[1] and batches[0]


def test_replica_check_names_the_step_and_the_ranks_on_every_rank():
    world = {"dp": 2, "tp": 2}
    roles = [DataRoles(world, "dp", r) for r in range(4)]
    batches = {0: [1, 2], 1: [1, 2], 2: [3, 4], 3: [3, 4]}
    table = {}

    def engine_for(rank):
        def allgather(values):
            table[rank] = values
            return np.stack([table[r] for r in range(4)])

        return allgather

    checks = [ReplicaCheck(roles[r], engine_for(r), every=2) for r in range(4)]
    # Fill the table as a collective would, then every rank reads it.
    for step, bad in ((0, None), (1, None), (2, 3)):
        ids = dict(batches)
        if bad is not None:
            ids[bad] = [4, 3]
        for r in range(4):
            table[r] = np.array([roles[r].dp_rank, batch_fingerprint(ids[r]), step], np.int64)
        for r in range(4):
            if bad is None:
                assert checks[r].check(step, ids[r]) is (step % 2 == 0)
            else:
                with pytest.raises(ReplicaDivergenceError, match=r"step 2: ranks \[2, 3\]"):
                    checks[r].check(step, ids[r])
    assert batch_fingerprint([1, 2]) != batch_fingerprint([2, 1])
    with pytest.raises(ValueError, match="every: must be at least 1"):
        ReplicaCheck(roles[0], engine_for(0), every=0)


def test_torch_device_mesh_and_jax_mesh_adapters():
    """One process each: a 1-rank gloo DeviceMesh, and a JAX mesh over 8 CPU devices."""
    code = r"""
import os, sys
import numpy as np
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
import shardkit
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0,
                        world_size=1)
mesh = init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp"))
r = shardkit.DataRoles(mesh, "dp")
assert (r.rank, r.dp_rank, r.dp_size, r.replica_group, r.loads) == (0, 0, 1, [0], True), r
try:
    shardkit.DataRoles(init_device_mesh("cpu", (1,)), "dp")
    raise SystemExit("no error")
except ValueError as e:
    assert str(e).startswith("mesh: the DeviceMesh has no mesh_dim_names"), e
assert shardkit.discover().mesh is None
with mesh:  # discover() reports torch's current DeviceMesh
    info = shardkit.discover()
    assert info.mesh is mesh and info == (0, 1, 0, "torch.distributed"), info
    assert info.roles("dp").replica_group == [0]
dist.destroy_process_group()
import jax
from jax.sharding import Mesh
jm = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
r = shardkit.DataRoles(jm, "data")
assert (r.rank, r.dp_rank, r.dp_size, r.replica_group) == (0, 0, 1, [0]), r
assert r.data_coordinates == [0, 1, 2, 3]
assert shardkit.discover().mesh is None
try:
    shardkit.discover().roles("data")
    raise SystemExit("no error")
except ValueError as e:
    assert str(e).startswith("mesh: the engine holds no mesh"), e
with jax.set_mesh(jm):  # ... and JAX's mesh
    info = shardkit.discover()
    assert info.mesh == jm and info.roles("data").data_coordinates == [0, 1, 2, 3], info.mesh
print("ok")
"""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-c", code, str(port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def _torchrun(tmp_path, mode):
    torchrun_launch.finish(
        torchrun_launch.launch("roles_torchrun_worker.py", 4, tmp_path, mode), 150
    )
    return json.loads((tmp_path / f"{mode}.json").read_text())


def _worker_offsets():
    sys.path.insert(0, str(WORKERS))
    try:
        import roles_torchrun_worker
    finally:
        sys.path.remove(str(WORKERS))
    return roles_torchrun_worker.data()[1]


def _exactly_once(lists, n):
    flat = sorted(x for lst in lists for batch in lst for x in batch)
    assert flat == list(range(n)), "not every document exactly once"


@pytest.mark.parametrize("mode, pairs", [("dp_tp", [[0, 1], [2, 3]]), ("tp_dp", [[0, 2], [1, 3]])])
def test_torchrun_device_mesh_tensor_parallel_pairs_get_identical_batches(tmp_path, mode, pairs):
    ranks = _torchrun(tmp_path, mode)
    assert sorted(r["group"] for r in ranks) == sorted(pairs * 2)
    for a, b in pairs:
        assert ranks[a]["dp_rank"] == ranks[b]["dp_rank"]
        for key in ("loader", "sampler", "eval"):
            assert ranks[a][key] == ranks[b][key] and ranks[a][key], key
        assert ranks[a]["saves"] != ranks[b]["saves"]  # one saver per group
    groups = [ranks[a] for a, _ in pairs]
    assert sorted(g["dp_rank"] for g in groups) == [0, 1]
    _exactly_once([g["loader"] for g in groups], 301)
    evals = [[x for batch in g["eval"] for x in batch] for g in groups]
    assert len(groups[0]["eval"]) == len(groups[1]["eval"])  # equal steps
    # EvalPlan pads with repeats flagged in its mask; the real entries cover once.
    plan = shardkit.EvalPlan(301, 2, 8)
    real = [
        [i for s in range(plan.num_steps) for i, m in zip(*plan.batch(g["dp_rank"], s)) if m]
        for g in groups
    ]
    assert sorted(real[0] + real[1]) == list(range(301))
    assert all(len(e) == plan.num_steps * 8 for e in evals)
    samplers = [g["sampler"] for g in groups]
    assert len(samplers[0]) == len(samplers[1]) == 151
    assert set(samplers[0]) | set(samplers[1]) == set(range(301))
    # Roles with equal steps: TP pairs identical every step, the DP groups cover once.
    for a, b in pairs:
        for key in ("torch_loader", "train_steps"):
            assert ranks[a][key] == ranks[b][key] and ranks[a][key], key
    loaders = [g["torch_loader"] for g in groups]
    assert len(loaders[0]) == len(loaders[1])  # equal steps
    _exactly_once(loaders, 301)
    steps = [g["train_steps"] for g in groups]
    assert len(steps[0]) == len(steps[1])
    lengths = np.diff(_worker_offsets())
    covered = np.zeros(301, np.int64)
    for g in steps:
        for step in g:
            for row in step:
                for doc, _, length in row:
                    covered[doc] += length
    assert covered.tolist() == lengths.tolist(), "every token of every document once"
    # The evaluation: all 4 ranks gathered/summed, each item counted once.
    for r in ranks:
        assert r["unshard"] == [10.0 * i for i in range(301)]
        assert r["masked_sum"] == [float(sum(range(301))), 301, 602]  # naive: twice


def test_torchrun_pipeline_only_stage_zero_reads(tmp_path):
    ranks = _torchrun(tmp_path, "pp")  # mesh dp=2 x pp=2, ranks [[0, 1], [2, 3]]
    assert [r["loads"] for r in ranks] == [True, False, True, False]
    assert [r["source"] for r in ranks] == [0, 0, 2, 2]
    assert all("loader" not in r for r in ranks if not r["loads"])
    _exactly_once([ranks[0]["loader"], ranks[2]["loader"]], 301)


def test_torchrun_diverging_replica_fails_fast_on_every_rank(tmp_path):
    ranks = _torchrun(tmp_path, "diverge")
    for r in ranks:
        assert r["error"] is not None, r
        assert r["error"].startswith("step 2: ranks [2, 3] (dp_rank 1)"), r["error"]


def test_jax_two_processes_global_batches_roles_and_psum():
    """2 processes x 4 CPU devices, data x model mesh with interleaved owners."""
    for r in jax_launch.run("roles_jax_worker.py", 2, devices=4):
        assert r.returncode == 0 and "ok" in r.out.splitlines()[-1], r.out[-3000:]


def test_a_discover_result_stands_for_the_rank():
    info = shardkit.discover(
        environ={"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    )
    roles = DataRoles({"dp": 2, "tp": 2}, "dp", info)
    assert (roles.rank, roles.dp_rank, roles.replica_group) == (2, 1, [2, 3])


def test_eval_plan_with_roles_unshards_each_item_once_over_random_meshes():
    """Every rank of a random mesh builds EvalPlan(n, batch_size=B, roles=...), runs its
    steps and passes outputs that say who produced them; gather_unshard returns each item
    once, from the reporter (least rank) of its replica group, on every rank."""
    from shardkit.eval import counted_mask, gather_unshard

    rng = random.Random(23)
    for trial in range(40):
        names = rng.sample(["dp", "tp", "pp", "cp"], rng.randint(1, 3))
        axes = {n: rng.randint(1, 3) for n in names}
        data = rng.sample(names, rng.randint(0, len(names)))
        world = int(np.prod(list(axes.values())))
        n, b = rng.randint(0, 30), rng.randint(1, 4)
        roles = [DataRoles(axes, data, g) for g in range(world)]
        plans = [shardkit.EvalPlan(n, batch_size=b, roles=r) for r in roles]
        assert plans[0].world_size == roles[0].dp_size
        steps = plans[0].num_steps
        outputs = []
        for g, plan in enumerate(plans):
            assert plan.roles.rank == g and plan.fingerprint == plans[0].fingerprint
            batches = [plan.batch(plan.roles.dp_rank, s) for s in range(steps)]
            for peer in plan.roles.replica_group:  # replicas run identical steps
                other = plans[peer]
                assert all(
                    np.array_equal(other.batch(other.roles.dp_rank, s)[0], batches[s][0])
                    for s in range(steps)
                )
            ids = np.concatenate([i for i, _ in batches]) if steps else np.zeros(0, np.int64)
            outputs.append(ids * 1000 + g)
        engines = ThreadEngines(world)
        results = engines.run(lambda g: gather_unshard(plans[g], outputs[g], engines.engine(g)))
        for got in results:
            assert (got // 1000).tolist() == list(range(n)), (trial, axes, data)
            assert all(roles[int(x % 1000)].reports for x in got), "only reporters count"
        # Global sums: the reporters' real slots are every item exactly once.
        counted = sum(
            int(counted_mask(plans[g].batch(roles[g].dp_rank, s)[1], roles[g]).sum())
            for g in range(world)
            for s in range(steps)
        )
        assert counted == n
        assert sum(r.reports for r in roles) == roles[0].dp_size


def test_eval_plan_roles_arguments_and_errors():
    roles = DataRoles({"dp": 2, "tp": 2}, "dp", rank=3)
    plan = shardkit.EvalPlan(10, batch_size=4, roles=roles)
    same = shardkit.EvalPlan(10, 2, 4, mesh={"dp": 2, "tp": 2}, data_axes="dp")
    assert plan.fingerprint == same.fingerprint == shardkit.EvalPlan(10, 2, 4).fingerprint
    assert shardkit.EvalPlan(10, 2, 4).roles is None
    assert (plan.roles.dp_rank, plan.roles.reporter, plan.roles.reports) == (1, 2, False)
    with pytest.raises(ValueError, match="^world_size: 3 differs from the roles' dp_size 2$"):
        shardkit.EvalPlan(10, 3, 4, roles=roles)
    with pytest.raises(ValueError, match="^world_size: required unless roles= is given$"):
        shardkit.EvalPlan(10, batch_size=4)
    with pytest.raises(ValueError, match="^data_axes: mesh= and data_axes= go together$"):
        shardkit.EvalPlan(10, batch_size=4, mesh={"dp": 2})
    with pytest.raises(ValueError, match="^roles: pass roles= or mesh= and data_axes=, not both"):
        shardkit.EvalPlan(10, batch_size=4, roles=roles, mesh={"dp": 2}, data_axes="dp")
    with pytest.raises(ValueError, match="^roles: expected a shardkit.DataRoles, got 3$"):
        shardkit.EvalPlan(10, batch_size=4, roles=3)
    from shardkit.eval import gather_unshard, replica_sources

    assert replica_sources([1, 1, 0, 0], 2) == [2, 0]
    with pytest.raises(ValueError, match=r"^dp_ranks: no rank has dp_rank 1 of 2"):
        replica_sources([0, 0], 2)
    # Ranks that built their roles from different meshes fail together, naming dp_ranks;
    # a rank with roles beside ranks without fails naming roles.
    wrong = [
        shardkit.EvalPlan(10, batch_size=4, roles=DataRoles({"dp": 2}, "dp", 0)),
        shardkit.EvalPlan(10, batch_size=4, roles=DataRoles({"dp": 2, "tp": 2}, "dp", 1)),
    ]  # rank 1 thinks it is a tensor-parallel replica of rank 0: nobody holds dp_rank 1
    engines = ThreadEngines(2)
    rows = np.zeros(plan.num_steps * 4)

    def run(plans):
        def one(g):
            try:
                gather_unshard(plans[g], rows, engines.engine(g))
            except ValueError as e:
                return str(e)
            return "no error"

        return engines.run(one)

    for message in run(wrong):
        assert message.startswith("dp_ranks: no rank has dp_rank 1 of 2"), message
    mixed = [
        shardkit.EvalPlan(10, batch_size=4, roles=DataRoles({"dp": 2}, "dp", 0)),
        shardkit.EvalPlan(10, 2, 4),
    ]
    for message in run(mixed):
        assert message.startswith("roles: ranks [0] built the plan with roles but ranks [1]")


def test_torch_datasets_take_roles_replicas_identical_groups_cover_once():
    """TokenDataset, ConstantLengthDataset and ShardedIterableDataset with roles (dp=2 x
    tp=2, torchrun order) instead of rank/world: the two ranks of a tensor-parallel pair
    yield identical batches, the two data-parallel groups cover the data once."""
    from shardkit.torch import ConstantLengthDataset, ShardedIterableDataset, TokenDataset

    roles = [DataRoles({"dp": 2, "tp": 2}, "dp", g) for g in range(4)]
    rng = np.random.default_rng(2)
    lengths = rng.integers(1, 30, 57)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.arange(offsets[-1], dtype=np.int32)
    samples = [{"input_ids": list(range(int(n)))} for n in lengths]

    def run(make, key):
        out = []
        for r in roles:
            out.append([np.asarray(b[key]).tolist() for b in make(r)])
        assert out[0] == out[1] and out[2] == out[3] and out[0] != out[2]
        assert len(out[0]) == len(out[2])  # equal steps
        return out[0], out[2]

    a, b = run(
        lambda r: TokenDataset(tokens, offsets, seq_len=32, batch_size=2, roles=r, seed=1),
        "documents",
    )
    assert sorted(x for batch in a + b for x in batch) == list(range(57))
    a, b = run(
        lambda r: ConstantLengthDataset(samples, seq_len=32, batch_size=2, roles=r), "row_tokens"
    )
    assert sum(map(sum, a + b)) == int(lengths.sum())
    got = [list(ShardedIterableDataset(list(range(57)), roles=r)) for r in roles]
    assert got[0] == got[1] and got[2] == got[3] and sorted(got[0] + got[2]) == list(range(57))
    via_mesh = TokenDataset(
        tokens, offsets, seq_len=32, batch_size=2, mesh={"dp": 2, "tp": 2}, data_axes="dp"
    )
    assert via_mesh.data_roles is not None
    with pytest.raises(ValueError, match="^rank: 0 differs from the roles' dp_rank 1$"):
        ShardedIterableDataset(list(range(5)), rank=0, roles=roles[3])


def test_cli_mesh_and_data_axes_report_every_ranks_roles(cli):
    """shard / audit / eval-plan --mesh --data-axes: the plan splits over the data-parallel
    ranks and every rank's roles are listed, equal to shardkit.DataRoles."""
    axes = {"tp": 2, "dp": 3, "pp": 2}
    mesh = ",".join(f"{k}={v}" for k, v in axes.items())
    for command in (["shard", "--items", 10], ["eval-plan", "--items", 10, "--batch", 2]):
        out = cli(*command, "--mesh", mesh, "--data-axes", "dp", "--broadcast-axes", "pp", "--json")
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert got["world"] == got["dp_size"] == 3
        assert len(got["ranks"]) == 3
        for g, entry in enumerate(got["roles"]):
            want = DataRoles(axes, "dp", g, broadcast_axes="pp")
            assert entry == {
                "rank": g,
                "dp_rank": want.dp_rank,
                "dp_size": 3,
                "replica_group": want.replica_group,
                "loads": want.loads,
                "source": want.source,
                "saver": want.saver,
                "reporter": want.reporter,
            }
    text = cli("eval-plan", "--items", 10, "--batch", 2, "--mesh", "dp=2,tp=2", "--data-axes", "dp")
    assert text.returncode == 0 and "{0,1}" in text.stdout and "{2,3}" in text.stdout
    assert cli("audit", "--items", 10, "--mesh", mesh, "--data-axes", "dp,tp").returncode == 0
    bad = [
        (["--mesh", "dp=2,tp=2"], "--data-axes: required with --mesh"),
        (["--mesh", "dp=2", "--data-axes", "xx"], "--data-axes: 'xx' is not an axis"),
        (["--mesh", "dp=2", "--data-axes", "dp", "--world", 3], "--world: 3 differs from"),
        (["--data-axes", "dp", "--world", 2], "--data-axes: needs --mesh"),
        (["--mesh", "dp=2", "--data-axes", "dp", "--broadcast-axes", "dp"], "--broadcast-axes:"),
        (["--mesh", "dp=100,tp=100", "--data-axes", "dp"], "--mesh: more than 4096 ranks"),
        (["--mesh", "dp=2;tp", "--data-axes", "dp"], "--mesh:"),
        ([], "--world: required"),
    ]
    for command in ("shard", "eval-plan"):
        extra = ["--batch", 2] if command == "eval-plan" else []
        for args, message in bad:
            out = cli(command, "--items", 10, *extra, *args)
            assert out.returncode == 2 and out.stderr.startswith(f"shardkit {command}: {message}")
            assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_cli_loader_stats_with_a_mesh_loads_per_data_parallel_rank(cli, tmp_path):
    """loader-stats --mesh tp=2,dp=3 --data-axes dp: three data-parallel ranks (the
    equal-steps figures of --world 3) and the six ranks' roles."""
    rng = np.random.default_rng(4)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(1, 90, 120))]).astype(np.int64)
    np.save(tmp_path / "t.npy", np.arange(offsets[-1], dtype=np.int32))
    np.save(tmp_path / "o.npy", offsets)
    common = ["loader-stats", "--tokens", tmp_path / "t.npy", "--offsets", tmp_path / "o.npy"]
    common += ["--seq-len", 128, "--batch", 2, "--json"]
    with_mesh = cli(*common, "--mesh", "tp=2,dp=3", "--data-axes", "dp")
    assert with_mesh.returncode == 0, with_mesh.stderr
    got = json.loads(with_mesh.stdout)
    plain = json.loads(cli(*common, "--world", 3).stdout)
    for key in ("world", "steps", "batches", "real_tokens", "complete"):
        assert got[key] == plain[key], key
    assert got["world"] == got["dp_size"] == 3 and got["complete"] is True
    assert [r["replica_group"] for r in got["roles"]] == [[0, 3], [1, 4], [2, 5]] * 2
    bad = cli(*common, "--mesh", "tp=2,dp=3", "--data-axes", "dp", "--world", 6)
    assert bad.returncode == 2 and bad.stderr.startswith("shardkit loader-stats: --world: 6")
