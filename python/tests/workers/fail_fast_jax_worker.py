"""One process of a JAX multi-process run on CPU in which one process raises
inside shardkit.jax.fail_fast while the others wait in a collective
(python/tests/test_fail_fast_jax.py).

usage: fail_fast_jax_worker.py PROCESS_ID NUM_PROCESSES PORT FAILING [HOLD]
FAILING: the process that raises at step 2 (-1: none); HOLD: seconds the failing
process then spends in its own finally block (saving a checkpoint, say) with its
collective connections open, while the others wait in the collective.
Every process prints "rank R finally ran" from its finally block.
"""

import sys
import time

import jax
import jax_worker


def main() -> None:
    pid, nproc, port, failing = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    hold = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    jax_worker.initialize(
        pid, nproc, port, gloo=True, heartbeat_timeout_seconds=10, shutdown_timeout_seconds=5
    )
    import numpy as np
    from shardkit.jax import fail_fast, global_masked_sum

    import shardkit

    rank = jax.process_index()
    try:
        with fail_fast():
            plan = shardkit.EvalPlan(101, jax.process_count(), 4)
            total = 0
            for step, idx, mask in plan.batches(rank):
                if rank == failing and step == 2:
                    print(f"TEST-EVENT {time.time():.3f}", file=sys.stderr, flush=True)
                    raise ValueError("injected failure at step 2")
                _, n = global_masked_sum(idx.astype(np.float64), mask)  # a collective
                total += n
            assert total == 101, total
            print(f"rank {rank} done", flush=True)
    finally:
        if rank == failing:
            time.sleep(hold)
        print(f"rank {rank} finally ran", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
