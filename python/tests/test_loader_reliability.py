"""Regression tests of the loader, file and runtime findings of issue 13 (bad
files, read-only and big-endian arrays, Whale policies, packer states, counts
that overflow). Each test is named after what broke; see docs/reliability.md.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sealing import reseal

import shardkit
from shardkit import TokenLoader

PYTHONPATH = os.pathsep.join(
    [str(Path(shardkit.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
)


def small_data(docs=12, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 20, size=docs)
    offsets = np.zeros(docs + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(lengths)
    tokens = (np.arange(offsets[-1]) * 7 + 3).astype(np.int32) % 30000
    return tokens, offsets


def all_batches(loader):
    return [{k: (v.copy() if hasattr(v, "copy") else v) for k, v in b.items()} for b in loader]


def same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for key in ("input_ids", "labels", "position_ids", "documents", "starts"):
            np.testing.assert_array_equal(x[key], y[key])


# ---- arrays -------------------------------------------------------------------


def test_regression_read_only_token_arrays_are_accepted(tmp_path):
    # np.load(mmap_mode="r") and np.frombuffer give read-only arrays: the
    # binding asked for a writable one and failed with RuntimeError: std::bad_cast.
    tokens, offsets = small_data()
    np.save(tmp_path / "t.npy", tokens)
    expected = all_batches(TokenLoader(tokens, offsets, seq_len=16, batch_size=2, seed=1))
    mapped = np.load(tmp_path / "t.npy", mmap_mode="r")
    assert not mapped.flags.writeable
    same_batches(
        all_batches(TokenLoader(mapped, offsets, seq_len=16, batch_size=2, seed=1)), expected
    )
    frozen = np.frombuffer(tokens.tobytes(), dtype=np.int32)
    assert not frozen.flags.writeable
    same_batches(
        all_batches(TokenLoader(frozen, offsets, seq_len=16, batch_size=2, seed=1)), expected
    )
    u16 = np.frombuffer(tokens.astype(np.uint16).tobytes(), dtype=np.uint16)
    got = all_batches(TokenLoader(u16, offsets, seq_len=16, batch_size=2, seed=1))
    same_batches(got, expected)


def test_regression_big_endian_tokens_are_a_clear_value_error():
    tokens, offsets = small_data()
    for dtype in (">u2", ">i4", ">u4"):
        with pytest.raises(ValueError, match=rf"tokens: big-endian dtype {dtype} is not supported"):
            TokenLoader(tokens.astype(dtype), offsets, seq_len=16, batch_size=2)
    # Big-endian offsets are converted (they are copied anyway).
    loader = TokenLoader(tokens, offsets.astype(">i8"), seq_len=16, batch_size=2, shuffle=False)
    assert sorted({d for b in loader for d in b["documents"].tolist()}) == list(range(12))


def test_regression_offsets_changed_after_construction_are_not_read():
    # The caller's offsets array was used in place: off[5] = 250 after
    # construction made collation read past the token array.
    tokens, offsets = small_data()
    expected = all_batches(TokenLoader(tokens, offsets.copy(), seq_len=16, batch_size=2, seed=3))
    loader = TokenLoader(tokens, offsets, seq_len=16, batch_size=2, seed=3)
    offsets[5] = 250
    same_batches(all_batches(loader), expected)


# ---- files (CLI and Python) ----------------------------------------------------


def test_regression_fifo_as_tokens_or_in_dir_does_not_block(cli, tmp_path):
    tokens, offsets = small_data()
    np.save(tmp_path / "o.npy", offsets)
    fifo = tmp_path / "fifo.npy"
    os.mkfifo(fifo)
    r = cli("loader-stats", "--tokens", fifo, "--offsets", tmp_path / "o.npy", "--seq-len", 8,
            "--batch", 2)  # fmt: skip
    assert r.returncode == 2
    assert (
        r.stderr
        == f"shardkit loader-stats: --tokens: '{fifo}' is a FIFO (named pipe); expected a regular file\n"
    )
    d = tmp_path / "d"
    d.mkdir()
    os.mkfifo(d / "a.tokens.npy")
    np.save(d / "a.offsets.npy", offsets)
    r = cli("loader-stats", "--dir", d, "--seq-len", 8, "--batch", 2)
    assert r.returncode == 2 and "is a FIFO (named pipe)" in r.stderr and r.stderr.count("\n") == 1
    with pytest.raises(ValueError, match="tokens: .* is a FIFO"):
        TokenLoader(str(fifo), str(tmp_path / "o.npy"), seq_len=8, batch_size=2)


def test_regression_dev_null_tokens_is_not_cannot_read_success(cli, tmp_path):
    np.save(tmp_path / "o.npy", np.array([0], dtype=np.int64))
    r = cli("loader-stats", "--tokens", "/dev/null", "--offsets", tmp_path / "o.npy",
            "--seq-len", 8, "--batch", 2)  # fmt: skip
    assert r.returncode == 2
    assert r.stderr == (
        "shardkit loader-stats: --tokens: '/dev/null' is a character device; "
        "expected a regular file\n"
    )


def test_regression_number_files_that_hold_nothing_are_refused(cli, tmp_path):
    # /dev/zero read forever; an empty file, a directory, /dev/null and a
    # closed stdin read as zero numbers, so --weights was silently dropped.
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    shard = ("shard", "--items", 3, "--world", 2, "--split", "balanced")
    cases = [
        ("/dev/zero", "--weights: '/dev/zero' is a character device; expected a regular file"),
        ("/dev/null", "--weights: '/dev/null' is a character device; expected a regular file"),
        (tmp_path, f"--weights: '{tmp_path}' is a directory; expected a regular file"),
        (empty, f"--weights: {empty} holds no numbers (it is empty)"),
    ]
    for path, message in cases:
        r = cli(*shard, "--weights", path)
        assert r.returncode == 2, (path, r.stdout)
        assert r.stderr == f"shardkit shard: {message}\n", r.stderr
    r = subprocess.run(
        [r_bin(), *map(str, shard), "--weights", "-"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--weights: stdin is a character device" in r.stderr
    r = subprocess.run(
        [r_bin(), "pack", "--lengths", "-", "--capacity", "8"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.close(0),
    )
    assert r.returncode == 2 and r.stderr == (
        "shardkit pack: --lengths: cannot read stdin: Bad file descriptor (stdin is closed)\n"
    )
    # A pipe with nothing in it is empty, not zero lengths.
    r = cli("pack", "--lengths", "-", "--capacity", 8, input="")
    assert r.returncode == 2 and "--lengths: stdin holds no numbers (it is empty)" in r.stderr


def r_bin():
    path = os.environ.get("SHARDKIT_CLI") or shutil.which("shardkit")
    if not path:
        pytest.skip("no shardkit binary (set SHARDKIT_CLI)")
    return path


# ---- loader-stats counts ---------------------------------------------------------


def test_regression_max_batches_near_int64_max_does_not_skip_workers(cli, tmp_path):
    # max_batches * (worker + 1) overflowed: worker 1 was skipped, exit 0.
    tokens, offsets = small_data(docs=40)
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    common = ("loader-stats", "--tokens", tmp_path / "t.npy", "--offsets", tmp_path / "o.npy",
              "--seq-len", 8, "--batch", 2, "--workers", 2, "--quiet", "--json")  # fmt: skip
    full = json.loads(cli(*common).stdout)
    r = cli(*common, "--max-batches", 9223372036854775807)
    assert r.returncode == 0, r.stderr
    capped = json.loads(r.stdout)
    assert capped["real_tokens"] == full["real_tokens"] == int(offsets[-1])
    assert capped["batches"] == full["batches"]
    one = json.loads(cli(*common, "--max-batches", 1).stdout)
    assert one["batches"] == 2  # one per worker


# ---- Whale policies ---------------------------------------------------------------


def write_parts(directory, parts=5, docs=4):
    directory.mkdir()
    for p in range(parts):
        tokens, offsets = small_data(docs=docs, seed=p)
        np.save(directory / f"part-{p}.tokens.npy", tokens)
        np.save(directory / f"part-{p}.offsets.npy", offsets)


def documents_per_rank(directory, world, **kwargs):
    out = []
    for rank in range(world):
        loader = TokenLoader(str(directory), seq_len=64, batch_size=2, rank=rank,
                             world_size=world, shard_files=True, **kwargs)  # fmt: skip
        out.append(sorted(d for b in loader for d in b["documents"].tolist()))
    return out


def test_regression_shard_files_follows_the_whale_environment(tmp_path, monkeypatch):
    # TokenLoader(shard_files=True) ignored WHALE_UNBALANCED_IO_SLICING and
    # replicated every file to every rank.
    write_parts(tmp_path / "d")
    monkeypatch.delenv("WHALE_UNBALANCED_IO_SLICING", raising=False)
    monkeypatch.delenv("WHALE_DROP_LAST_FILES", raising=False)
    replicated = documents_per_rank(tmp_path / "d", 2)
    assert replicated[0] == replicated[1] == list(range(20))
    monkeypatch.setenv("WHALE_UNBALANCED_IO_SLICING", "1")
    uneven = documents_per_rank(tmp_path / "d", 2)
    assert sorted(uneven[0] + uneven[1]) == list(range(20))
    assert sorted(map(len, uneven)) == [8, 12]
    loader = TokenLoader(str(tmp_path / "d"), seq_len=64, batch_size=2, rank=0, world_size=2,
                         shard_files=True)  # fmt: skip
    assert loader.file_policy.remainder == "uneven"
    assert "WHALE_UNBALANCED_IO_SLICING" in loader.file_policy.reason
    monkeypatch.setenv("WHALE_UNBALANCED_IO_SLICING", "no")
    monkeypatch.setenv("WHALE_DROP_LAST_FILES", "on")
    dropped = documents_per_rank(tmp_path / "d", 2)
    assert list(map(len, dropped)) == [8, 8]
    # An explicit argument wins over the environment.
    explicit = documents_per_rank(tmp_path / "d", 2, whale_drop_last_files=False)
    assert explicit == replicated
    assert shardkit.whale_plan(5, 2).remainder == "drop"  # the same reader


def test_regression_bad_whale_value_lists_every_spelling(tmp_path, monkeypatch):
    write_parts(tmp_path / "d", parts=2)
    monkeypatch.setenv("WHALE_DROP_LAST_FILES", "perhaps")
    message = r"WHALE_DROP_LAST_FILES: 'perhaps' is not a boolean \(expected 1/0, true/false, yes/no or on/off"
    with pytest.raises(ValueError, match=message):
        TokenLoader(str(tmp_path / "d"), seq_len=8, batch_size=2, shard_files=True)
    with pytest.raises(ValueError, match=message):
        shardkit.whale_plan(3, 2)


def test_regression_loader_stats_shard_files_applies_and_prints_the_policy(cli, tmp_path):
    write_parts(tmp_path / "d")
    base = ("loader-stats", "--dir", tmp_path / "d", "--seq-len", 64, "--batch", 2, "--world", 2,
            "--shard-files", "--quiet")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("WHALE_")}
    run = lambda *a, extra={}: subprocess.run(  # noqa: E731
        [r_bin(), *map(str, base), *map(str, a)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, **extra},
    )
    default = json.loads(run("--json").stdout)
    assert default["file_policy"]["remainder"] == "replicate"
    assert [r["tokens"] for r in default["ranks"]] == [default["tokens"]] * 2
    via_env = json.loads(run("--json", extra={"WHALE_UNBALANCED_IO_SLICING": "true"}).stdout)
    assert via_env["file_policy"]["remainder"] == "uneven"
    assert sum(r["tokens"] for r in via_env["ranks"]) == via_env["tokens"]
    flag = json.loads(run("--json", "--whale-policy", "unbalanced").stdout)
    assert flag["ranks"] == [
        {**r, "seconds": f["seconds"]} for r, f in zip(via_env["ranks"], flag["ranks"])
    ]
    text = run("--whale-policy", "drop_last").stdout
    assert (
        "files: WHALE_DROP_LAST_FILES: even split, the surplus files are dropped (Whale, drop)"
        in text
    )
    bad = run("--whale-policy", "sometimes")
    assert bad.returncode == 2 and bad.stderr == (
        "shardkit loader-stats: --whale-policy: 'sometimes' is not a Whale policy "
        "(expected default, unbalanced or drop_last)\n"
    )
    bad_env = run(extra={"WHALE_DROP_LAST_FILES": "2"})
    assert (
        bad_env.returncode == 2 and "WHALE_DROP_LAST_FILES: '2' is not a boolean" in bad_env.stderr
    )


# ---- StreamingPacker state ---------------------------------------------------------


def test_regression_streaming_packer_state_over_capacity_negative_or_duplicate_is_refused():
    sp = shardkit.StreamingPacker(10, algorithm="bfd", buffer=4, oversize="split")
    for i, n in enumerate([6, 4, 3, 25]):
        sp.push(i, n)
    # Each edit sealed again (sealing.py), so that it reaches the checks.
    good = sp.state_dict()
    assert good["pending"] == [[[3, 0, 20, 0]], [[0, 0, 6, 0], [1, 0, 4, 0]]]  # a run, a pack
    shardkit.StreamingPacker(10, algorithm="bfd", buffer=4, oversize="split", state=good)

    def refused(edit, match):
        state = json.loads(json.dumps(good))
        edit(state)
        with pytest.raises(ValueError, match=match):
            shardkit.StreamingPacker(
                10, algorithm="bfd", buffer=4, oversize="split", state=reseal(state)
            )

    def over(s):  # 19 tokens in a pack of 10, the totals kept consistent
        s["pending"][1].append([99, 0, 9, 0])
        s["tokens_closed"] += 9

    refused(over, r"pending\[1\]: holds 19 tokens, more than capacity 10")

    def negative(s):
        s["pending"][1][0][2] = -3

    refused(negative, r"pending\[1\]\[0\]: start 0, length -3 .* must not be negative")

    def duplicate(s):
        s["pending"].append(s["pending"][1])
        s["packs_closed"] += 1
        s["tokens_closed"] += 10

    refused(duplicate, r"state: item 0 is listed twice")

    def buffered_and_pending(s):
        s["pending"][1] = [[2, 0, 3, 0]]
        s["tokens_closed"] -= 7

    refused(buffered_and_pending, r"state: item 2 is listed twice")

    def wrap(s):
        s["pending"][1] = [[7, 2**63 - 2, 5, 0]]

    refused(wrap, r"start 9223372036854775806 \+ length 5 overflows")

    def broken_run(s):  # a run must be whole packs
        s["pending"][0] = [[3, 0, 25, 0]]
        s["tokens_closed"] += 5

    refused(broken_run, r"pending\[0\]: holds 25 tokens, more than capacity 10")


# ---- runtime: allocation, fork, interpreter exit -------------------------------------


def test_regression_huge_batch_is_an_error_naming_both_not_an_abort(cli, tmp_path):
    # --seq-len 32 --batch 100000000: std::bad_alloc on a background thread
    # aborted the CLI (exit 134) and killed the Python interpreter.
    tokens, offsets = small_data()
    message = "batch_size x seq_len = 100000000 x 32 = 3200000000 tokens per batch is more than"
    with pytest.raises(ValueError, match=f"batch_size: {message}"):
        TokenLoader(tokens, offsets, seq_len=32, batch_size=100_000_000)
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    r = cli("loader-stats", "--tokens", tmp_path / "t.npy", "--offsets", tmp_path / "o.npy",
            "--seq-len", 32, "--batch", 100000000)  # fmt: skip
    assert r.returncode == 2
    assert (
        r.stderr.startswith(f"shardkit loader-stats: --batch: {message}")
        and r.stderr.count("\n") == 1
    )


FORK_SCRIPT = """
import os, sys
import numpy as np
from shardkit import TokenLoader

lengths = np.random.default_rng(0).integers(0, 60, size=400)
offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
tokens = (np.arange(offsets[-1]) % 30011).astype(np.int32)
kw = dict(seq_len=32, batch_size=2, rank=0, world_size=1, seed=5)
expected = [b["input_ids"].copy() for b in TokenLoader(tokens, offsets, num_threads=0, **kw)]
loader = TokenLoader(tokens, offsets, num_threads=2, prefetch=3, **kw)
it = iter(loader)
for _ in range(5):
    next(it)  # the threads run and prefetch
pid = os.fork()
if pid == 0:
    rest = [b["input_ids"].copy() for b in it]
    same = len(rest) == len(expected) - 5 and all((a == b).all() for a, b in zip(rest, expected[5:]))
    del it, loader  # must not join the parent's threads
    sys.exit(0 if same else 3)  # the interpreter's exit must not hang either
_, status = os.waitpid(pid, 0)
rest = [b["input_ids"].copy() for b in it]
assert len(rest) == len(expected) - 5
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_regression_fork_after_the_loader_started_neither_blocks_nor_hangs():
    # The child blocked forever once the prefetched batches were used, and
    # sys.exit(0) / del loader in the child hung (joining absent threads).
    r = subprocess.run([sys.executable, "-c", FORK_SCRIPT], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": PYTHONPATH})  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]


DAEMON_SCRIPT = """
import threading, time
import numpy as np
import shardkit

tokens = (np.arange(2_000_000) % 30000).astype(np.int32)
offsets = np.arange(0, 2_000_001, 1000, dtype=np.int64)
loader = shardkit.TokenLoader(tokens, offsets, seq_len=8192, batch_size=32, rank=0,
                              world_size=1, num_threads=1, prefetch=1)

def run():
    while True:
        for _ in loader:
            pass

threading.Thread(target=run, daemon=True).start()
time.sleep(0.2)
"""


def test_regression_daemon_thread_in_next_at_interpreter_exit_does_not_abort():
    # A daemon thread inside loader.next() when the interpreter exits was
    # ended by CPython with pthread_exit, whose unwinding through a noexcept
    # destructor aborted the process (6 of 16 runs; 16 of 16 here).
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    for run in range(16):
        r = subprocess.run([sys.executable, "-c", DAEMON_SCRIPT], capture_output=True, text=True,
                           timeout=120, env=env)  # fmt: skip
        assert r.returncode == 0, (run, r.returncode, r.stderr[-2000:])
