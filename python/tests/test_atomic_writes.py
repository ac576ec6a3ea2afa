"""Every file shardkit writes is written whole or not at all (issue 20, item 3).

`loader-stats --save-state`, `demo --out` and `shardkit.save_state` go through
the core's WriteFileAtomically (shardkit/base/atomic_file.h): a temporary in the
same directory, fsync, rename. A kill (SIGKILL at random points), a full disk (a
size-limited tmpfs, where this machine lets us mount one) or a file-size limit
(RLIMIT_FSIZE) during the save leaves the previous checkpoint whole: it still
loads and resumes. Before, the file was truncated first and rewritten in place.
"""

import json
import os
import random
import resource
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, cli_path

import shardkit

# 256 ranks x 4 workers: a state of about 0.5 MB, saved in about 0.3 s.
WORLD, WORKERS = 256, 4


@pytest.fixture
def data(tmp_path):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 200, size=20000)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    np.save(tmp_path / "t.npy", (np.arange(offsets[-1]) % 30000).astype(np.int32))
    np.save(tmp_path / "o.npy", offsets)
    return tmp_path


def loader_args(data, world=WORLD):
    args = ["loader-stats", "--tokens", data / "t.npy", "--offsets", data / "o.npy"]
    args += ["--seq-len", 64, "--batch", 2, "--world", world, "--workers", WORKERS]
    return [str(a) for a in args + ["--per-rank", "--max-batches", 1, "--threads", 0, "--quiet"]]


def run(args, **kwargs):
    return subprocess.run(
        [cli_path(), *args], capture_output=True, text=True, timeout=120, **kwargs
    )


def loads(path, consumers=WORLD * WORKERS):
    """The checkpoint parses and holds one state per consumer."""
    text = Path(path).read_text()
    states = json.loads(text)
    assert isinstance(states, list) and len(states) == consumers, text[:200]
    return text


def test_regression_resume_and_save_state_to_the_same_file_continue_the_run(data):
    ck = data / "ck.json"
    first = run([*loader_args(data, 4), "--save-state", ck, "--json"])
    assert first.returncode == 0, first.stderr
    batches = [r["batches"] for r in json.loads(first.stdout)["ranks"]]
    for _ in range(3):
        step = run([*loader_args(data, 4), "--resume", ck, "--save-state", ck, "--json"])
        assert step.returncode == 0, step.stderr
        out = json.loads(step.stdout)
        assert out["resumed"] is True
        batches = [b + r["batches"] for b, r in zip(batches, out["ranks"])]
    assert batches == [4 * WORKERS] * 4  # one batch per consumer per run
    assert not [p for p in os.listdir(data) if ".tmp." in p]


def test_regression_kill_during_save_state_leaves_the_previous_checkpoint(data):
    """SIGKILL at random moments of `--resume ck --save-state ck`, half of the
    trials at the first change of ck.json seen (in the write itself, where the
    old truncate-and-rewrite left an empty or partial file): after every kill
    ck.json is a whole state, and the last one resumes."""
    ck = data / "ck.json"
    assert run([*loader_args(data), "--save-state", ck]).returncode == 0
    args = [*loader_args(data), "--resume", str(ck), "--save-state", str(ck)]
    start = time.monotonic()
    assert run(args).returncode == 0
    full = time.monotonic() - start
    rng = random.Random(20)
    for trial in range(10):
        before = os.stat(ck)
        previous = loads(ck)
        proc = subprocess.Popen([cli_path(), *args], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + (rng.uniform(0, 1.2 * full) if trial % 2 else 60)
        while time.monotonic() < deadline and proc.poll() is None:
            now = os.stat(ck)
            if (now.st_ino, now.st_size, now.st_mtime_ns) != (
                before.st_ino,
                before.st_size,
                before.st_mtime_ns,
            ):
                break
        proc.kill()
        proc.wait(timeout=60)
        text = loads(ck)  # the previous state, or the new one: whole either way
        assert text == previous or os.stat(ck).st_ino != before.st_ino
        for leftover in [p for p in os.listdir(data) if ".tmp." in p]:
            os.remove(data / leftover)  # a killed writer's temporary, never ck.json
    resumed = run(args)
    assert resumed.returncode == 0, resumed.stderr


@contextmanager
def small_disk(tmp_path, kind, limit):
    """A folder where writes past `limit` bytes fail: a tmpfs of that size
    (kind "tmpfs", skipped where mount is not allowed) or RLIMIT_FSIZE set in
    the writing process (kind "fsize"; yields its preexec_fn)."""
    folder = tmp_path / kind
    folder.mkdir()
    if kind == "fsize":
        yield folder, lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={limit}", "tmpfs", str(folder)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder, None
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.mark.parametrize("kind", ["tmpfs", "fsize"])
def test_regression_full_disk_or_file_size_limit_keeps_the_previous_checkpoint(data, kind):
    with small_disk(data, kind, 256 * 1024) as (folder, preexec):
        ck = folder / "ck.json"
        small = run([*loader_args(data, 16), "--save-state", ck])  # 16 x 4 consumers: 65 KB
        assert small.returncode == 0, small.stderr
        previous = loads(ck, 16 * WORKERS)
        # 0.5 MB does not fit: refused, naming the flag, the path and the reason.
        big = run([*loader_args(data), "--save-state", ck], preexec_fn=preexec)
        assert big.returncode == 2, (big.returncode, big.stderr)
        reason = "No space left on device" if kind == "tmpfs" else "File too large"
        assert big.stderr == f"shardkit loader-stats: --save-state: cannot write '{ck}': {reason}\n"
        assert loads(ck, 16 * WORKERS) == previous
        assert os.listdir(folder) == ["ck.json"]
        resumed = run([*loader_args(data, 16), "--resume", ck])
        assert resumed.returncode == 0, resumed.stderr
        # The demo's report likewise (48 KB past a limit of 16 KB).
        report = folder / "r.html"
        report.write_text("previous report\n")
        demo = run(
            ["demo", "--out", report],
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384)),
        )
        assert demo.returncode == 2, demo.stderr
        assert demo.stderr == f"shardkit demo: --out: cannot write '{report}': File too large\n"
        assert report.read_text() == "previous report\n"


def test_regression_kill_during_python_save_state_leaves_a_whole_state(tmp_path):
    """SIGKILL at random moments of a (forked) process saving 0.5 MB states in
    a loop, after its first save: the file is always one whole state."""
    path = tmp_path / "ck.json"
    shardkit.save_state(path, {"epoch": 0})
    n = 25000
    states = [{"epoch": e, "pieces": [[e, k, 7] for k in range(n)]} for e in (1, 2)]
    rng = random.Random(3)
    for _ in range(12):
        ready, tell = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover (the child is killed)
            try:
                os.close(ready)
                shardkit.save_state(path, states[0])
                os.write(tell, b"1")
                while True:
                    for state in states:
                        shardkit.save_state(path, state)
            finally:
                os._exit(1)
        os.close(tell)
        assert os.read(ready, 1) == b"1"
        os.close(ready)
        time.sleep(rng.uniform(0, 0.1))
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        state = json.loads(path.read_text())
        assert state["epoch"] in (1, 2) and len(state["pieces"]) == n
        assert state == states[state["epoch"] - 1]
        for leftover in [p for p in os.listdir(tmp_path) if ".tmp." in p]:
            os.remove(tmp_path / leftover)


@pytest.mark.parametrize("kind", ["tmpfs", "fsize"])
def test_regression_python_save_state_on_a_full_disk_keeps_the_previous_state(tmp_path, kind):
    with small_disk(tmp_path, kind, 64 * 1024) as (folder, preexec):
        path = folder / "ck.json"
        shardkit.save_state(path, {"epoch": 3})
        code = textwrap.dedent(
            f"""
            import resource, shardkit
            if {kind == "fsize"}:
                resource.setrlimit(resource.RLIMIT_FSIZE, ({64 * 1024}, {64 * 1024}))
            try:
                shardkit.save_state({str(path)!r}, {{"epoch": 4, "pad": "x" * 200000}})
            except ValueError as e:
                print(e)
            """
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT / "python")}
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
        )
        reason = "No space left on device" if kind == "tmpfs" else "File too large"
        assert out.stdout == f"path: cannot write '{path}': {reason}\n", out.stderr
        assert json.loads(path.read_text()) == {"epoch": 3}
        assert os.listdir(folder) == ["ck.json"]


def test_save_state_refuses_what_is_not_a_path_or_not_json(tmp_path):
    with pytest.raises(TypeError, match=r"^path: expected a str or os.PathLike, got int 3$"):
        shardkit.save_state(3, {})
    with pytest.raises(ValueError, match=r"^state: is not JSON-serialisable"):
        shardkit.save_state(tmp_path / "x.json", {"a": object()})
    with pytest.raises(ValueError, match=r"^path: cannot write '.*': Is a directory$"):
        shardkit.save_state(tmp_path, {})
    assert os.listdir(tmp_path) == []
