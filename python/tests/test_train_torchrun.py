"""Equal steps under torchrun --nproc_per_node 4 (gloo, loopback): an
all_reduce every step over two epochs of a lognormal corpus in pad,
continuous and drop modes with 0 and 2 DataLoader workers; SIGKILL mid-epoch
and resume on 3 processes and on 4 with another batch size; a rank with
another seed fails on every rank within seconds. The two epochs and the run
that is killed are one launch (the worker's "epochs,first"). Every launch has
a hard timeout. The worker is workers/train_torchrun_worker.py; each test takes the
`torch` fixture (conftest.py), which skips it where torch is not installed."""

import json
from pathlib import Path

import numpy as np
import pytest
import torchrun_launch
from tiling import lognormal_lengths, save_corpus, tiles
from torchrun_launch import finish, kill_after_checkpoint

import shardkit

HERE = Path(__file__).resolve().parent
SEQ_LEN = 256


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("train_torchrun")
    rng = np.random.default_rng(4)
    lengths = lognormal_lengths(rng, 90, 1.1, 700)
    tokens = (np.arange(lengths.sum()) % 1000).astype(np.int32)  # the docs loop's vocab
    save_corpus(root, "", lengths, tokens)
    return root, lengths


def launch(root, nproc, *args):
    return torchrun_launch.launch("train_torchrun_worker.py", nproc, root, *args)


@pytest.fixture(scope="module")
def first(corpus):
    """One launch on 4 processes: the two epochs of every mode (epochs-<rank>.json),
    then the pad run that checkpoints (checkpoint.json) and is SIGKILLed while
    it trains on."""
    pytest.importorskip("torch")
    root, _ = corpus
    marker = root / "checkpoint.json"
    kill_after_checkpoint(lambda: launch(root, 4, "epochs,first"), marker, 600, retry=True)
    return root


def test_two_epochs_all_modes_and_worker_counts_equal_steps_exactly_once(corpus, first, torch):
    root, lengths = corpus
    by_rank = [json.loads((root / f"epochs-{r}.json").read_text()) for r in range(4)]
    for key in by_rank[0]:
        mode = key.split("/")[0]
        state = None
        for epoch in range(2):
            runs = [by_rank[r][key][epoch] for r in range(4)]
            assert len({len(run) for run in runs}) == 1, f"{key}: unequal steps {epoch}"
            # The same rows as the plan, rank by rank, step by step.
            plan = shardkit.TrainPlan(
                lengths, SEQ_LEN, 2, 4, mode=mode, seed=7, epoch=epoch, state=state
            )
            assert len(runs[0]) == plan.num_steps, key
            for r in range(4):
                for s, step in enumerate(runs[r]):
                    want = [tuple(p) for row in plan.step(r, s) for p in row]
                    assert [tuple(p) for p in step["pieces"]] == want, (key, epoch, r, s)
            state = plan.state_dict()
            delivered = [tuple(p) for run in runs for step in run for p in step["pieces"]]
            if mode == "pad":
                tiles(lengths, delivered)
            elif mode == "drop":
                covered = sum(p[2] for p in delivered)
                assert covered + plan.summary.dropped_tokens == int(lengths.sum())
    # continuous: the rows matched the plan above; the plan holds every piece once
    plan = shardkit.TrainPlan(lengths, SEQ_LEN, 2, 4, mode="continuous", seed=7)
    assert plan.audit().exactly_once


def test_sigkill_mid_epoch_then_resume_on_3_processes_and_on_4_with_another_batch(
    corpus, first, torch
):
    root, lengths = corpus
    checkpoint = json.loads((root / "checkpoint.json").read_text())  # killed in `first`
    assert checkpoint["state"]["kind"] == "train_plan"
    for nproc, batch in [(3, 2), (4, 3)]:
        for f in root.glob("resumed-*.json"):
            f.unlink()
        finish(
            launch(root, nproc, "resume", batch), 400, lambda: launch(root, nproc, "resume", batch)
        )
        delivered = [tuple(p) for p in checkpoint["delivered"]]
        for r in range(nproc):
            delivered += [tuple(p) for p in json.loads((root / f"resumed-{r}.json").read_text())]
        tiles(lengths, delivered)


def test_a_rank_with_another_seed_fails_on_every_rank_within_seconds(corpus, torch):
    root, _ = corpus
    finish(launch(root, 4, "mismatch"), 400, lambda: launch(root, 4, "mismatch"))
    for r in range(4):
        elapsed, message = (root / f"mismatch-{r}.txt").read_text().split(" ", 1)
        assert message.startswith("PlanMismatchError: plan fingerprint mismatch"), message
        # From the first iteration to the error: seconds (a loaded machine
        # gets a wide margin), not the collective timeout's 30 minutes.
        assert float(elapsed) < 120, elapsed


def test_docs_ddp_loop_runs_under_torchrun(corpus, torch, tmp_path):
    """The DDP loop of docs/loader.md, copied out of the page and run on 2 gloo
    processes: two epochs, then again from its checkpoint."""
    root, _ = corpus
    text = (HERE.parents[1] / "docs" / "loader.md").read_text()
    block = text.split("<!-- ddp-loop -->", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "ddp_loop.py"
    script.write_text(block)
    env = dict(TOKENS=str(root / "tokens.npy"), OFFSETS=str(root / "offsets.npy"))

    def launch_docs():
        return torchrun_launch.launch(script, 2, cwd=tmp_path, env=env)

    for _ in range(2):  # fresh, then resumed from checkpoint.pt
        finish(launch_docs(), 600, launch_docs)
        assert (tmp_path / "checkpoint.pt").exists()
