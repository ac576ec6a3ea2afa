"""How the tests start JAX processes on CPU devices and wait for them (the
parent side; torchrun_launch.py does the same for torchrun): n processes of a
script in workers/, each given PROCESS_ID NUM_PROCESSES PORT first (a free
loopback port for JAX's coordinator), JAX_PLATFORMS=cpu, PYTHONPATH=python/,
and a hard timeout after which every process still running is killed."""

import os
import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path

from torchrun_launch import free_port

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "workers"

# One process's end: exit status, stdout (with stderr when merged), stderr
# (empty when merged) and time.time() when its output was read to the end.
Result = namedtuple("Result", "returncode out err ended")


def env(devices=None):
    """os.environ for a JAX worker: CPU devices (`devices` of them per process
    when given), this package first on PYTHONPATH, no RANK or WORLD_SIZE (a
    worker's rank is its PROCESS_ID, not an outer launcher's)."""
    out = dict(os.environ, JAX_PLATFORMS="cpu")
    out.pop("RANK", None)
    out.pop("WORLD_SIZE", None)
    if devices is not None:
        out["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    out["PYTHONPATH"] = str(HERE.parent) + os.pathsep + out.get("PYTHONPATH", "")
    return out


def run(script, n, *args, devices=None, timeout=120, merge=True):
    """Runs workers/`script` PROCESS_ID n PORT *args as n processes and waits
    for all of them (`timeout` seconds each, then every one still running is
    killed and the timeout raised); returns their Results in process order."""
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKERS / script), str(i), str(n), str(port), *map(str, args)],
            env=env(devices),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append(Result(p.returncode, out, err or "", time.time()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return results
