"""Token sources from the formats users have (shardkit.open_source), against the peer.

Megatron-LM's own IndexedDatasetBuilder writes the .bin/.idx files and its own
IndexedDataset reads them (megatron-core, requirements-dev.txt): every document
shardkit delivers must be the tokens Megatron reads for it (the sequences
document_indices[d] .. document_indices[d + 1], concatenated).
"""

import json
import pickle
import struct
import sys
import warnings

import numpy as np
import pytest

import shardkit

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed"
    try:
        import torch
        from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
    except ImportError as e:  # pragma: no cover - requirements-dev.txt installs it
        IndexedDataset = None
        _WHY = f"megatron-core is not installed ({e}); make venv installs it"

needs_megatron = pytest.mark.skipif(IndexedDataset is None, reason=globals().get("_WHY", ""))

# Megatron's eight dtype codes; the integer ones with the range written.
INTEGER_DTYPES = [
    (np.uint8, 0, 255),
    (np.int8, -128, 127),
    (np.int16, -32768, 32767),
    (np.int32, -(2**31), 2**31 - 1),
    (np.int64, -(2**31), 2**31 - 1),  # ids must fit the int32 they are delivered as
    (np.uint16, 0, 65535),
]


def write_megatron(prefix, rng, dtype, lo, hi, documents=None):
    """A random corpus through Megatron's builder: empty documents (no sequence),
    empty sequences, documents of several sequences (add_item + end_document) and
    of one (add_document). One document of at least one token somewhere: Megatron's
    reader cannot map an empty .bin (numpy: "cannot mmap an empty file")."""
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    n = int(rng.integers(1, 30)) if documents is None else documents
    sure = int(rng.integers(0, n))
    for k in range(n):
        kind = 1 if k == sure else rng.integers(0, 4)
        if kind == 0:
            builder.end_document()  # an empty document
        elif kind == 1:
            size = rng.integers(1 if k == sure else 0, 40)
            tokens = rng.integers(lo, hi, size=size, endpoint=True)
            builder.add_document(tokens, [len(tokens)])
        else:
            for _ in range(rng.integers(1, 5)):
                tokens = rng.integers(lo, hi, size=rng.integers(0, 20), endpoint=True)
                builder.add_item(torch.from_numpy(tokens.astype(np.int64)))
            builder.end_document()
    builder.finalize(prefix + ".idx")


def megatron_documents(prefix):
    """Every document as Megatron reads it."""
    ds = IndexedDataset(prefix)
    index = ds.document_indices
    docs = []
    for d in range(len(index) - 1):
        parts = [np.asarray(ds[i], dtype=np.int64) for i in range(index[d], index[d + 1])]
        docs.append(np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
    return docs


def expect_same(source, docs):
    assert source.num_documents == len(docs)
    assert source.num_tokens == sum(len(d) for d in docs)
    assert source.lengths().tolist() == [len(d) for d in docs]
    for d, want in enumerate(docs):
        got = source.document(d)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got.astype(np.int64), want, err_msg=f"document {d}")


@needs_megatron
@pytest.mark.parametrize("dtype,lo,hi", INTEGER_DTYPES, ids=lambda v: getattr(v, "__name__", ""))
def test_every_document_matches_megatron_indexed_dataset(tmp_path, dtype, lo, hi):
    rng = np.random.default_rng(abs(hash(dtype.__name__)) % 2**32)
    for round in range(4):
        prefix = str(tmp_path / f"corpus{round}")
        write_megatron(prefix, rng, dtype, lo, hi)
        docs = megatron_documents(prefix)
        expect_same(shardkit.open_source(prefix), docs)
        expect_same(shardkit.open_source(prefix + ".idx", format="megatron"), docs)


@needs_megatron
def test_several_prefixes_are_one_source_in_the_order_given(tmp_path):
    rng = np.random.default_rng(5)
    prefixes, docs = [], []
    for k, (dtype, lo, hi) in enumerate(INTEGER_DTYPES):
        prefix = str(tmp_path / f"part{k}")
        write_megatron(prefix, rng, dtype, lo, hi, documents=int(rng.integers(1, 12)))
        prefixes.append(prefix)
        docs += megatron_documents(prefix)
    source = shardkit.open_source(prefixes)
    assert source.num_files == len(prefixes)
    expect_same(source, docs)
    # A DataLoader worker started by spawn gets the source pickled: it reopens the files.
    expect_same(pickle.loads(pickle.dumps(source)), docs)


@needs_megatron
def test_loaders_and_plans_read_a_megatron_source_every_document_once(tmp_path):
    rng = np.random.default_rng(9)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_megatron(a, rng, np.uint16, 0, 65535, documents=40)
    write_megatron(b, rng, np.int32, 0, 10**6, documents=25)
    source = shardkit.open_source([a, b])
    docs = megatron_documents(a) + megatron_documents(b)
    seen = {}
    for rank in range(3):
        loader = shardkit.TokenLoader(source, seq_len=16, batch_size=2, rank=rank, world_size=3)
        steps = 0
        for batch in loader:
            steps += 1
            for d, start, length in zip(batch["documents"], batch["starts"], batch["lengths"]):
                seen.setdefault(int(d), []).append((int(start), int(length)))
        assert steps == loader.num_steps
    # Every token of every non-empty document in exactly one piece.
    for d, want in enumerate(docs):
        pieces = sorted(seen.get(d, []))
        assert sum(n for _, n in pieces) == len(want), d
    plan = shardkit.TrainPlan.from_source(source, seq_len=16, batch_size=2, world_size=3)
    assert plan.num_steps == loader.num_steps and plan.audit().exactly_once
    # The tokens of a batch are the documents' own (the path given, not the source).
    loader = shardkit.TokenLoader([a, b], seq_len=64, batch_size=1, shuffle=False)
    batch = next(iter(loader))
    row = batch["input_ids"][0]
    at = 0
    for d, start, length in zip(batch["documents"], batch["starts"], batch["lengths"]):
        np.testing.assert_array_equal(row[at : at + length], docs[d][start : start + length])
        at += length
    # A mixture takes sources too: a TokenSource and a prefix.
    mix = shardkit.TokenLoader.mixture(
        [shardkit.open_source(a), b], [0.5, 0.5], seq_len=16, batch_size=2, samples=30
    )
    assert sum(len(x["documents"]) for x in mix) >= 1
    # TokenDataset takes the source as TokenLoader does.
    from shardkit.torch import TokenDataset

    ds = TokenDataset(source, seq_len=16, batch_size=2, rank=0, world_size=1)
    assert next(iter(ds))["input_ids"].shape == (2, 16)


@needs_megatron
def test_fingerprint_changes_with_the_data_and_states_refuse_other_data(tmp_path):
    rng = np.random.default_rng(3)
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_megatron(a, rng, np.int32, 0, 1000, documents=20)
    write_megatron(b, rng, np.int32, 0, 1000, documents=20)
    sa, sb = shardkit.open_source(a), shardkit.open_source(b)
    assert sa.fingerprint == shardkit.open_source(a).fingerprint
    assert sa.fingerprint != sb.fingerprint
    loader = shardkit.TokenLoader(sa, seq_len=16, batch_size=2)
    next(iter(loader))
    state = loader.state_dict()
    other = shardkit.TokenLoader(sb, seq_len=16, batch_size=2)
    with pytest.raises(ValueError):
        other.load_state_dict(state)


def _idx(tmp_path):
    """A valid pair written by hand (3 documents of int32 sequences [1 2 | 3] [] [4 5 6])."""
    prefix = str(tmp_path / "p")
    lengths, pointers, doc_index = [2, 1, 3], [0, 8, 12], [0, 2, 2, 3]
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 4, 3, 4)
    idx += struct.pack("<3i", *lengths) + struct.pack("<3q", *pointers)
    idx += struct.pack("<4q", *doc_index)
    with open(prefix + ".bin", "wb") as f:
        f.write(np.arange(1, 7, dtype=np.int32).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(idx)
    return prefix, bytearray(idx)


def _poke(fmt, at, value):
    def apply(idx, bin_bytes):
        struct.pack_into(fmt, idx, at, value)
        return idx, bin_bytes

    return apply


# (name, corruption of (idx bytes, bin bytes), file named, words of the message)
CORRUPTIONS = [
    ("truncated header", lambda i, b: (i[:20], b), "idx", "header: file of 20 bytes"),
    ("bad magic", lambda i, b: (b"MMIDIDY" + i[7:], b), "idx", "magic: 'MMIDIDY"),
    ("version", _poke("<Q", 9, 3), "idx", "version: 3, expected 1"),
    ("dtype code 0", _poke("<B", 17, 0), "idx", "dtype: code 0 is not a Megatron dtype"),
    ("float32 dtype", _poke("<B", 17, 7), "idx", "dtype: code 7 (float32)"),
    ("float64 dtype", _poke("<B", 17, 6), "idx", "dtype: code 6 (float64)"),
    ("lying sequence_count", _poke("<Q", 18, 10**12), "idx", "sequence_count: 1000000000000"),
    ("lying document_count", _poke("<Q", 26, 5), "idx", "size: 102 bytes, expected 110"),
    ("truncated index", lambda i, b: (i[:-3], b), "idx", "size: 99 bytes, expected 102"),
    ("pointer out of range", _poke("<q", 54, 1 << 40), "idx", "sequence_pointers[1] = "),
    ("pointer not matching lengths", _poke("<q", 62, 4), "idx", "sequence_pointers[2] = 4"),
    ("negative length", _poke("<i", 34, -2), "idx", "sequence_lengths[0] = -2"),
    ("truncated .bin", lambda i, b: (i, b[:-1]), "idx", "sequence_lengths[2] = 3: sequence 2"),
    ("bytes after the data", lambda i, b: (i, b + b"\0" * 4), "bin", "size: 28 bytes"),
    ("non-monotone document indices", _poke("<q", 78, 3), "idx", "document_indices[2] = 2 <"),
    ("document index out of range", _poke("<q", 94, 9), "idx", "document_indices[3] = 9"),
]


@pytest.mark.parametrize("name,corrupt,file,words", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_corrupt_megatron_files_are_refused_naming_file_and_field(
    tmp_path, name, corrupt, file, words
):
    prefix, idx = _idx(tmp_path)
    shardkit.open_source(prefix)  # valid before the corruption
    with open(prefix + ".bin", "rb") as f:
        bin_bytes = f.read()
    idx, bin_bytes = corrupt(idx, bin_bytes)
    with open(prefix + ".idx", "wb") as f:
        f.write(bytes(idx))
    with open(prefix + ".bin", "wb") as f:
        f.write(bin_bytes)
    with pytest.raises(ValueError) as e:
        shardkit.open_source(prefix)
    message = str(e.value)
    assert message.startswith(f"path: {prefix}.{file}: "), message
    assert words in message and "\n" not in message, message


def test_open_source_names_the_parameter_of_bad_arguments(tmp_path):
    cases = [
        (dict(path=str(tmp_path / "nothing")), "path: '"),
        (dict(path=[str(tmp_path), 3]), "path: entry 1 is a int"),
        (dict(path=str(tmp_path), format="csv"), "format: unknown source format 'csv'"),
        (dict(path=str(tmp_path / "a.npy"), format="olmo"), "token_dtype: an OLMo token file"),
    ]
    for kwargs, words in cases:
        with pytest.raises(ValueError) as e:
            shardkit.open_source(kwargs.pop("path"), **kwargs)
        assert str(e.value).startswith(words), (kwargs, str(e.value))
    prefix, _ = _idx(tmp_path)
    with pytest.raises(IndexError, match="document: 5 is outside"):
        shardkit.open_source(prefix + ".bin", format="megatron").document(5)


def test_regression_document_length_names_the_parameter_like_document(tmp_path):
    # The binding's document_length (behind TokenSource._core) said
    # "document 5 is outside ..." beside document's "document: 5 is outside
    # ...": one range check (base's CheckIndex), one wording.
    prefix, _ = _idx(tmp_path)
    source = shardkit.open_source(prefix + ".bin", format="megatron")
    n = source.num_documents
    for bad in (n, -1):
        for read in (source.document, source._core.document_length):
            with pytest.raises(IndexError) as e:
                read(bad)
            assert str(e.value) == f"document: {bad} is outside [0, {n})", str(e.value)


def test_cli_loader_stats_reads_a_source_and_names_bad_ones(cli, tmp_path):
    prefix, idx = _idx(tmp_path)
    with open(prefix + ".idx", "wb") as f:
        f.write(bytes(idx))
    run = ["loader-stats", "--source", f"{prefix},{prefix}", "--seq-len", "4", "--batch", "1"]
    out = cli(*run, "--json", "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["documents"] == 6 and report["tokens"] == 12, report
    # --mixture takes the same paths (a Megatron prefix per source).
    mix = ["loader-stats", "--mixture", f"{prefix},{prefix}.idx", "--weights", "1,1"]
    mixed = cli(*mix, "--seq-len", "4", "--batch", "1", "--quiet")
    assert mixed.returncode == 0, mixed.stderr
    struct.pack_into("<B", idx, 17, 7)
    with open(prefix + ".idx", "wb") as f:
        f.write(bytes(idx))
    bad = cli(*run)
    assert bad.returncode != 0
    assert bad.stderr.strip().count("\n") == 0
    assert f"--source: {prefix}.idx: dtype: code 7 (float32)" in bad.stderr, bad.stderr
    fmt = cli(*run, "--format", "csv")
    assert fmt.returncode != 0 and "--format: unknown source format 'csv'" in fmt.stderr


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
