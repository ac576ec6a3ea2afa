"""Compares shardkit's NamedSharding arithmetic with JAX's on many random meshes.

Run by test_layout.py in a fresh interpreter with
XLA_FLAGS=--xla_force_host_platform_device_count=8; prints one JSON line of counts
and exits non-zero at the first difference.
"""

import json
import random
import sys

import jax
import jax_worker
import numpy as np
from jax._src.sharding_impls import device_replica_id_map
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import shardkit

NAMES = ["x", "y", "z"]


def random_case(rng, devices):
    while True:
        sizes = [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]
        if int(np.prod(sizes)) <= len(devices):
            break
    names = NAMES[: len(sizes)]
    chosen = rng.sample(devices, int(np.prod(sizes)))  # a subset, permuted
    mesh = Mesh(np.array(chosen, dtype=object).reshape(sizes), tuple(names))
    ndim = rng.randint(1, 3)
    spec = jax_worker.random_spec(rng, names, rng.randint(0, ndim), 0.3, 0.55)
    parts = jax_worker.partition_counts(mesh.shape, spec, ndim)
    shape = tuple(p * rng.choice([0, 1, 1, 2, 3]) for p in parts)
    return mesh, P(*spec), shape, parts


def normalise(index, shape):
    return [(s.start or 0, shape[i] if s.stop is None else s.stop) for i, s in enumerate(index)]


def main(trials, seed):
    rng = random.Random(seed)
    devices = jax.devices()
    assert len(devices) == 8, devices
    counts = {
        "cases": 0,
        "devices": 0,
        "indivisible": 0,
        "zero_size": 0,
        "tuples": 0,
        "replicated_axes": 0,
    }
    for _ in range(trials):
        mesh, spec, shape, parts = random_case(rng, devices)
        js = NamedSharding(mesh, spec)
        sk = shardkit.NamedSharding.from_jax(js)
        where = f"mesh={dict(mesh.shape)} spec={spec} shape={shape}"
        assert sk.shard_shape(shape) == js.shard_shape(shape), where
        jmap = js.devices_indices_map(shape)
        smap = sk.devices_indices_map(shape)
        bulk = sk.indices(shape)
        jrep = device_replica_id_map(js, shape)
        srep = sk.replica_ids(shape)
        for pos, device in enumerate(mesh.devices.flat):
            want = normalise(jmap[device], shape)
            assert normalise(smap[pos], shape) == want, (where, pos)
            assert bulk[pos].tolist() == [list(w) for w in want], (where, pos)
            assert srep[pos] == jrep[device], (where, pos, srep.tolist())
        counts["cases"] += 1
        counts["devices"] += mesh.size
        counts["zero_size"] += 0 in shape
        counts["tuples"] += any(isinstance(e, tuple) for e in spec)
        counts["replicated_axes"] += int(max(srep) > 0)
        # The same mesh and spec on a shape one partition count does not divide.
        split = [i for i, p in enumerate(parts) if p > 1]
        if split:
            bad = list(shape)
            bad[split[0]] = parts[split[0]] * 2 + 1
            try:
                js.shard_shape(tuple(bad))
                raise AssertionError(f"JAX accepted {bad}")
            except ValueError:
                pass
            try:
                sk.shard_shape(tuple(bad))
                raise AssertionError(f"shardkit accepted {bad} for {where}")
            except ValueError as e:
                assert str(e).startswith(f"shape: dimension {split[0]} of "), e
            counts["indivisible"] += 1
    print(json.dumps(counts))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
