"""How the tests start torchrun workers and wait for them (the parent side;
torchrun_common.py is the workers' side): gloo on loopback, each launch in its
own process group with a hard timeout that kills the group, and one relaunch
when gloo failed to connect its processes before the first step
(connectFullMesh: a loopback connection refused or reset on a loaded
machine)."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "workers"


def free_port():
    """A loopback port no one listens on now (for torchrun's store)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script, nproc, *args, cwd=None, env=None):
    """torchrun --nproc-per-node=nproc of `script` (a path, or a file name in
    workers/) with `args`; env adds to PYTHONPATH=this folder's parent (the
    package) and this folder (the workers' helpers: torchrun_common.py,
    mixture_common.py) and OMP_NUM_THREADS=1."""
    torchrun = Path(sys.executable).with_name("torchrun")
    path = os.pathsep.join([str(HERE.parent), str(HERE)])
    full = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.Popen(
        [
            str(torchrun),
            "--standalone",
            f"--nproc-per-node={nproc}",
            f"--master-port={free_port()}",
            str(WORKERS / script),
            *map(str, args),
        ],
        cwd=cwd,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def wait(proc, timeout):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate(timeout=30)
        raise AssertionError("hang: killed after %d s\n%s" % (timeout, out.decode()[-3000:]))
    return out


def finish(proc, timeout, relaunch=None):
    """Waits for a launch (hard timeout) and asserts it succeeded; a launch
    that failed in connectFullMesh runs once more through `relaunch`."""
    out = wait(proc, timeout)
    if proc.returncode != 0 and relaunch is not None and b"connectFullMesh" in out:
        proc = relaunch()
        out = wait(proc, timeout)
    assert proc.returncode == 0, out.decode()[-3000:]
    return out


def kill_after_checkpoint(start, marker, timeout=300, retry=False):
    """Starts a run that trains on after writing `marker` and kills it (its
    whole group, SIGKILL) once the marker is there and the run still runs.
    With `retry`, a run that ended in connectFullMesh before the marker is
    started once more. Generous timeout: the wait ends as soon as the marker
    is there."""
    for attempt in range(2 if retry else 1):
        proc = start()
        deadline = time.time() + timeout
        while not marker.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        if marker.exists():
            break
        kill_group(proc)
        out = proc.communicate(timeout=30)[0].decode()
        if not retry or attempt == 1 or "connectFullMesh" not in out:
            raise AssertionError("no checkpoint\n" + out[-3000:])
    try:
        time.sleep(0.3)
        assert proc.poll() is None, "the first run must still be running when killed"
    finally:
        kill_group(proc)
        proc.wait(timeout=30)
