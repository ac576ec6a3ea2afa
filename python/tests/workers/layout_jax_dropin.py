"""shardkit.jax.make_array_from_process_local_data vs JAX's own on one process with the
host CPU devices of XLA_FLAGS: pytree prefixes of shardings and of global shapes, numpy
integers in shapes, dtypes, scalars, jax.Array leaves, PartitionSpecs under jax.set_mesh,
and the errors. Every result is compared shard by shard; every error by type. Prints
one JSON line with the number of cases."""

import json
import sys

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import shardkit
from shardkit import jax as skjax

cases = {"equal": 0, "errors": 0}


def same(a, b, where):
    if isinstance(a, jax.Array):
        assert isinstance(b, jax.Array), where
        assert a.shape == b.shape and a.dtype == b.dtype, (where, a.shape, b.shape, a.dtype)
        assert a.sharding == b.sharding, (where, a.sharding, b.sharding)
        assert a.weak_type == b.weak_type, where
        sa = sorted(a.addressable_shards, key=lambda s: s.device.id)
        sb = sorted(b.addressable_shards, key=lambda s: s.device.id)
        assert [s.device for s in sa] == [s.device for s in sb], where
        for x, y in zip(sa, sb):
            assert x.index == y.index, (where, x.index, y.index)
            assert np.array_equal(np.asarray(x.data), np.asarray(y.data)), where
        return
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{k}]")


def check(where, sharding, data, *global_shape):
    try:
        want = jax.make_array_from_process_local_data(sharding, data, *global_shape)
    except Exception as theirs:  # noqa: BLE001 - the oracle's error is the expectation
        try:
            skjax.make_array_from_process_local_data(sharding, data, *global_shape)
        except Exception as ours:  # noqa: BLE001
            assert isinstance(ours, type(theirs)) or type(theirs) in type(ours).__mro__, (
                where,
                theirs,
                ours,
            )
            cases["errors"] += 1
            return
        raise AssertionError(f"{where}: JAX raised {theirs!r}, shardkit did not")
    got = skjax.make_array_from_process_local_data(sharding, data, *global_shape)
    same(want, got, where)
    cases["equal"] += 1


def main():
    devices = np.array(jax.devices())
    n = len(devices)
    mesh = Mesh(devices.reshape(2, n // 2), ("data", "model"))
    s = NamedSharding(mesh, P("data"))
    s2 = NamedSharding(mesh, P(("data", "model"), None))
    rep = NamedSharding(mesh, P())
    x = np.arange(4 * n * 2, dtype=np.float32).reshape(4 * n // 2, 4)
    y = np.arange(n * 3, dtype=np.int32).reshape(n, 3)

    # The layouts of the existing comparison, single array.
    for name, sh in (("data", s), ("data,model", s2), ("replicated", rep)):
        for data in (x, y):
            if data.shape[0] % (n if sh is s2 else 2):
                continue
            check(name, sh, data)
            check(name + " shape given", sh, data, data.shape)
    check("columns", NamedSharding(mesh, P(None, "model")), np.zeros((3, n), np.float32))
    # Pytree prefixes of shardings.
    check("prefix over a dict of a tuple", {"a": s, "b": s2}, {"a": x, "b": (y, y)})
    check("one sharding for a whole tree", s, {"a": x, "b": [x, x]})
    check("prefix too short", {"a": s}, {"a": x, "b": (x, x)})
    check("prefix of the wrong type", [s, s], {"a": x, "b": x})
    # Pytree prefixes of global shapes, numpy integers, lists.
    check("global_shape dict", s, {"a": x}, {"a": x.shape})
    check("global_shape dict with None", s, {"a": x, "b": y}, {"a": x.shape, "b": None})
    check("numpy ints in a shape", s, x, (np.int64(x.shape[0]), np.int32(x.shape[1])))
    check("a list global_shape", s, x, list(x.shape))
    check("a wrong global_shape", s, x, (x.shape[0] * 2, x.shape[1]))
    check("global_shape prefix too short", s, {"a": x, "b": y}, {"a": x.shape})
    # dtypes, scalars, device arrays, 0-d.
    check("float64 canonicalised", s, x.astype(np.float64))
    check("bool", s, x > 3)
    check("0-d", rep, np.float32(2.5))
    check("python scalar", rep, 3)
    check("jax.Array leaf", s, jax.numpy.asarray(x))
    check("empty rows", s, np.zeros((0, 4), np.float32))
    # A PartitionSpec under jax.set_mesh, as JAX resolves it.
    with jax.set_mesh(mesh):
        check("bare PartitionSpec", P("data"), x)
        check("bare PartitionSpec prefix", {"a": P("data"), "b": P()}, {"a": x, "b": y})
    check("bare PartitionSpec without a mesh", P("data"), x)

    # Specs shardkit cannot express are a clear error, not a silent wrong layout.
    explicit = Mesh(
        devices.reshape(2, n // 2),
        ("data", "model"),
        axis_types=(jax.sharding.AxisType.Explicit,) * 2,
    )
    unreduced = NamedSharding(explicit, P("data", unreduced={"model"}))
    for convert in (shardkit.NamedSharding.from_jax, skjax.to_shardkit):
        try:
            convert(unreduced)
            raise AssertionError("from_jax accepted an unreduced spec")
        except ValueError as e:
            assert str(e).startswith("spec: ") and "unreduced" in str(e), e
        cases["errors"] += 1
    print(json.dumps(cases))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
