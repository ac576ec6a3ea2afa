"""One process of a real multi-process JAX run (4 CPU devices each) for
shardkit.jax.TokenBatches over several epochs (issue 20): for meshes where every
process holds 1, 2 or 4 row blocks, three epochs of one TokenBatches deliver
every token exactly once per epoch, each step equal to the concatenation of the
single-host TokenLoaders of every block for that epoch (the oracle) and to a fresh
TokenBatches(epoch=e)'s, numbered 0..num_steps-1; a resume mid-epoch keeps the
step numbers and num_steps of the whole epoch.

usage: token_batches_jax_worker.py PROCESS_ID NUM_PROCESSES PORT; prints "ok".
"""

import sys

import jax
import jax_worker
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import shardkit
from shardkit import jax as skjax

SEQ, BATCH, SEED = 32, 16, 6


def corpus():
    rng = np.random.default_rng(8)
    lengths = rng.integers(1, 60, 150)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return np.arange(offsets[-1], dtype=np.int32), offsets  # token value = its place


def local(x):
    """This process's distinct shards of a global array, by index (replicas once)."""
    return {str(s.index): np.asarray(s.data) for s in x.addressable_shards}


def check_epochs(sharding, blocks_per_process, tokens, offsets):
    me = jax.process_index()
    tb = skjax.TokenBatches(sharding, tokens, offsets, seq_len=SEQ, batch_size=BATCH, seed=SEED)
    assert len(tb.blocks) == blocks_per_process, (tb.blocks, blocks_per_process)
    T = tb.num_blocks
    kept = {}
    for epoch in range(3):
        oracle = [
            list(
                shardkit.TokenLoader(
                    tokens,
                    offsets,
                    seq_len=SEQ,
                    batch_size=BATCH // T,
                    rank=k,
                    world_size=T,
                    seed=SEED,
                    epoch=epoch,
                )
            )
            for k in range(T)
        ]
        fresh = iter(
            skjax.TokenBatches(
                sharding, tokens, offsets, seq_len=SEQ, batch_size=BATCH, seed=SEED, epoch=epoch
            )
        )
        assert tb.num_steps == len(oracle[0]), (epoch, tb.num_steps, len(oracle[0]))
        seen, steps = [], 0
        for out in tb:  # plain re-iteration: the next epoch each time
            s = out["step"]
            assert s == steps, (epoch, s, steps)
            ids = np.asarray(
                multihost_utils.process_allgather(out["batch"]["input_ids"], tiled=True)
            )
            want = np.concatenate([oracle[k][s]["input_ids"] for k in range(T)])
            assert np.array_equal(ids, want), (epoch, s)
            real = np.concatenate([oracle[k][s]["document_ids"] for k in range(T)]) >= 0
            seen.append(ids[real])
            other = next(fresh)
            assert other["step"] == s
            for key in ("input_ids", "labels", "position_ids", "document_ids"):
                a, b = local(out["batch"][key]), local(other["batch"][key])
                assert a.keys() == b.keys() and all(np.array_equal(a[i], b[i]) for i in a), key
            if epoch == 1:
                kept[s] = local(out["batch"]["input_ids"])
            steps += 1
        assert next(fresh, None) is None
        assert steps == len(oracle[0]), (epoch, steps, len(oracle[0]))
        got = np.sort(np.concatenate(seen))
        assert np.array_equal(got, np.arange(len(tokens))), f"epoch {epoch}: not exactly once"

    assert tb.epoch == 2  # the pass that ran out last

    # A resume in epoch 1 after 3 steps: steps 3.. with the epoch's numbers and count.
    run = skjax.TokenBatches(
        sharding, tokens, offsets, seq_len=SEQ, batch_size=BATCH, seed=SEED, epoch=1
    )
    it = iter(run)
    for _ in range(3):
        next(it)
    state = run.state_dict()
    resumed = skjax.TokenBatches(
        sharding, tokens, offsets, seq_len=SEQ, batch_size=BATCH, seed=SEED
    )
    resumed.load_state_dict(state)
    assert resumed.num_steps == len(kept) and resumed.first_step == 3
    rest = [out["step"] for out in resumed]
    assert rest == list(range(3, len(kept))), rest
    again = skjax.TokenBatches(sharding, tokens, offsets, seq_len=SEQ, batch_size=BATCH, seed=SEED)
    again.load_state_dict(state)
    for out in again:
        a = local(out["batch"]["input_ids"])
        assert all(np.array_equal(a[i], kept[out["step"]][i]) for i in a), out["step"]
    print(f"process {me}: {blocks_per_process} block(s): 3 epochs exact, resume", flush=True)


def main(process_id, num_processes, port):
    jax_worker.initialize(process_id, num_processes, port, gloo=True, initialization_timeout=60)
    by_process = jax_worker.devices_by_process()
    per = len(by_process[0])
    devices = [d for p in sorted(by_process) for d in by_process[p]]  # process-major
    tokens, offsets = corpus()
    world = len(devices)
    for blocks in (2, 4, 1):
        data = num_processes * blocks  # data rows: `blocks` consecutive ones per process
        if per % blocks:
            continue
        mesh = Mesh(np.array(devices, dtype=object).reshape(data, world // data), ("data", "model"))
        check_epochs(NamedSharding(mesh, P("data")), blocks, tokens, offsets)
    print("ok", flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(*map(int, sys.argv[1:4]))
