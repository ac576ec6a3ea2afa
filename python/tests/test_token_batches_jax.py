"""shardkit.jax.TokenBatches over several epochs on real JAX processes (CPU
devices, 127.0.0.1), each process holding 1, 2 or 4 row blocks
(token_batches_jax_worker.py does the checks). Regression (issue 20): iteration
zipped one loader per block and stopped at the first exhausted one, so the
second epoch was empty and the third misaligned."""

import pytest

pytest.importorskip("jax")

import jax_launch  # noqa: E402


@pytest.mark.parametrize("processes", [2, 4])
def test_token_batches_three_epochs_every_token_once_on_real_processes(processes):
    results = jax_launch.run("token_batches_jax_worker.py", processes, devices=4, timeout=180)
    for p, out in ((r, r.out) for r in results):
        assert p.returncode == 0 and out.splitlines()[-1:] == ["ok"], out[-3000:]
        for blocks in (1, 2, 4):
            assert f"{blocks} block(s): 3 epochs exact, resume" in out, out[-3000:]
