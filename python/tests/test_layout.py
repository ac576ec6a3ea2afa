"""Global-array layout against real JAX (CPU): NamedSharding arithmetic in one
process with 8 host devices, make_array_from_process_local_data across 2 and 4
real processes, and the errors, loading plan and CLI."""

import json
import subprocess
import sys

import jax_launch
import numpy as np
import pytest

import shardkit
from shardkit import LoadingPlan, Mesh, NamedSharding, PartitionSpec


def _counts_of_one_process(script, *args):
    """Runs workers/`script` as one JAX process on 8 CPU devices; returns the
    JSON counts it prints last."""
    out = subprocess.run(
        [sys.executable, str(jax_launch.WORKERS / script), *args],
        env=jax_launch.env(8),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_index_maps_shard_shapes_and_replica_ids_equal_jax_on_random_meshes():
    counts = _counts_of_one_process("layout_jax_single.py", "600", "3")
    assert counts["cases"] == 600
    # The sweep did reach the interesting cases, not only trivial ones.
    assert counts["tuples"] > 50 and counts["zero_size"] > 50
    assert counts["indivisible"] > 100 and counts["replicated_axes"] > 100


def test_drop_in_equals_jax_for_pytrees_shapes_dtypes_and_errors_on_one_process():
    counts = _counts_of_one_process("layout_jax_dropin.py")
    assert counts["equal"] >= 25 and counts["errors"] >= 8, counts


@pytest.mark.parametrize("num_processes", [2, 4])
def test_drop_in_equals_jax_make_array_from_process_local_data_across_processes(num_processes):
    results = jax_launch.run(
        "layout_jax_worker.py", num_processes, devices=8 // num_processes, timeout=90
    )
    for i, (p, text) in enumerate((r, r.out) for r in results):
        assert p.returncode == 0, f"process {i}:\n{text[-3000:]}"
        assert f"process {i}: all ok" in text
        assert "non-uniform, explicit global shape: ok" in text
        assert "interleaved ('x','y'): ok" in text
        assert "40 random layouts ok" in text


# ---- errors (messages name the value) -------------------------------------------------


def test_indivisible_dimension_names_dimension_sizes_and_axes():
    s = NamedSharding(Mesh({"x": 2, "y": 3}), PartitionSpec(("x", "y")))
    with pytest.raises(
        ValueError,
        match=r"shape: dimension 0 of \(8,\) has size 8, which is not "
        r"divisible by its 6 partitions \(mesh axes 'x', 'y' of sizes 2 \* 3",
    ):
        s.shard_shape((8,))


def test_unknown_and_duplicate_axes_are_errors():
    mesh = Mesh({"x": 2, "y": 2})
    with pytest.raises(ValueError, match=r"spec: axis 'z' of dimension 1 .* is not a mesh axis"):
        NamedSharding(mesh, PartitionSpec(None, "z"))
    with pytest.raises(
        ValueError,
        match=r"spec: axis 'x' is used by dimension 0 and again by "
        r"dimension 1",
    ):
        NamedSharding(mesh, PartitionSpec("x", ("y", "x")))
    with pytest.raises(ValueError, match=r"spec: entry 0 is 3"):
        NamedSharding(mesh, PartitionSpec(3))
    with pytest.raises(ValueError, match=r"axes: axis name 'x' appears twice"):
        Mesh([("x", 2), ("x", 2)])
    with pytest.raises(ValueError, match=r"owners: expected one process per device \(4 devices\)"):
        Mesh({"x": 2, "y": 2}, owners=[0, 1])


def test_local_shape_matching_neither_global_nor_addressable_is_an_error():
    s = NamedSharding(Mesh({"x": 4}, owners=[0, 0, 1, 1]), PartitionSpec("x"))
    with pytest.raises(
        ValueError,
        match=r"local_data: dimension 0 has 3 elements, but it must "
        r"match the global size 8 or the 4 elements process 1 addresses",
    ):
        s.local_to_global((3, 2), 1, (8, 2))
    with pytest.raises(IndexError, match=r"process: 5 owns no device"):
        s.local_shape((8,), 5)


def test_inference_in_a_non_uniform_dimension_is_an_error_unless_the_shape_is_given():
    s = NamedSharding(
        Mesh({"x": 2, "y": 4}, owners=[0, 0, 1, 1, 2, 3, 3, 2]), PartitionSpec("x", "y")
    )
    assert s.infer_global_shape((2, 4)) == (4, None)
    with pytest.raises(
        ValueError,
        match=r"global_shape: cannot be inferred .* non-uniform across "
        r"processes in dimension\(s\) 1; pass global_shape explicitly",
    ):
        s.local_to_global((2, 4), 2)
    m = s.local_to_global((2, 4), 2, (4, 8))
    assert m.global_shape == (4, 8)
    # Process 2 holds columns 0:2 and 6:8: blocks 0 and 1 of its local data.
    assert m.devices.tolist() == [4, 7]
    assert m.local_slices[:, 1].tolist() == [[0, 2], [2, 4]]


# ---- Python surface --------------------------------------------------------------------


def test_constructible_from_jax_mesh_and_sharding():
    jax = pytest.importorskip("jax")
    from jax.sharding import Mesh as JMesh
    from jax.sharding import NamedSharding as JSharding
    from jax.sharding import PartitionSpec as P

    jmesh = JMesh(np.array(jax.devices()[:1]).reshape(1, 1), ("a", "b"))
    mesh = Mesh.from_jax(jmesh)
    assert mesh.shape == {"a": 1, "b": 1} and mesh.owners == [0]
    s = NamedSharding.from_jax(JSharding(jmesh, P(("a", "b"), None)))
    assert list(s.spec) == [("a", "b"), None]
    assert s.spec == PartitionSpec(("a", "b"), None)
    assert NamedSharding(mesh, P("a")).shard_shape((3,)) == (3,)  # a JAX spec is accepted
    assert s.shard_shape((2, 5)) == JSharding(jmesh, P(("a", "b"), None)).shard_shape((2, 5))


def test_process_queries_agree_with_a_plain_reference():
    rng = np.random.default_rng(0)
    for _ in range(100):
        sizes = {"x": int(rng.integers(1, 5)), "y": int(rng.integers(1, 5))}
        n = sizes["x"] * sizes["y"]
        owners = rng.integers(0, 3, n).tolist()
        s = NamedSharding(Mesh(sizes, owners=owners), PartitionSpec("y", "x"))
        shape = (sizes["y"] * 2, sizes["x"] * 3)
        index = s.indices(shape)
        # Reference: y coordinate -> dim 0 tile, x coordinate -> dim 1 tile.
        for d in range(n):
            x, y = divmod(d, sizes["y"])
            assert index[d].tolist() == [[2 * y, 2 * y + 2], [3 * x, 3 * x + 3]]
        for p in set(owners):
            mine = [d for d in range(n) if owners[d] == p]
            starts0 = sorted({int(index[d, 0, 0]) for d in mine})
            starts1 = sorted({int(index[d, 1, 0]) for d in mine})
            assert s.process_indices(shape, p) == [
                [(a, a + 2) for a in starts0],
                [(a, a + 3) for a in starts1],
            ]
            assert s.local_shape(shape, p) == (2 * len(starts0), 3 * len(starts1))
            assert s.mesh.devices_of(p).tolist() == mine


def test_loading_plan_composed_with_shard_plan_reads_each_row_once_per_host():
    from shardkit.jax import host_items, host_rows

    owners = [0, 1, 2, 3, 0, 1, 2, 3]  # non-contiguous
    s = NamedSharding(Mesh({"data": 8}, owners=owners), PartitionSpec("data"))
    assert host_rows(s, 16, process_index=2) == [(4, 6), (12, 14)]
    order = shardkit.ShardPlan(103, 1, shuffle=True, seed=9)
    full = order.shard(0).numpy()
    plan = LoadingPlan(s, 16)
    assert plan.num_steps(order.shard(0)) == 6
    for step in range(6):
        batch = full[step * 16 : (step + 1) * 16]
        seen = []
        for p in range(4):
            items, padding = host_items(s, 16, order, step, process_index=p)
            rows = [r for a, b in plan.rows(p) for r in range(a, b)]
            assert items.tolist() == batch[rows].tolist()
            assert not padding.any()
            seen += items.tolist()
        assert sorted(seen) == sorted(batch.tolist())
    for row in range(16):
        assert plan.hosts_of(row) == [owners[row // 2]]
    with pytest.raises(IndexError, match="step: 6 is outside"):
        host_items(s, 16, order, 6, process_index=0)
    with pytest.raises(ValueError, match="order: a ShardPlan must have world_size 1"):
        host_items(s, 16, shardkit.ShardPlan(10, 2), 0, process_index=0)
    with pytest.raises(ValueError, match="batch_size: 12 is not divisible by the 8 partitions"):
        LoadingPlan(s, 12)


def test_replicated_batch_rows_are_held_by_every_process_of_the_replica_group():
    # data=2 splits the batch, model=2 replicates it; owners interleave over model.
    s = NamedSharding(Mesh({"data": 2, "model": 2}, owners=[0, 1, 2, 3]), PartitionSpec("data"))
    plan = LoadingPlan(s, 4)
    assert [plan.rows(p) for p in range(4)] == [[(0, 2)], [(0, 2)], [(2, 4)], [(2, 4)]]
    assert plan.hosts_of(3) == [2, 3]


# ---- CLI --------------------------------------------------------------------------------


def test_cli_json_matches_the_python_api(cli):
    owners = [0, 1, 0, 1, 2, 3, 3, 2]
    out = cli(
        "layout",
        "--mesh",
        "x=2,y=4",
        "--spec",
        "x, ('y',)",
        "--shape",
        "4,8",
        "--owners",
        ",".join(map(str, owners)),
        "--batch",
        "4",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    s = NamedSharding(Mesh({"x": 2, "y": 4}, owners=owners), PartitionSpec("x", ("y",)))
    assert doc["shard_shape"] == list(s.shard_shape((4, 8)))
    index = s.indices((4, 8)).tolist()
    reps = s.replica_ids((4, 8)).tolist()
    assert doc["devices"] == [
        {"device": d, "process": owners[d], "index": index[d], "replica": reps[d]} for d in range(8)
    ]
    assert [p["process"] for p in doc["processes"]] == [0, 1, 2, 3]
    for entry in doc["processes"]:
        p = entry["process"]
        assert entry["local_shape"] == list(s.local_shape((4, 8), p))
        assert entry["index"] == [[list(t) for t in dim] for dim in s.process_indices((4, 8), p)]
        assert entry["rows"] == [list(r) for r in LoadingPlan(s, 4).rows(p)]


def test_cli_human_output_shows_the_mesh_and_non_uniform_dimensions(cli):
    out = cli(
        "layout",
        "--mesh",
        "x=2,y=4",
        "--spec",
        "x, y",
        "--shape",
        "4,8",
        "--owners",
        "0,0,1,1,2,3,3,2",
    )
    assert out.returncode == 0, out.stderr
    assert "5/p3" in out.stdout and "local_shape" in out.stdout
    assert "non-uniform dimensions (global shape must be given): 1" in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--mesh", "x=2", "--spec", "x", "--shape", "3"],
            "--shape: dimension 0 of (3,) has size 3",
        ),
        (["--mesh", "x=2", "--spec", "z", "--shape", "4"], "--spec: axis 'z' of dimension 0"),
        (["--mesh", "x=2", "--spec", "x, x", "--shape", "4,4"], "--spec: axis 'x' is used by"),
        (["--mesh", "x=2,y", "--shape", "4"], "--mesh: expected name=size in 'x=2,y'"),
        (["--mesh", "x=2", "--shape", "4", "--owners", "0"], "--owners: expected one process"),
        (["--mesh", "x=2", "--spec", "('x'", "--shape", "4"], "--spec: "),
        (["--mesh", "x=2"], "--shape: required"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(cli, args, message):
    out = cli("layout", *args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_demo_layout_section_reads_each_row_on_the_hosts_holding_it(cli, tmp_path):
    out = cli("demo", "--json", "--out", tmp_path / "demo.html")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)["layout"]
    assert doc["batch"] == 32 and doc["steps"] == 734 // 32
    # data=4 x model=2 with interleaved owners: every row on exactly 2 of the 4 hosts.
    assert doc["hosts_per_row"] == [2, 2]
    assert sorted(h["rows"] for h in doc["hosts"]) == [16, 16, 16, 16]
