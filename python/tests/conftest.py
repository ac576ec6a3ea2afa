import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The suite's JAX tests are CPU tests (host devices forced with XLA_FLAGS, one
# or several processes on loopback). On a machine with a GPU, JAX would take the
# GPU in every test process instead (two processes on one GPU fail in NCCL with
# "Duplicate GPU detected"): pin the CPU platform for this process and the
# processes it starts, unless the caller chose a platform.
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def cli_path() -> str:
    """The shardkit binary under test: $SHARDKIT_CLI (make test sets it to the
    fresh build), else the one on PATH."""
    path = os.environ.get("SHARDKIT_CLI") or shutil.which("shardkit")
    if not path:
        pytest.skip("no shardkit binary (set SHARDKIT_CLI)")
    return path


@pytest.fixture
def cli():
    binary = cli_path()

    def run(*args, input=None):
        return subprocess.run(
            [binary, *map(str, args)], capture_output=True, text=True, input=input, timeout=120
        )

    return run


@pytest.fixture
def torch():
    """The torch module. A test that takes it is skipped where torch is not
    installed; the torch-free tests beside it in the module still run."""
    return pytest.importorskip("torch")
