"""bench/gpu_cp_check.py (run on a GPU by hand) must not rot: its --quick mode
runs here on CPU, and a metadata error it must catch makes it fail."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args, env=None):
    pytest.importorskip("torch")
    full = dict(os.environ, PYTHONPATH=str(ROOT / "python"), OMP_NUM_THREADS="2", **(env or {}))
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "gpu_cp_check.py"),
            "--quick",
            "--device",
            "cpu",
            *args,
        ],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
    )


def test_gpu_cp_check_quick_passes_on_cpu():
    out = run()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 failures" in out.stdout
    for strategy in ("head_tail", "balanced"):
        for dtype in ("float32", "bfloat16"):
            assert any(
                line.split()[:2] == [dtype, f"{strategy}/sdpa"] for line in out.stdout.splitlines()
            ), out.stdout


def test_gpu_cp_check_fails_when_the_positions_are_wrong():
    # The check's oracle is the unsplit row: shifting the CP slices' positions
    # by one must show up as errors (or a broken document), not pass.
    out = run(env={"GPU_CP_CHECK_CORRUPT": "position_ids"})
    assert out.returncode != 0, out.stdout
