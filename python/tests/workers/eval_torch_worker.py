"""One process of a torchrun evaluation (python/tests/test_eval_engines.py).

Modes: ok (static, then dynamic), static (check the plan, a collective every step, gather + unshard
tensors and strings), dynamic (a filter, then agree_steps), mismatch (rank 2
builds a different plan), raise (rank 1 raises at step 2), kill (rank 1 is
SIGKILLed at step 2), nocheck_900 / nocheck_1001 (rank 2 plans 900 / 1001
items, the others 1000, and only gather_unshard communicates; nocheck_900,1001
runs both cases one after the other in the same processes).
"""

import argparse
import datetime
import os
import signal
import sys
import time

import shardkit.torch as engine
import torch
import torch.distributed as dist
from eval_common import check_static, dynamic_pass
from shardkit.torch import check_plan, fail_fast, gather_unshard, global_masked_sum

import shardkit


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--items", type=int, default=1001)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--mode", default="static")
    a = p.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    info = shardkit.discover()
    rank, world = info.rank, info.world_size
    assert info.source == "torch.distributed", info
    assert info.local_rank == int(os.environ["LOCAL_RANK"]), info

    if a.mode.startswith("nocheck_"):
        # No check_plan and no per-step collective: gather_unshard alone must
        # notice that rank 2 holds another plan (it used to hang on 900 vs
        # 1000 and return different results on 1001 vs 1000). Exit 3: every
        # case raised.
        raised = []
        for case in a.mode[len("nocheck_") :].split(","):
            items = int(case) if rank == 2 else 1000
            plan = shardkit.EvalPlan(items, world, a.batch)
            preds = torch.cat([torch.from_numpy(idx) for _, idx, _ in plan.batches(rank)])
            try:
                gather_unshard(plan, preds)
            except shardkit.PlanMismatchError as e:
                print(f"rank {rank} nocheck_{case} PlanMismatchError: {e}", flush=True)
                raised.append(True)
            else:
                print(f"rank {rank} nocheck_{case} gathered without error", flush=True)
                raised.append(False)
        # Every rank raised together; leave together, so that no rank's gloo
        # threads see rank 0 (which holds the store) go away mid-shutdown
        # (torch aborted one process with "terminate called without an active
        # exception" when rank 0 exited first).
        dist.barrier()
        dist.destroy_process_group()
        sys.exit(3 if all(raised) else 0)
    if a.mode == "kill":
        dist.barrier()
    try:
        run(a, rank, world)
    finally:
        print(f"rank {rank} finally ran", file=sys.stderr, flush=True)
    dist.destroy_process_group()


def run(a, rank, world) -> None:
    with fail_fast():
        batch = a.batch + (1 if a.mode == "mismatch" and rank == 2 else 0)
        plan = shardkit.EvalPlan(a.items, world, batch)
        if a.mode in ("ok", "dynamic"):
            dynamic_pass(engine, "torch", plan, rank, a.items, a.batch, torch.from_numpy)
        if a.mode != "dynamic":
            print(f"TEST-EVENT {time.time():.3f}", file=sys.stderr, flush=True)
            check_plan(plan)
            preds, names, seen = [], [], 0
            for step, idx, mask in plan.batches(rank):
                if a.mode == "raise" and rank == 1 and step == 2:
                    print(f"TEST-EVENT {time.time():.3f}", file=sys.stderr, flush=True)
                    raise ValueError("injected failure at step 2")
                if a.mode == "kill" and rank == 1 and step == 2:
                    time.sleep(1.0)  # a heartbeat or two first
                    print(f"TEST-EVENT {time.time():.3f}", file=sys.stderr, flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                pred = torch.from_numpy(idx) * 3 + 1  # the "model"
                _, n = global_masked_sum(pred.double(), mask)  # a collective every step
                seen += n
                preds.append(pred)
                names += [f"doc{i}" for i in idx.tolist()]
            assert gather_unshard(plan, names) == [f"doc{i}" for i in range(a.items)]
            check_static(engine, "torch", plan, rank, a.items, seen, torch.cat(preds))


if __name__ == "__main__":
    main()
