"""shardkit.jax.TokenBatches over several epochs on real JAX processes (CPU
devices, 127.0.0.1), each process holding 1, 2 or 4 row blocks
(token_batches_jax_worker.py does the checks). Regression (issue 20): iteration
zipped one loader per block and stopped at the first exhausted one, so the
second epoch was empty and the third misaligned."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")

HERE = Path(__file__).resolve().parent
PYTHON_DIR = str(HERE.parent)


@pytest.mark.parametrize("processes", [2, 4])
def test_token_batches_three_epochs_every_token_once_on_real_processes(processes):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "token_batches_jax_worker.py"),
                str(i),
                str(processes),
                str(port),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(processes)
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=180)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outputs):
        assert p.returncode == 0 and out.splitlines()[-1:] == ["ok"], out[-3000:]
        for blocks in (1, 2, 4):
            assert f"{blocks} block(s): 3 epochs exact, resume" in out, out[-3000:]
