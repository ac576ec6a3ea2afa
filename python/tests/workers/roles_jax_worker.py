"""One process of a real 2-process JAX run (4 CPU devices each) for data roles and
global batches: mesh data=4 x model=2 whose data rows alternate between the processes.

usage: roles_jax_worker.py PROCESS_ID NUM_PROCESSES PORT; prints "ok" and exits 0 when
every check holds.
"""

import sys

import jax
import jax.numpy as jnp
import jax_worker
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import shardkit
from shardkit import jax as skjax


def features(items):
    """What a host 'reads' for item i: a row that names the item."""
    items = np.asarray(items, np.int64)
    return {
        "x": np.stack([items * 10 + k for k in range(3)], 1).astype(np.float32),
        "id": items.astype(np.int32),
    }


def token_batches_equal_a_full_load(sharding, me):
    """The equal-steps TokenLoader as global arrays: each process runs the loaders of
    its row blocks only, and the global batches equal one host loading every block."""
    rng = np.random.default_rng(8)
    lengths = rng.integers(1, 50, 203)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.arange(offsets[-1], dtype=np.int32)
    tb = skjax.TokenBatches(sharding, tokens, offsets, seq_len=32, batch_size=8, seed=6)
    assert tb.blocks == [me, me + 2] and tb.num_blocks == 4, tb.blocks  # its rows only
    full = [
        shardkit.TokenLoader(
            tokens, offsets, seq_len=32, batch_size=2, rank=k, world_size=4, seed=6
        )
        for k in range(4)
    ]
    count = jax.jit(lambda t, m: jnp.sum(jnp.where(m, t, 0)))
    steps, total, seen = 0, 0, []
    for out, parts in zip(tb, zip(*full), strict=True):
        for key in ("input_ids", "labels", "position_ids", "document_ids"):
            got = np.asarray(multihost_utils.process_allgather(out["batch"][key], tiled=True))
            assert np.array_equal(got, np.concatenate([p[key] for p in parts])), key
        rows = np.asarray(multihost_utils.process_allgather(out["row_tokens"], tiled=True))
        assert np.array_equal(rows, np.concatenate([p["row_tokens"] for p in parts]))
        mask = np.asarray(multihost_utils.process_allgather(out["mask"], tiled=True))
        assert np.array_equal(mask, rows > 0)
        assert out["batch"]["input_ids"].sharding.spec == sharding.spec
        assert (
            out["documents"].tolist()
            == np.concatenate([parts[k]["documents"] for k in (me, me + 2)]).tolist()
        )  # this host's documents
        total += int(count(out["row_tokens"], out["mask"]))  # a global reduction under jit
        seen += np.concatenate([p["documents"] for p in parts]).tolist()
        steps += 1
    assert steps == tb.num_steps and total == int(lengths.sum()), (steps, total)
    assert sorted(set(seen)) == list(range(203))


def replicas_and_roles_in_evaluation(mesh, me):
    """Both processes hold every model column: with data axis "model" they are one
    replica group. The JAX ReplicaCheck passes on identical batches and fails on both
    processes when one diverges; an EvalPlan with these roles counts each item once in
    gather_unshard and global_masked_sum (naively: twice)."""
    from shardkit.layout import ReplicaCheck, ReplicaDivergenceError

    roles = shardkit.DataRoles(mesh, "model")
    assert roles.replica_group == [0, 1] and roles.reporter == 0
    check = ReplicaCheck(roles, "jax", every=2)
    plan = shardkit.EvalPlan(21, batch_size=4, roles=roles)
    assert plan.world_size == 1
    outputs, total, count, naive = [], 0.0, 0, 0
    for s in range(plan.num_steps):
        ids, mask = plan.batch(roles.dp_rank, s)
        assert check.check(s, ids) is (s % 2 == 0)
        outputs.append(ids * 10)
        step_sum, step_count = skjax.global_masked_sum(ids.astype(np.float64), mask, roles=roles)
        total, count = total + float(step_sum), count + step_count
        naive += skjax.global_masked_sum(ids.astype(np.float64), mask)[1]
    assert (total, count, naive) == (float(sum(range(21))), 21, 42), (total, count, naive)
    assert skjax.gather_unshard(plan, np.concatenate(outputs)).tolist() == [
        10 * i for i in range(21)
    ]
    try:
        check.check(8, [1, 2, 3] if me == 0 else [1, 2, 4])
        raise SystemExit("the divergence was not detected")
    except ReplicaDivergenceError as e:
        assert str(e).startswith("step 8: ranks [0, 1] (dp_rank 0)"), e


def main(process_id, num_processes, port):
    jax_worker.initialize(process_id, num_processes, port, initialization_timeout=30)
    me = jax.process_index()
    pools = jax_worker.devices_by_process()
    owners = [0, 0, 1, 1, 0, 0, 1, 1]  # data row r is held by process r % 2
    grid = [pools[p].pop(0) for p in owners]
    mesh = Mesh(np.array(grid, dtype=object).reshape(4, 2), ("data", "model"))
    sharding = NamedSharding(mesh, P("data"))

    # Roles of a JAX process: it holds data rows {me, me + 2}; no replica.
    roles = shardkit.DataRoles(mesh, "data")
    assert (roles.rank, roles.dp_size, roles.dp_rank) == (me, 2, me), roles
    assert roles.data_coordinates == [me, me + 2] and roles.replica_group == [me]
    model_roles = shardkit.DataRoles(mesh, "model")  # both hold every model column
    assert model_roles.dp_size == 1 and model_roles.replica_group == [0, 1]

    # Global batches from one global order: each host reads only its rows.
    batch = 8
    order = shardkit.ShardPlan(37, 1, shuffle=True, seed=3, remainder="pad").shard(0)
    read = []

    def load(items):
        read.append(np.asarray(items).tolist())
        return features(items)

    step_fn = jax.jit(
        jax.shard_map(
            lambda x, m: jax.lax.psum(jnp.sum(jnp.where(m[:, None], x, 0.0)), "data"),
            mesh=mesh,
            in_specs=(P("data"), P("data")),
            out_specs=P(),
        )
    )
    total, seen = 0.0, []
    plan = shardkit.LoadingPlan(shardkit.NamedSharding.from_jax(sharding), batch)
    rows = [r for a, b in plan.rows(me) for r in range(a, b)]
    steps = 0
    for out in skjax.global_batches(sharding, order, load, batch_size=batch):
        t = out["step"]
        stop = min((t + 1) * batch, len(order))
        want_items = order.numpy(t * batch, stop)
        want_items = np.concatenate([want_items, order.numpy(0, batch - len(want_items))])
        assert read[-1] == want_items[rows].tolist()  # only this host's rows
        assert len(read[-1]) == batch // 2
        full = features(want_items)  # what one host loading everything would hold
        x = multihost_utils.process_allgather(out["batch"]["x"], tiled=True)
        assert np.array_equal(np.asarray(x), full["x"]), t
        ids = multihost_utils.process_allgather(out["items"], tiled=True)
        assert np.array_equal(np.asarray(ids), want_items)
        mask = np.asarray(multihost_utils.process_allgather(out["mask"], tiled=True))
        real = np.arange(t * batch, (t + 1) * batch) < len(order) - order.padding
        assert np.array_equal(mask, real)
        assert out["batch"]["x"].sharding == sharding
        total += float(step_fn(out["batch"]["x"], out["mask"]))
        seen += want_items[mask].tolist()
        steps += 1
    assert steps == -(-len(order) // batch)
    single = sum(float(features([i])["x"].sum()) for i in seen)
    assert abs(total - single) < 1e-3 * max(1.0, abs(single)), (total, single)
    assert sorted(seen) == list(range(37)), "every item once"

    # An EvalPlan's steps as global arrays, and the outputs back in item order.
    ep = shardkit.EvalPlan(21, 2, 4)  # 2 ranks x 4 slots: global batch of 8 rows
    outputs, items, masks = [], [], []
    for out in skjax.global_batches(sharding, ep, features):
        outputs.append(jax.jit(lambda x: x * 2)(out["batch"]["x"]))
        items.append(out["items"])
        masks.append(out["mask"])
    got_ids, got_rows = skjax.to_items(outputs, items, masks)
    assert got_ids.tolist() == list(range(21))
    assert np.array_equal(got_rows, features(np.arange(21))["x"] * 2)
    token_batches_equal_a_full_load(sharding, me)
    replicas_and_roles_in_evaluation(mesh, me)
    print("ok", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))
