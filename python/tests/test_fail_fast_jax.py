"""shardkit.jax.fail_fast on real JAX processes (CPU, gloo, 127.0.0.1): whichever
process raises while the others wait in a collective, every process exits with
status 1 and the reason, every ``finally`` block runs, within 10 s, without an
abort (workers/fail_fast_jax_worker.py). Regression (issue 20): while the failed
process was still alive (in its own finally block, or process 0 hosting the
coordination service), the others stayed blocked in the collective and left
through os._exit after the grace period, skipping their ``finally`` blocks; the
eval helpers refused to run on one process without
jax.distributed.initialize."""

import subprocess
import sys

import pytest

pytest.importorskip("jax")

import jax_launch  # noqa: E402

ABORT_SIGNS = ("Check failure", "SIGABRT", "Aborted", "terminate called", "*** ")


def _launch(n, failing, hold):
    return jax_launch.run("fail_fast_jax_worker.py", n, failing, hold, merge=False)


@pytest.mark.parametrize("failing", [0, 1, 2])
def test_jax_fail_fast_any_process_every_process_exits_1_with_reason_and_finally(failing):
    # The failing process stays 3 s in its finally block (longer than fail_fast's
    # grace of 2 s) with its collective connections open.
    results = _launch(3, failing, 3.0)
    events = [
        float(line.split()[-1])
        for _, _, err, _ in results
        for line in err.splitlines()
        if line.startswith("TEST-EVENT")
    ]
    assert len(events) == 1, [r[2][-2000:] for r in results]
    reason = f"rank {failing} failed: ValueError: injected failure at step 2"
    for rank, (code, out, err, end) in enumerate(results):
        assert code == 1, (rank, code, err[-3000:])
        assert f"rank {rank} finally ran" in err, (rank, err[-3000:])
        assert not any(sign in err for sign in ABORT_SIGNS), (rank, err[-3000:])
        if rank == failing:
            assert "ValueError: injected failure at step 2" in err, err[-3000:]
        else:
            assert f"shardkit: rank {rank} stopping: {reason}" in err, (rank, err[-3000:])
            assert f"RemoteRankError: {reason}" in err, (rank, err[-3000:])
        assert end - events[0] < 10, (rank, end - events[0])


def test_jax_eval_helpers_run_on_one_process_without_distributed_initialize():
    code = """
import sys, numpy as np, jax
jax.config.update("jax_platforms", "cpu")
import shardkit
from shardkit.jax import agree_steps, check_plan, fail_fast, gather_unshard, global_masked_sum
plan = shardkit.EvalPlan(10, 1, 4)
check_plan(plan)
assert agree_steps(7, 4, plan) == 2
outs = np.concatenate([idx * 2 for _, idx, _ in plan.batches(0)])
assert gather_unshard(plan, outs).tolist() == [2 * i for i in range(10)]
assert global_masked_sum(np.arange(4.0), np.array([1, 1, 0, 1], bool)) == (4.0, 3)
try:
    with fail_fast():
        raise ValueError("solo failure")
except ValueError as e:
    assert str(e) == "solo failure"
print("ok")
"""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=jax_launch.env(),
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
