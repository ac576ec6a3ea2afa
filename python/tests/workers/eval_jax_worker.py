"""One process of a JAX multi-process evaluation on CPU
(python/tests/test_eval_engines.py): eval_jax_worker.py PROCESS_ID NUM_PROCESSES PORT MODE.

Modes as in eval_torch_worker.py: ok, static, dynamic, mismatch, raise; raise0: process 0
(the coordinator) raises at step 2.
"""

import sys
import time

import jax
import jax_worker


def main() -> None:
    pid, nproc, port, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    jax_worker.initialize(
        pid, nproc, port, gloo=True, heartbeat_timeout_seconds=10, shutdown_timeout_seconds=5
    )

    import shardkit  # noqa: E402

    info = shardkit.discover()
    assert (info.rank, info.world_size, info.source) == (pid, nproc, "jax"), info
    rank, world = info.rank, info.world_size

    try:
        run(mode, rank, world)
    finally:
        print(f"rank {rank} finally ran", file=sys.stderr, flush=True)


def run(mode, rank, world) -> None:
    import numpy as np
    from shardkit.jax import agree_steps, check_plan, fail_fast, gather_unshard, global_masked_sum

    import shardkit

    ITEMS, BATCH = 1001, 8
    with fail_fast():
        batch = BATCH + (1 if mode == "mismatch" and rank == 1 else 0)
        plan = shardkit.EvalPlan(ITEMS, world, batch)
        if mode in ("ok", "dynamic"):
            mine = [int(i) for _, idx, m in plan.batches(rank) for i in idx[m]]
            kept = [i for i in mine if i % 3 != 0]
            steps = agree_steps(len(kept), BATCH, plan)
            total = 0.0
            for step in range(steps):
                chunk = kept[step * BATCH : (step + 1) * BATCH]
                values = np.zeros(BATCH)
                values[: len(chunk)] = chunk
                s, _ = global_masked_sum(values, np.arange(BATCH) < len(chunk))
                total += float(s)
            assert total == sum(i for i in range(ITEMS) if i % 3 != 0), total
            if rank == 0:
                print(f"OK jax dynamic world={world} steps={steps}", flush=True)
        if mode != "dynamic":
            print(f"TEST-EVENT {time.time():.3f}", file=sys.stderr, flush=True)
            check_plan(plan)
            preds, seen = [], 0
            for step, idx, mask in plan.batches(rank):
                failing = 0 if mode == "raise0" else 1
                if mode.startswith("raise") and rank == failing and step == 2:
                    print(f"TEST-EVENT {time.time():.3f}", file=sys.stderr, flush=True)
                    raise ValueError("injected failure at step 2")
                pred = np.asarray(jax.numpy.asarray(idx) * 3 + 1)  # the "model"
                _, n = global_masked_sum(pred.astype(np.float64), mask)  # a collective every step
                seen += n
                preds.append(pred)
            assert seen == ITEMS, seen
            ordered = gather_unshard(plan, np.concatenate(preds))
            assert ordered.tolist() == [3 * i + 1 for i in range(ITEMS)]
            if rank == 0:
                print(
                    f"OK jax static world={world} steps={plan.num_steps} padding={plan.total_padding}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
