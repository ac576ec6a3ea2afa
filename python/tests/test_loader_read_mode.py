"""The loaders' ``read`` option: "pread" reads each document's length and tokens with
pread(2) instead of from the memory maps (token_source.h's ReadMode). The batches must be
the ones the maps give, whatever the format (Megatron files written by Megatron's own
builder, with documents of several sequences; OLMo headerless files; npy pairs), the
loader (one source, a mixture), the configuration and a resume across the two modes; the
tokens delivered are the peer's documents (Megatron's IndexedDataset, OLMo-core's rule).
"""

import json

import numpy as np
import pytest
from test_olmo_source import olmo_documents, write_tokens
from test_sources import megatron_documents, needs_megatron, write_megatron

import shardkit

MODES = ("mmap", "pread", "auto")


def corpus(tmp_path):
    """(sources, documents per source): Megatron, OLMo and npy, and the peer's documents."""
    rng = np.random.default_rng(17)
    prefix = str(tmp_path / "mega")
    write_megatron(prefix, rng, np.uint16, 0, 65535, documents=120)
    olmo = write_tokens(str(tmp_path / "olmo.npy"), rng, np.uint32, eos=7, docs=150)
    lengths = rng.integers(0, 40, size=200)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.integers(0, 50000, size=int(offsets[-1])).astype(np.int32)
    np.save(tmp_path / "t.tokens.npy", tokens)
    np.save(tmp_path / "t.offsets.npy", offsets)
    sources = [
        shardkit.open_source(prefix),
        shardkit.open_source(olmo, format="olmo", token_dtype="uint32", eos_token_id=7),
        shardkit.open_source(str(tmp_path / "t.tokens.npy")),
    ]
    docs = [
        megatron_documents(prefix),
        olmo_documents([olmo], np.uint32, 7),
        [tokens[a:b] for a, b in zip(offsets[:-1], offsets[1:])],
    ]
    return sources, docs


def batches(loader, stop=None):
    out = []
    for batch in loader:
        out.append({k: np.asarray(v).copy() for k, v in batch.items()})
        if stop is not None and len(out) == stop:
            break
    return out


def expect_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(x[k], y[k], err_msg=k)


def expect_peer_tokens(batch, docs_of):
    """Every piece's tokens are the peer's document's (docs_of(batch, j): piece j's),
    the pieces of a row laid out in order from its start."""
    at = {}
    for j, (row, start, length) in enumerate(
        zip(batch["rows"].tolist(), batch["starts"].tolist(), batch["lengths"].tolist())
    ):
        col = at.get(row, 0)
        want = docs_of(batch, j)[start : start + length].astype(np.int64)
        np.testing.assert_array_equal(batch["input_ids"][row][col : col + length], want)
        at[row] = col + length


@needs_megatron
@pytest.mark.parametrize("trial", range(4))
def test_batches_are_the_same_read_with_pread_or_mmap(tmp_path, trial):
    sources, docs = corpus(tmp_path)
    rng = np.random.default_rng(trial)
    options = dict(
        seq_len=int(rng.choice([16, 32, 64])),
        batch_size=int(rng.integers(1, 4)),
        world_size=int(rng.integers(1, 4)),
        equal_steps=bool(trial % 2),
        seed=int(rng.integers(0, 1000)),
    )
    for rank in range(options["world_size"]):
        # Each source alone (shuffled), each mode against the maps.
        for k, source in enumerate(sources):
            runs = {
                mode: batches(shardkit.TokenLoader(source, rank=rank, read=mode, **options))
                for mode in MODES
            }
            expect_same(runs["mmap"], runs["pread"])
            expect_same(runs["mmap"], runs["auto"])
            for batch in runs["pread"]:
                expect_peer_tokens(batch, lambda b, j, k=k: docs[k][int(b["documents"][j])])
        # The mixture (pread by default), and a state saved under one mode resumed
        # under the other.
        weights = [float(w) for w in rng.integers(1, 5, size=3)]

        def mixture(mode):
            return shardkit.TokenLoader.mixture(
                sources, weights, rank=rank, read=mode, samples=400, **options
            )

        runs = {mode: batches(mixture(mode)) for mode in MODES}
        expect_same(runs["mmap"], runs["pread"])
        expect_same(runs["mmap"], runs["auto"])
        for batch in runs["auto"]:
            expect_peer_tokens(batch, lambda b, j: docs[int(b["sources"][j])][int(b["items"][j])])
        stop = max(1, len(runs["mmap"]) // 2)
        for saved, resumed in (("pread", "mmap"), ("mmap", "pread")):
            first = mixture(saved)
            head = batches(first, stop=stop)
            state = first.state_dict()
            second = mixture(resumed)
            second.load_state_dict(state)
            expect_same(head + batches(second), runs["mmap"])


def test_a_read_mode_not_known_names_the_option(tmp_path, cli):
    tokens = np.arange(10, dtype=np.int32)
    np.save(tmp_path / "t.tokens.npy", tokens)
    np.save(tmp_path / "t.offsets.npy", np.array([0, 4, 10]))
    with pytest.raises(ValueError, match="read"):
        shardkit.TokenLoader(str(tmp_path / "t.tokens.npy"), seq_len=8, batch_size=1, read="mapped")
    r = cli("loader-stats", "--source", tmp_path / "t.tokens.npy", "--seq-len", 8,
            "--batch", 1, "--read", "mapped")  # fmt: skip
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and "read" in r.stderr, r.stderr
    r = cli("loader-stats", "--source", tmp_path / "t.tokens.npy", "--seq-len", 8,
            "--batch", 1, "--read", "pread", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr


def test_the_cli_reports_the_same_run_whichever_read_mode(tmp_path, cli):
    """`loader-stats --read`: what the CLI delivers (its report of the run: batches,
    tokens, padding, pieces and balance per rank) is the same read with pread, the
    maps, or auto; only the timings differ."""
    rng = np.random.default_rng(5)
    paths = []
    for k in range(3):
        lengths = rng.integers(1, 300, size=400)
        np.save(
            tmp_path / f"s{k}.tokens.npy",
            rng.integers(1, 50000, size=lengths.sum(), dtype=np.int32),
        )
        np.save(tmp_path / f"s{k}.offsets.npy", np.concatenate([[0], np.cumsum(lengths)]))
        paths.append(str(tmp_path / f"s{k}.tokens.npy"))

    def report(mode):
        r = cli("loader-stats", "--mixture", ",".join(paths), "--weights", "5,3,2",
                "--seq-len", 512, "--batch", 2, "--world", 2, "--read", mode, "--json")  # fmt: skip
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        for timing in ("seconds", "tokens_per_second"):
            out.pop(timing)
        for rank in out["ranks"]:
            rank.pop("seconds")
        return out

    want = report("mmap")
    assert want["batches"] > 100 and want["tokens"] > 0
    assert report("pread") == want
    assert report("auto") == want
