"""shardkit on a machine with a GPU, side by side with the peer where there is one.

1. JAX (with CUDA): shardkit.jax.make_array_from_process_local_data against
   jax.make_array_from_process_local_data on the GPU devices: the arrays must be
   equal (shape, dtype, sharding, values, devices); then the minimum time per call
   of each, measured in interleaved rounds, and the ratio.
2. torch (with CUDA): TokenLoader batches (equal steps and per-rank plans) copied
   to the GPU through pinned memory: tokens/s.

usage: PYTHONPATH=python python bench/gpu_check.py   (after a build of shardkit._core
for that Python; see docs/benchmarks.md for the command used on the lent H100)
"""

import platform
import time

import numpy as np


def best(fn, reps=30):
    import jax

    b = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        b = min(b, time.perf_counter() - t)
    return b


def jax_part():
    import jax
    import shardkit.jax as skj
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    print("jax", jax.__version__, jax.devices(), flush=True)
    mesh = Mesh(np.array(jax.devices()).reshape(-1), ("data",))
    cases = {
        "int32 [64,2048]": (
            NamedSharding(mesh, P("data")),
            np.arange(64 * 2048, dtype=np.int32).reshape(64, 2048),
        ),
        "float32 [4096,4096]": (
            NamedSharding(mesh, P("data", None)),
            np.random.default_rng(0).random((4096, 4096), dtype=np.float32),
        ),
        "int32 [256,4096] (a 1M-token batch)": (
            NamedSharding(mesh, P("data")),
            np.arange(256 * 4096, dtype=np.int32).reshape(256, 4096),
        ),
        "float32 [1024,4096]": (
            NamedSharding(mesh, P("data", None)),
            np.ones((1024, 4096), np.float32),
        ),
        "replicated bf16-like uint16 [256,1024]": (
            NamedSharding(mesh, P()),
            np.ones((256, 1024), np.uint16),
        ),
        "pytree prefix": (
            {"a": NamedSharding(mesh, P("data")), "b": NamedSharding(mesh, P())},
            {
                "a": np.arange(32, dtype=np.int32).reshape(8, 4),
                "b": (np.zeros((4, 2), np.float32), np.ones(3, np.int32)),
            },
        ),
    }
    for name, (s, x) in cases.items():
        ours = skj.make_array_from_process_local_data(s, x)
        theirs = jax.make_array_from_process_local_data(s, x)
        lo, lt = jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)
        assert len(lo) == len(lt)
        for a, b in zip(lo, lt):
            assert a.shape == b.shape and a.dtype == b.dtype and a.sharding == b.sharding, (
                name,
                a.sharding,
                b.sharding,
            )
            assert np.array_equal(np.asarray(a), np.asarray(b)), name
            assert [d.device for d in a.addressable_shards] == [
                d.device for d in b.addressable_shards
            ]
        t_ours = t_jax = float("inf")
        for _ in range(5):  # interleaved rounds: neither side gets the warmer GPU
            t_jax = min(t_jax, best(lambda: jax.make_array_from_process_local_data(s, x), 10))
            t_ours = min(t_ours, best(lambda: skj.make_array_from_process_local_data(s, x), 10))
        print(
            f"drop-in {name}: equal; shardkit {t_ours * 1e3:.3f} ms  jax {t_jax * 1e3:.3f} ms  jax/shardkit {t_jax / t_ours:.2f}x",
            flush=True,
        )


def torch_part():
    import torch

    import shardkit

    print("torch", torch.__version__, torch.cuda.get_device_name(0), flush=True)
    rng = np.random.default_rng(1)
    lengths = np.maximum(1, rng.lognormal(np.log(600), 1.0, 200_000)).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = (np.arange(offsets[-1]) % 50000).astype(np.int32)
    for equal in (True, False):
        loader = shardkit.TokenLoader(
            tokens, offsets, seq_len=4096, batch_size=8, rank=0, world_size=8, equal_steps=equal
        )
        n = 0
        t = time.perf_counter()
        for i, b in enumerate(loader):
            x = torch.from_numpy(b["input_ids"]).pin_memory().to("cuda", non_blocking=True)
            n += x.numel()
            if i == 200:
                break
        torch.cuda.synchronize()
        dt = time.perf_counter() - t
        print(
            f"TokenLoader equal_steps={equal} -> cuda: {n / dt / 1e6:.1f} M tokens/s ({i + 1} batches of 8x4096)",
            flush=True,
        )


if __name__ == "__main__":
    print(platform.python_version(), flush=True)
    for part in (jax_part, torch_part):
        try:
            part()
        except Exception as e:
            import traceback

            traceback.print_exc()
            print("PART FAILED", part.__name__, repr(e), flush=True)
