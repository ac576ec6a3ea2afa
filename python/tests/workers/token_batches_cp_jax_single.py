"""shardkit.jax.TokenBatches with context parallelism on 8 JAX CPU devices (one
process; run by test_context_parallel.py with
XLA_FLAGS=--xla_force_host_platform_device_count=8). For meshes dp x cp with the
sequence dimension on the cp axis, every device's shard must be its CP rank's
slice of its row block (TokenLoader(rank=k, cp_rank=c), the loader the CP tests
check against the unsplit rows), and the global rows gathered at cp_index must
be the unsplit rows of the loader without CP (same plan, cp_granularity=2C).
Prints one JSON line; exits non-zero at the first difference."""

import json
import sys

import jax
import numpy as np
import shardkit.jax as skjax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import shardkit

SEQ_LEN, BATCH = 64, 4


def main():
    rng = np.random.default_rng(4)
    lengths = np.maximum(1, rng.lognormal(np.log(20), 0.9, 200)).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = (np.arange(offsets[-1]) % 3001).astype(np.int32)
    devices = np.array(jax.devices()[:8])
    checked = {}
    for dp, cp, strategy in ((2, 4, "head_tail"), (1, 8, "balanced"), (4, 2, "balanced")):
        mesh = Mesh(devices.reshape(dp, cp), ("dp", "cp"))
        sharding = NamedSharding(mesh, P("dp", "cp"))
        common = dict(seed=2, num_threads=0)
        tb = skjax.TokenBatches(
            sharding,
            tokens,
            offsets,
            seq_len=SEQ_LEN,
            batch_size=BATCH,
            cp_size=cp,
            cp_strategy=strategy,
            **common,
        )
        assert tb.cp_ranks == list(range(cp)), tb.cp_ranks
        block = BATCH // dp

        def dp_rank(k, **cp_options):  # the plain loader of dp rank k
            return list(
                shardkit.TokenLoader(
                    tokens,
                    offsets,
                    seq_len=SEQ_LEN,
                    batch_size=block,
                    rank=k,
                    world_size=dp,
                    **cp_options,
                    **common,
                )
            )

        slices = {
            (k, c): dp_rank(k, cp_size=cp, cp_rank=c, cp_strategy=strategy)
            for k in range(dp)
            for c in range(cp)
        }
        unsplit = [dp_rank(k, cp_granularity=2 * cp) for k in range(dp)]
        steps = 0
        width = SEQ_LEN // cp
        for step, out in enumerate(tb):
            steps += 1
            batch = out["batch"]
            assert out["step"] == step
            for key in ("input_ids", "labels", "position_ids", "document_ids", "cp_index"):
                arr = batch[key]
                assert arr.shape == (BATCH, SEQ_LEN), (key, arr.shape)
                for shard in arr.addressable_shards:
                    rows, cols = shard.index
                    k, c = (rows.start or 0) // block, (cols.start or 0) // width
                    expect = slices[k, c][step][key]
                    np.testing.assert_array_equal(np.asarray(shard.data), expect, err_msg=key)
                    # The device is the one the mesh puts at (dp k, cp c).
                    assert shard.device == mesh.devices[k, c], (key, k, c)
            # The global rows at cp_index are the unsplit rows.
            index = np.asarray(batch["cp_index"])
            ids = np.asarray(batch["input_ids"])
            for k in range(dp):
                full = unsplit[k][step]
                for b in range(block):
                    row = k * block + b
                    real = index[row] >= 0
                    restored = np.full(SEQ_LEN, -1)
                    restored[index[row][real]] = ids[row][real]
                    real_full = full["document_ids"][b] >= 0
                    np.testing.assert_array_equal(
                        restored[real_full], full["input_ids"][b][real_full]
                    )
                    assert real.sum() == real_full.sum()
                    assert int(out["row_tokens"][row]) == int(real_full.sum())
            np.testing.assert_array_equal(
                out["documents"], np.concatenate([unsplit[k][step]["documents"] for k in range(dp)])
            )
        assert steps == len(unsplit[0]) > 0
        checked[f"{strategy}-dp{dp}xcp{cp}"] = steps
    # A sequence axis of another size than cp_size is refused, naming cp_size.
    mesh = Mesh(devices.reshape(2, 4), ("dp", "cp"))
    for spec, cp in ((P("dp", "cp"), 2), (P("dp"), 4)):
        try:
            skjax.TokenBatches(
                NamedSharding(mesh, spec),
                tokens,
                offsets,
                seq_len=SEQ_LEN,
                batch_size=4,
                cp_size=cp,
            )
        except ValueError as e:
            assert str(e).startswith("cp_size: "), e
        else:
            raise AssertionError(f"{spec} with cp_size={cp} was accepted")
    print(json.dumps(checked))


if __name__ == "__main__":
    sys.exit(main())
