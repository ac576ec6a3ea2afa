"""Side by side: shardkit's layout arithmetic vs JAX's, same meshes, one run.

For each mesh size the script starts one child interpreter with that many host
CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=N) and measures in
that same process, on the same sharding:

  index map      JAX: NamedSharding.devices_indices_map(shape) with its cache
                 cleared before every call (the uncached cost);
                 shardkit: NamedSharding.indices(shape) (int64 array) and
                 .devices_indices_map(shape) (the same dict of slices as JAX's).
  replica ids    JAX: device_replica_id_map uncached; shardkit: replica_ids.
  per-process    JAX: the index computation of make_array_from_process_local_data
  mapping        for one process (global shape inference, local shape checks,
                 distinct slices, local block of every device), run as JAX's own
                 _array_from_process_local_data with the device transfer replaced
                 by recording the local slices; devices are given owners by a thin
                 view over the real sharding (one CPU process cannot own several
                 hosts), whose index map is JAX's own, computed uncached once per
                 call as JAX's addressable-map cache would do within one call.
                 shardkit: NamedSharding.local_to_global(local_shape, process).
Both mappings are checked equal before timing. Prints one line per measurement
with both sides' CPU and wall times (the process's CPU: every thread) and the ratios,
the sides interleaved round by round and the best round of each kept, per call
(bench/bench_util.py's rule); no speed is asserted anywhere.

usage: python bench/layout_vs_jax.py [--devices 8192,16384] [--drop-in 8,64,1024] [--per-host 4]
                                    [--rounds 5] [--timeout S]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import bench_util

ROUNDS = 5  # --rounds: interleaved rounds per measurement


def side_by_side(jax_fn, sk_fn, jax_calls, sk_calls, block=False):
    """bench_util's rule: the two sides interleaved round by round, a round being
    `*_calls` calls of the side (blocked until JAX's arrays are ready when `block`),
    the best round of each kept; returns each side's (CPU s, wall s) per call. CPU is
    the process's (every thread: JAX copies to devices on its own threads)."""
    wait = __import__("jax").block_until_ready if block else (lambda r: r)

    def calls(fn, count):
        def run():
            for _ in range(count):
                wait(fn())

        return run

    best = bench_util.interleaved(
        {"jax": calls(jax_fn, jax_calls), "shardkit": calls(sk_fn, sk_calls)}, ROUNDS
    )
    j, k = best["jax"], best["shardkit"]
    return (j.cpu / jax_calls, j.wall / jax_calls), (k.cpu / sk_calls, k.wall / sk_calls)


def row(what, jax_t, sk_t, **extra):
    """One result row: both sides' CPU and wall ms, the ratio per CPU s and per wall s."""
    return {
        "what": what,
        "jax_cpu_ms": jax_t[0] * 1e3,
        "jax_wall_ms": jax_t[1] * 1e3,
        "shardkit_cpu_ms": sk_t[0] * 1e3,
        "shardkit_wall_ms": sk_t[1] * 1e3,
        "ratio_cpu": jax_t[0] / max(sk_t[0], 1e-9),
        "ratio_wall": jax_t[1] / sk_t[1],
        **extra,
    }


def child_drop_in(num_devices):
    import jax
    import numpy as np
    from jax._src import array as jarray
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from shardkit import jax as skjax

    devices = jax.devices()
    assert len(devices) == num_devices
    fsdp = min(16, num_devices)
    mesh = Mesh(np.array(devices).reshape(num_devices // fsdp, fsdp), ("data", "fsdp"))
    s = NamedSharding(mesh, P(("data", "fsdp")))
    x = np.arange(num_devices * 4 * 64, dtype=np.float32).reshape(num_devices * 4, 64)
    tree = {"inputs": x, "labels": (x.astype(np.int32), x[:, :8].copy())}

    def shards(a):
        return [
            (str(sh.device), sh.index, np.asarray(sh.data).tobytes())
            for sh in sorted(a.addressable_shards, key=lambda sh: sh.device.id)
        ]

    def equal(a, b):
        la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
        assert len(la) == len(lb)
        for u, v in zip(la, lb):
            assert u.sharding == v.sharding and u.dtype == v.dtype and u.shape == v.shape
            assert shards(u) == shards(v)

    rows = []

    def report(what, theirs, ours, jax_fn, sk_fn):
        equal(jax_fn(), sk_fn())
        j, k = side_by_side(jax_fn, sk_fn, 20, 20, block=True)
        rows.append(row(what, j, k, devices=num_devices, note=f"{theirs} vs {ours}"))

    report(
        "make_array_from_process_local_data, one array",
        "jax",
        "shardkit",
        lambda: jax.make_array_from_process_local_data(s, x),
        lambda: skjax.make_array_from_process_local_data(s, x),
    )
    report(
        "make_array_from_process_local_data, pytree of 3",
        "jax",
        "shardkit",
        lambda: jax.make_array_from_process_local_data(s, tree),
        lambda: skjax.make_array_from_process_local_data(s, tree),
    )
    report(
        "per-process (multi-host) path, one array",
        "_array_from_process_local_data",
        "_assemble",
        lambda: jarray._array_from_process_local_data(x, s, None),
        lambda: skjax._assemble([s], [x], [None], 0)[0],
    )
    return {
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "jax": jax.__version__,
        "mesh": dict(mesh.shape),
        "shape": x.shape,
        "rows": rows,
    }


def child(num_devices, per_host):
    import jax
    import numpy as np
    from jax._src import array as jarray
    from jax._src import sharding as jsharding
    from jax._src import sharding_impls
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    import shardkit

    t0 = time.perf_counter()
    devices = jax.devices()
    assert len(devices) == num_devices
    setup = time.perf_counter() - t0
    fsdp, model = 16, 16
    data = num_devices // (fsdp * model)
    mesh = Mesh(np.array(devices).reshape(data, fsdp, model), ("data", "fsdp", "model"))
    spec = P(("data", "fsdp"), "model")
    js = NamedSharding(mesh, spec)
    shape = (data * fsdp * 4, model * 64)
    owners = [k // per_host for k in range(num_devices)]  # hosts of per_host chips
    sk = shardkit.NamedSharding(shardkit.Mesh(dict(mesh.shape), owners=owners), spec)
    processes = num_devices // per_host
    rows = []

    def report(what, jax_fn, sk_fn, jax_calls, sk_calls, note=""):
        j, k = side_by_side(jax_fn, sk_fn, jax_calls, sk_calls)
        rows.append(row(what, j, k, devices=num_devices, processes=processes, note=note))

    # ---- index map ---------------------------------------------------------------
    def jax_map():
        jsharding.common_devices_indices_map.cache_clear()
        jsharding._common_shard_shape.cache_clear()
        return js.devices_indices_map(shape)

    jmap = jax_map()
    flat = list(mesh.devices.flat)
    smap = sk.devices_indices_map(shape)
    arr = sk.indices(shape)
    for pos in (0, 1, num_devices // 2, num_devices - 1):
        want = [
            (s.start or 0, shape[i] if s.stop is None else s.stop)
            for i, s in enumerate(jmap[flat[pos]])
        ]
        assert [(s.start, s.stop) for s in smap[pos]] == want
        assert arr[pos].tolist() == [list(w) for w in want]
    report("devices_indices_map -> numpy array", jax_map, lambda: sk.indices(shape), 1, 10)
    report(
        "devices_indices_map -> dict of slices",
        jax_map,
        lambda: sk.devices_indices_map(shape),
        1,
        4,
        "same output type as JAX",
    )

    # ---- replica ids -------------------------------------------------------------
    def jax_replicas():
        jsharding.common_devices_indices_map.cache_clear()
        return sharding_impls.device_replica_id_map.__wrapped__(js, shape)

    jrep = jax_replicas()
    srep = sk.replica_ids(shape)
    assert all(srep[pos] == jrep[d] for pos, d in enumerate(flat))
    report("replica ids", jax_replicas, lambda: sk.replica_ids(shape), 1, 10)

    # ---- per-process mapping of make_array_from_process_local_data ---------------
    class Host:
        __slots__ = ("id", "process_index")

        def __init__(self, i, p):
            self.id, self.process_index = i, p

    hosts = [Host(i, owners[i]) for i in range(num_devices)]

    class ProcessView:
        """JAX's sharding with device d owned by owners[d], as process `me` sees it."""

        def __init__(self, me):
            self.me = me
            self.num_devices = num_devices
            self.is_fully_replicated = js.is_fully_replicated
            self.is_fully_addressable = False
            self.addressable_devices = {h for h in hosts if h.process_index == me}
            self._addressable = {}

        def shard_shape(self, s):
            return js.shard_shape(s)

        def devices_indices_map(self, s):
            jsharding.common_devices_indices_map.cache_clear()
            return dict(zip(hosts, js.devices_indices_map(s).values()))

        def addressable_devices_indices_map(self, s):
            if s not in self._addressable:  # JAX caches this one within a call
                m = self.devices_indices_map(s)
                self._addressable[s] = {h: m[h] for h in hosts if h.process_index == self.me}
            return self._addressable[s]

    class Recorder:
        def __init__(self, shape):
            self.shape = shape

        def __getitem__(self, index):
            return index

    def record(global_shape, sharding, cb):
        return [cb(i) for i in sharding.addressable_devices_indices_map(global_shape).values()]

    def jax_process(me, local_shape, global_shape=None):
        original = jarray.make_array_from_callback
        jarray.make_array_from_callback = record
        try:
            sharding_impls.get_process_index_and_count.cache_clear()
            return jarray._array_from_process_local_data(
                Recorder(local_shape), ProcessView(me), global_shape
            )
        finally:
            jarray.make_array_from_callback = original

    me = processes // 3
    local_shape = sk.local_shape(shape, me)
    got = sk.local_to_global(local_shape, me)
    assert got.global_shape == shape
    want = jax_process(me, local_shape)
    assert [[(s.start, s.stop) for s in idx] for idx in want] == [
        [tuple(x) for x in dev] for dev in got.local_slices.tolist()
    ]
    report(
        f"make_array_from_process_local_data mapping, 1 process of {per_host} devices",
        lambda: jax_process(me, local_shape),
        lambda: sk.local_to_global(local_shape, me),
        1,
        10,
        "global shape inferred",
    )
    report(
        "same, global_shape given (no inference)",
        lambda: jax_process(me, local_shape, shape),
        lambda: sk.local_to_global(local_shape, me, shape),
        1,
        40,
    )
    return {
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "jax": jax.__version__,
        "device_setup_s": setup,
        "shape": shape,
        "mesh": dict(mesh.shape),
        "spec": str(spec),
        "rows": rows,
    }


def run_child(num_devices, child_args, timeout):
    """This script with `child_args` in a fresh process whose JAX has `num_devices`
    CPU devices: the JSON document the child prints last, or None when it gives
    no result within `timeout` seconds. A child that fails ends this run with
    its status (its stderr's tail printed)."""
    env = dict(
        os.environ,
        XLA_FLAGS=f"--xla_force_host_platform_device_count={num_devices}",
        JAX_PLATFORMS="cpu",
    )
    try:
        out = subprocess.run(
            [sys.executable, __file__, *child_args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0:
        print(out.stderr[-3000:], file=sys.stderr)
        sys.exit(out.returncode)
    return json.loads(out.stdout.strip().splitlines()[-1])


def print_rows(rows, width):
    print(
        f"{'measurement':<{width}} {'JAX CPU ms':>11} {'wall':>9} {'shardkit CPU ms':>16}"
        f" {'wall':>9} {'ratio CPU':>10} {'wall':>8}"
    )
    for r in rows:
        print(
            f"{r['what']:<{width}} {r['jax_cpu_ms']:>11.3f} {r['jax_wall_ms']:>9.3f}"
            f" {r['shardkit_cpu_ms']:>16.4f} {r['shardkit_wall_ms']:>9.4f}"
            f" {r['ratio_cpu']:>9.1f}x {r['ratio_wall']:>7.1f}x"
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", default="8192,16384")
    parser.add_argument("--per-host", type=int, default=4)
    parser.add_argument("--drop-in", default="8,64,1024")
    parser.add_argument("--child", type=int, default=0)
    parser.add_argument("--child-drop-in", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (best kept)")
    args = parser.parse_args()
    global ROUNDS
    ROUNDS = args.rounds
    if args.child_drop_in:
        print(json.dumps(child_drop_in(args.child_drop_in)), flush=True)
        os._exit(0)
    if args.child:
        print(json.dumps(child(args.child, args.per_host)), flush=True)
        # Tearing down 16384 host devices takes minutes; the results are out.
        os._exit(0)
    for n in map(int, filter(None, args.drop_in.split(","))):
        doc = run_child(n, ["--child-drop-in", str(n), "--rounds", str(args.rounds)], args.timeout)
        if doc is None:
            print(f"\n{n} devices (drop-in): no result within {args.timeout} s")
            continue
        print(
            f"\ndrop-in, {n} devices in one process, mesh {doc['mesh']}, array"
            f" {tuple(doc['shape'])} float32; jax {doc['jax']}, {doc['cpus']} cpus;"
            f" best of {args.rounds} interleaved rounds, per call, blocked until ready;"
            f" {bench_util.load_average()}"
        )
        print_rows(doc["rows"], 52)
    for n in map(int, filter(None, args.devices.split(","))):
        doc = run_child(
            n,
            ["--child", str(n), "--per-host", str(args.per_host), "--rounds", str(args.rounds)],
            args.timeout,
        )
        if doc is None:
            # XLA's CPU client sometimes stalls creating this many host devices on a
            # loaded machine; say so instead of hanging.
            print(f"\n{n} devices: no result within {args.timeout} s (JAX CPU client start-up)")
            continue
        print(
            f"\n{n} devices, mesh {doc['mesh']}, spec {doc['spec']}, shape {tuple(doc['shape'])},"
            f" {n // args.per_host} processes of {args.per_host} devices; jax {doc['jax']},"
            f" {doc['cpus']} cpus ({doc['device_setup_s']:.1f} s to create the CPU devices);"
            f" best of {args.rounds} interleaved rounds, per call; {bench_util.load_average()}"
        )
        print_rows(doc["rows"], 64)


if __name__ == "__main__":
    main()
