"""One process of a real multi-process JAX run (CPU devices) that checks
shardkit.jax.make_array_from_process_local_data against JAX's own.

usage: layout_jax_worker.py PROCESS_ID NUM_PROCESSES PORT
(XLA_FLAGS sets the local device count). Exits non-zero on any difference.
"""

import random
import sys

import jax
import jax_worker
import numpy as np
import shardkit.jax as skjax
from jax._src.sharding_impls import local_to_global_shape, num_addressable_indices
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import shardkit


def main(process_id, num_processes, port):
    jax_worker.initialize(process_id, num_processes, port, initialization_timeout=30)

    devices = jax.devices()
    by_process = jax_worker.devices_by_process()
    assert sorted(by_process) == list(range(num_processes)), by_process

    def mesh_from_owners(shape, names, owners):
        """A JAX mesh whose device at row-major position k belongs to process owners[k]."""
        pools = {p: list(ds) for p, ds in by_process.items()}
        grid = [pools[p].pop(0) for p in owners]
        return Mesh(np.array(grid, dtype=object).reshape(shape), names)

    def local_part(sharding, global_data, full_dims=()):
        """This process's local data, built from JAX's own index map: per dimension the
        sorted distinct slices its devices hold, concatenated (or the whole dimension)."""
        index_map = sharding.addressable_devices_indices_map(global_data.shape)
        picks = []
        for i, n in enumerate(global_data.shape):
            if i in full_dims:
                picks.append(np.arange(n))
                continue
            slices = sorted(
                {
                    (s[i].start or 0, n if s[i].stop is None else s[i].stop)
                    for s in index_map.values()
                }
            )
            picks.append(np.concatenate([np.arange(a, b) for a, b in slices]))
        return global_data[np.ix_(*picks)]

    def same_array(a, b, global_data):
        assert a.shape == b.shape == global_data.shape, (a.shape, b.shape)
        assert a.sharding == b.sharding
        shards_b = {s.device: s for s in b.addressable_shards}
        assert len(shards_b) == len(a.addressable_shards)
        for s in a.addressable_shards:
            t = shards_b[s.device]
            assert s.index == t.index, (s.index, t.index)
            assert s.replica_id == t.replica_id
            assert np.array_equal(np.asarray(s.data), np.asarray(t.data))
            assert np.array_equal(np.asarray(t.data), global_data[t.index])

    def check(name, sharding, global_shape, full_dims=(), pass_global=False, verbose=True):
        global_data = np.arange(int(np.prod(global_shape)), dtype=np.int32).reshape(global_shape)
        local = local_part(sharding, global_data, full_dims)
        sk = shardkit.NamedSharding.from_jax(sharding)
        me = jax.process_index()
        # The per-process arithmetic itself, against JAX's private helpers.
        for i in range(len(global_shape)):
            assert sk.local_shape(global_shape, me)[i] == num_addressable_indices(
                sharding, i, global_shape
            ), (name, i)
        want_inferred = local_to_global_shape(sharding, local.shape)
        assert sk.infer_global_shape(local.shape) == want_inferred, (
            name,
            sk.infer_global_shape(local.shape),
            want_inferred,
        )
        shape_arg = tuple(global_shape) if pass_global else None
        theirs = jax.make_array_from_process_local_data(sharding, local, shape_arg)
        ours = skjax.make_array_from_process_local_data(sharding, local, shape_arg)
        same_array(theirs, ours, global_data)
        # The loading plan names exactly the rows JAX's index map gives this process.
        if 0 not in full_dims:
            rows = skjax.host_rows(sharding, global_shape[0])
            got = np.concatenate([np.arange(a, b) for a, b in rows])
            index_map = sharding.addressable_devices_indices_map(global_shape)
            starts = sorted(
                {
                    (i[0].start or 0, global_shape[0] if i[0].stop is None else i[0].stop)
                    for i in index_map.values()
                }
            )
            want = np.concatenate([np.arange(a, b) for a, b in starts])
            assert np.array_equal(got, want), (name, rows, want)
        if verbose:
            print(f"process {me}: {name}: ok", flush=True)

    n = len(devices)
    me = jax.process_index()
    per = len(by_process[0])
    contiguous = [k // per for k in range(n)]
    interleaved = [k % num_processes for k in range(n)]

    # 1. The common case: batch split over every device, contiguous owners.
    m = mesh_from_owners((n,), ("data",), contiguous)
    check("batch over data", NamedSharding(m, P("data")), (2 * n, 3))
    # 2. Non-contiguous owners, 2-D mesh, tuple of axes, replicated trailing axis.
    m = mesh_from_owners((2, n // 2), ("x", "y"), interleaved)
    check("interleaved ('x','y')", NamedSharding(m, P(("x", "y"), None)), (2 * n, 5))
    check("interleaved x, y", NamedSharding(m, P("x", "y")), (4, n))
    check(
        "interleaved y only (x replicates)",
        NamedSharding(m, P(None, "y")),
        (3, n),
        pass_global=True,
    )
    check(
        "full dimension given",
        NamedSharding(m, P("y", None)),
        (n, 4),
        full_dims=(0,),
        pass_global=True,
    )
    # 3. A non-uniform dimension: columns held by overlapping, unequal sets.
    if num_processes == 2:
        owners = [0, 0, 1, 1, 1, 0, 0, 1]
    else:
        owners = [0, 0, 1, 1, 2, 3, 3, 2]
    m = mesh_from_owners((2, 4), ("x", "y"), owners)
    s = NamedSharding(m, P("x", "y"))
    sk = shardkit.NamedSharding.from_jax(s)
    global_shape = (4, 8)
    assert None in local_to_global_shape(s, sk.local_shape(global_shape, jax.process_index()))
    check("non-uniform, explicit global shape", s, global_shape, pass_global=True)
    check("non-uniform, full columns", s, global_shape, full_dims=(1,), pass_global=True)
    # Inference in the non-uniform dimension fails on both sides.
    local = np.zeros(sk.local_shape(global_shape, jax.process_index()), np.int32)
    for fn in (jax.make_array_from_process_local_data, skjax.make_array_from_process_local_data):
        try:
            fn(s, local)
            raise AssertionError(f"{fn.__module__} inferred a non-uniform global shape")
        except ValueError as e:
            assert "non-uniform" in str(e), e
    # A local shape matching neither the global nor the addressable extent.
    bad = np.zeros((local.shape[0] + 1, local.shape[1]), np.int32)
    for fn in (jax.make_array_from_process_local_data, skjax.make_array_from_process_local_data):
        try:
            fn(s, bad, global_shape)
            raise AssertionError("accepted a bad local shape")
        except ValueError:
            pass
    # 4. Pytrees across processes: a sharding prefix over a dict holding a tuple, a
    # global_shape prefix (numpy integers allowed), and a list global_shape (an error).
    m = mesh_from_owners((2, n // 2), ("x", "y"), interleaved)
    s_rows, s_x = NamedSharding(m, P(("x", "y"))), NamedSharding(m, P("x"))
    ga = np.arange(2 * n * 3, dtype=np.float32).reshape(2 * n, 3)
    gb = np.arange(4 * 5, dtype=np.int32).reshape(4, 5)
    la, lb = local_part(s_rows, ga), local_part(s_x, gb)
    tree = {"a": la, "b": (lb, lb)}
    cases = (
        ({"a": s_rows, "b": s_x}, None),
        ({"a": s_rows, "b": s_x}, {"a": (np.int64(ga.shape[0]), 3), "b": None}),
        ({"a": s_rows, "b": (s_x, s_x)}, {"a": None, "b": gb.shape}),
        # JAX reads a tuple as one shape, so a tuple of shapes is an error on both sides.
        ({"a": s_rows, "b": s_x}, {"a": None, "b": (gb.shape, gb.shape)}),
        ({"a": s_rows, "b": s_x}, list(ga.shape)),  # a list is a pytree, not a shape
        ({"a": s_rows, "b": s_x}, {"a": ga.shape}),  # prefix too short
        ({"a": s_rows}, None),
    )
    outcomes = []
    for prefix, shapes in cases:
        try:
            theirs = jax.make_array_from_process_local_data(prefix, tree, shapes)
        except Exception as e:  # noqa: BLE001 - the oracle's error is the expectation
            try:
                skjax.make_array_from_process_local_data(prefix, tree, shapes)
            except Exception as f:  # noqa: BLE001
                assert isinstance(f, type(e)), (shapes, e, f)
                outcomes.append("error")
                continue
            raise AssertionError(f"JAX raised {e!r} for {shapes!r}, shardkit did not")
        ours = skjax.make_array_from_process_local_data(prefix, tree, shapes)
        same_array(theirs["a"], ours["a"], ga)
        for k in range(2):
            same_array(theirs["b"][k], ours["b"][k], gb)
        outcomes.append("equal")
    assert outcomes == ["equal"] * 3 + ["error"] * 4, outcomes
    print(f"process {me}: pytree prefixes: ok", flush=True)

    # 5. Random owner layouts (the same seed on every process, so the same meshes).

    rng = random.Random(1234)
    random_cases = 0
    for trial in range(40):
        owners = contiguous[:]
        rng.shuffle(owners)
        shape = rng.choice([(n,), (2, n // 2), (n // 2, 2), (2, 2, n // 4)])
        names = ("a", "b", "c")[: len(shape)]
        m = mesh_from_owners(shape, names, owners)
        spec = jax_worker.random_spec(rng, names, 2, 0.25, 0.6)
        s = NamedSharding(m, P(*spec))
        parts = jax_worker.partition_counts(m.shape, spec, 2)
        global_shape = (parts[0] * 2, parts[1] * 3)
        full = tuple(rng.sample([0, 1], rng.randint(0, 1))) if trial % 2 else ()
        check(
            f"random {trial}",
            s,
            global_shape,
            full_dims=full,
            pass_global=True if trial % 2 else None in local_to_global_shape(s, (1, 1)),
            verbose=False,
        )
        random_cases += 1
    print(f"process {jax.process_index()}: {random_cases} random layouts ok", flush=True)
    print(f"process {jax.process_index()}: all ok", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))
