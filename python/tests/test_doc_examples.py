"""Every fenced code block of README.md and docs/*.md runs as written, or says
why it cannot: the blocks are read from the Markdown when the test runs, so the
pages cannot drift from what the code does.

How a block is taken (its info string, and an HTML comment on the last
non-blank line before it):

- ```python: run in a fresh interpreter; a first line
  `# [VAR=value ...] torchrun --nproc-per-node N file.py` runs it under torchrun
  (loopback store on a free port) with those variables.
- ```sh: run by `bash -e`.
- ```console: each `$ command` line is run and must exit 0; the other lines are
  its output: each piece between `...` elisions must appear in what it printed.
- ```text: not a program (a grammar, a listing of fields); never run.
- `<!-- fragment: what it needs -->`: not run (a sketch that needs the user's
  model, a launch on several hosts, minutes of build); the reason is required
  and test_fragments_say_what_they_need lists them all.
- `<!-- file: path -->`: the block is that file of the repository as it is
  (another test builds and runs the file).
- `<!-- tested: path::test_name -->`: that test reads the block from the page
  and runs it (with more than a plain run, e.g. a resume); not run twice.

Anything else fails: a new block must run, or say why not. Blocks run with a
hard timeout in a scratch folder holding the example files the pages name
(t.npy, o.npy, shards/, web/, code.npy, code.offsets.npy, math/, data/),
with the dev CLI first on PATH as `shardkit`, PYTHONPATH=python/ and no
XLA_FLAGS (an example that wants host devices for JAX sets them itself)."""

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torchrun_launch
from conftest import ROOT, cli_path

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TIMEOUT = 180
FENCE = re.compile(r"^```(\S*)\s*$")
MARK = re.compile(r"^<!--\s*(fragment|file|tested):\s*(.*?)\s*-->$")
TORCHRUN = re.compile(r"^#\s*((?:\w+=\S+\s+)*)torchrun\s+(.*?)\s*(\S+\.py)\s*$")


@dataclass
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    lang: str
    mark: str  # "", "fragment", "file" or "tested"
    reason: str
    code: str

    @property
    def id(self):
        return f"{self.page}:{self.line}"


def blocks_of(path):
    """The fenced blocks of one Markdown file, with the mark before each."""
    lines = path.read_text().splitlines()
    page = str(path.relative_to(ROOT))
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        assert end is not None, f"{page}:{start + 1}: a code block that never closes"
        before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(before)
        found.append(
            Block(
                page,
                start + 1,
                lang,
                mark.group(1) if mark else "",
                mark.group(2) if mark else "",
                "\n".join(lines[start + 1 : end]) + "\n",
            )
        )
        i = end + 1
    return found


BLOCKS = [b for page in PAGES for b in blocks_of(page)]
RUN = [b for b in BLOCKS if not b.mark and b.lang in ("python", "sh", "console")]


def write_source(docs, low, high, rng, vocab=1000):
    """Tokens (ids below `vocab`) and offsets of `docs` documents with lengths
    in [low, high)."""
    lengths = rng.integers(low, high, docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.integers(0, vocab, offsets[-1]).astype(np.uint16)
    return tokens, offsets


@pytest.fixture(scope="module")
def example_files(tmp_path_factory):
    """The files the pages' examples name: one tokenised corpus (t.npy, o.npy:
    tokens below 1000, the vocabulary of docs/loader.md's model), a directory
    of 8 parts (shards/) and three mixture sources of 5 files (web/ and math/
    of two parts each, code.npy with code.offsets.npy)."""
    root = tmp_path_factory.mktemp("example_files")
    rng = np.random.default_rng(0)
    tokens, offsets = write_source(2000, 20, 300, rng)
    np.save(root / "t.npy", tokens)
    np.save(root / "o.npy", offsets)
    for name, parts in (("shards", 8), ("web", 2), ("math", 2)):
        (root / name).mkdir()
        for p in range(parts):
            tokens, offsets = write_source(300, 20, 600, rng)
            np.save(root / name / f"part{p}.tokens.npy", tokens)
            np.save(root / name / f"part{p}.offsets.npy", offsets)
    tokens, offsets = write_source(400, 50, 1200, rng)
    np.save(root / "code.npy", tokens)
    np.save(root / "code.offsets.npy", offsets)
    return root


@pytest.fixture
def workdir(tmp_path, example_files):
    """A fresh folder per block with links to the example files and data/."""
    for entry in example_files.iterdir():
        (tmp_path / entry.name).symlink_to(entry)
    (tmp_path / "data").symlink_to(ROOT / "data")
    return tmp_path


def environment():
    cli = Path(cli_path()).resolve()
    assert cli.name == "shardkit", cli
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["PATH"] = os.pathsep.join([str(cli.parent), str(Path(sys.executable).parent), env["PATH"]])
    env["PYTHONPATH"] = str(ROOT / "python")
    env["OMP_NUM_THREADS"] = "1"
    return env


def run(args, cwd, env, input=None):
    """Runs one program with a hard timeout (its process group killed)."""
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(input=input, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        torchrun_launch.kill_group(proc)
        out, _ = proc.communicate(timeout=30)
        raise AssertionError(f"hang: killed after {TIMEOUT} s\n{out[-3000:]}")
    return proc.returncode, out


def run_python(block, cwd, env):
    first = block.code.split("\n", 1)[0]
    launch = TORCHRUN.match(first)
    if not launch:
        path = cwd / "example.py"
        path.write_text(block.code)
        rc, out = run([sys.executable, str(path)], cwd, env)
        assert rc == 0, f"{block.id} exited {rc}:\n{out[-4000:]}"
        return
    variables, args, name = launch.groups()
    path = cwd / name
    path.write_text(block.code)
    extra = dict(v.split("=", 1) for v in variables.split())
    nproc = re.search(r"--nproc[-_]per[-_]node[= ](\d+)", args)
    assert nproc, f"{block.id}: a torchrun line without --nproc-per-node"

    # launch() takes os.environ with PYTHONPATH=python/ and adds these.
    env = {"PATH": env["PATH"], **extra}

    def start():
        return torchrun_launch.launch(path, int(nproc.group(1)), cwd=cwd, env=env)

    torchrun_launch.finish(start(), TIMEOUT, start)


def run_console(block, cwd, env):
    commands = []  # (command, expected output lines)
    for line in block.code.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        else:
            assert commands, f"{block.id}: output before the first `$ ` command"
            commands[-1][1].append(line)
    assert commands, f"{block.id}: a console block without a `$ ` command"
    for command, expected in commands:
        rc, out = run(["bash", "-c", command], cwd, env)
        assert rc == 0, f"{block.id}: `{command}` exited {rc}:\n{out[-4000:]}"
        for line in expected:
            for piece in line.strip().split("..."):
                assert piece.strip() in out, (
                    f"{block.id}: `{command}` did not print {piece.strip()!r}:\n{out[-4000:]}"
                )


@pytest.mark.parametrize("block", RUN, ids=[b.id for b in RUN])
def test_example_runs_as_written(block, workdir):
    env = environment()
    if block.lang == "python":
        run_python(block, workdir, env)
    elif block.lang == "sh":
        rc, out = run(["bash", "-e", "-o", "pipefail", "-s"], workdir, env, input=block.code)
        assert rc == 0, f"{block.id} exited {rc}:\n{out[-4000:]}"
    else:
        run_console(block, workdir, env)


def test_every_block_runs_or_says_why_not():
    """No block is silently skipped: each one is run, a text listing, a file
    shown as it is, or a fragment with a reason."""
    unmarked = [
        f"{b.id} (```{b.lang})"
        for b in BLOCKS
        if not b.mark and b.lang not in ("python", "sh", "console", "text")
    ]
    assert not unmarked, "blocks neither run nor marked as fragments: " + ", ".join(unmarked)
    assert len(RUN) >= 10, [b.id for b in RUN]


def test_fragments_say_what_they_need():
    fragments = [b for b in BLOCKS if b.mark == "fragment"]
    for b in fragments:
        print(f"fragment {b.id} (```{b.lang}): {b.reason}")
        assert len(b.reason) >= 10, f"{b.id}: a fragment must say what it needs"


def test_blocks_tested_elsewhere_are_read_there():
    tested = [b for b in BLOCKS if b.mark == "tested"]
    for b in tested:
        path, name = b.reason.split("::")
        source = (ROOT / path).read_text()
        assert f"def {name}(" in source, f"{b.id}: no test {b.reason}"
        assert b.page.split("/")[-1] in source, f"{b.id}: {path} does not read {b.page}"


def test_shown_files_are_the_files():
    shown = [b for b in BLOCKS if b.mark == "file"]
    for b in shown:
        assert (ROOT / b.reason).read_text() == b.code, f"{b.id} does not show {b.reason} as it is"
