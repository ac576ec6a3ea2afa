"""One process of a JAX multi-process evaluation on CPU
(python/tests/test_eval_engines.py): eval_jax_worker.py PROCESS_ID NUM_PROCESSES PORT MODE.

Modes as in eval_torch_worker.py: ok, static, dynamic, mismatch, raise; raise0: process 0
(the coordinator) raises at step 2.
"""

import sys
import time

import jax
import jax_worker
from eval_common import check_static, dynamic_pass


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
    import shardkit.jax as engine
    from shardkit.jax import check_plan, fail_fast, global_masked_sum

    import shardkit

    ITEMS, BATCH = 1001, 8
    with fail_fast():
        batch = BATCH + (1 if mode == "mismatch" and rank == 1 else 0)
        plan = shardkit.EvalPlan(ITEMS, world, batch)
        if mode in ("ok", "dynamic"):
            dynamic_pass(engine, "jax", plan, rank, ITEMS, BATCH, np.asarray)
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
            check_static(engine, "jax", plan, rank, ITEMS, seen, np.concatenate(preds))


if __name__ == "__main__":
    main()
