"""A real `torchrun --nproc-per-node 4` (gloo, loopback, hard timeouts) over a
Megatron corpus written by megatron-core's own IndexedDatasetBuilder (documents
of one and of several sequences, empty ones): equal steps on every rank, the
rows of the TrainPlan built from the lengths Megatron reads, every document
once, and every delivered token equal to what megatron-core's IndexedDataset
reads; the same epoch through shardkit.grain (a Grain pipeline), then a Grain
checkpoint (Grain's CheckpointHandler) mid-epoch, SIGKILL, and a restore that
continues exactly as the uninterrupted run. The uninterrupted epochs and the run
that is killed are one launch (the worker's "whole,grain-first"): torch and gloo
start on 4 processes twice, not three times. The worker is
megatron_torchrun_worker.py."""

import json
import warnings

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("grain")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed"
    indexed_dataset = pytest.importorskip("megatron.core.datasets.indexed_dataset")

import torch  # noqa: E402
import torchrun_launch  # noqa: E402
from tiling import tiles  # noqa: E402
from torchrun_launch import finish, kill_after_checkpoint  # noqa: E402

import shardkit  # noqa: E402

CHECKPOINT_STEP = 3  # as in the worker
SEQ_LEN, BATCH, SEED, WORLD = 128, 2, 5, 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """400 documents through IndexedDatasetBuilder (uint16 ids), then every
    document as megatron-core's IndexedDataset reads it (the oracle)."""
    root = tmp_path_factory.mktemp("megatron_torchrun")
    prefix = str(root / "corpus")
    rng = np.random.default_rng(22)
    builder = indexed_dataset.IndexedDatasetBuilder(prefix + ".bin", dtype=np.uint16)
    for d in range(400):
        if d % 97 == 5:
            builder.end_document()  # an empty document
        elif d % 3 == 0:  # several sequences (sentences) in one document
            for _ in range(rng.integers(1, 4)):
                n = int(rng.integers(0, 60))
                builder.add_item(torch.from_numpy(rng.integers(0, 65535, n).astype(np.int64)))
            builder.end_document()
        else:
            n = max(1, int(rng.lognormal(np.log(70), 1.0)))
            tokens = rng.integers(0, 65535, n)
            builder.add_document(tokens, [n])
    builder.finalize(prefix + ".idx")
    ds = indexed_dataset.IndexedDataset(prefix)
    index = ds.document_indices
    docs = []
    for d in range(len(index) - 1):
        parts = [np.asarray(ds[i], dtype=np.int64) for i in range(index[d], index[d + 1])]
        docs.append(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
    return root, docs


def launch(root, mode):
    return torchrun_launch.launch("megatron_torchrun_worker.py", WORLD, root, mode)


def check_tokens(docs, steps):
    for step in steps:
        for d, start, length, tokens in step:
            assert tokens == docs[d][start : start + length].tolist(), (d, start)


@pytest.fixture(scope="module")
def whole(corpus):
    """One launch: the whole epoch (torch, then Grain; whole-<rank>.json),
    then the Grain run that checkpoints after CHECKPOINT_STEP steps
    (checkpoint.json) and is SIGKILLed while it trains on."""
    root, _ = corpus
    marker = root / "checkpoint.json"
    kill_after_checkpoint(lambda: launch(root, "whole,grain-first"), marker, 600, retry=True)
    return [json.loads((root / f"whole-{r}.json").read_text()) for r in range(WORLD)]


def test_equal_steps_every_document_once_tokens_as_megatron_reads_them(corpus, whole):
    root, docs = corpus
    plan = shardkit.TrainPlan([len(d) for d in docs], SEQ_LEN, BATCH, WORLD, seed=SEED)
    for kind in ("torch", "grain"):
        runs = [whole[r][kind] for r in range(WORLD)]
        assert [len(run) for run in runs] == [plan.num_steps] * WORLD, kind
        for r in range(WORLD):
            for s, step in enumerate(runs[r]):
                want = [tuple(p) for row in plan.step(r, s) for p in row]
                assert [tuple(p[:3]) for p in step] == want, (kind, r, s)
            check_tokens(docs, runs[r])
        tiles([len(d) for d in docs], [p for run in runs for step in run for p in step])


def test_grain_checkpoint_mid_epoch_sigkill_then_restore_continues_exactly(corpus, whole):
    root, docs = corpus
    before = json.loads((root / "checkpoint.json").read_text())["delivered"]  # killed in `whole`
    finish(launch(root, "grain-resume"), 600, lambda: launch(root, "grain-resume"))
    after = []
    for r in range(WORLD):
        resumed = json.loads((root / f"resumed-{r}.json").read_text())
        assert resumed == whole[r]["grain"][CHECKPOINT_STEP:], r  # exactly the rest
        check_tokens(docs, resumed)
        after += [p for step in resumed for p in step]
    tiles([len(d) for d in docs], [tuple(p) for p in before] + after)
