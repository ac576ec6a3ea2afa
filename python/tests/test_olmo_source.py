"""OLMo / Dolma token files (shardkit.open_source(format="olmo")) against OLMo-core's rule.

The oracle is OLMo-core's own code, transcribed below because the package cannot go
into the project venv: `pip install ai2-olmo-core==3.0.0` pulls about 30 packages
(boto3, google-cloud-storage, cached-path, huggingface_hub, ...) and pins
filelock<4.0 where the shared venv holds 4.3.1 (a downgrade under datasets/torch),
and `olmo_core.data.utils` imports `olmo_core.io`, which needs cached_path and
requests at import time. Transcribed from allenai/OLMo-core at commit fa6c5014c:
src/olmo_core/data/utils.py `write_document_indices` and `iter_document_indices`
(both branches: the local-array EOS/BOS scan and the .csv.gz metadata), and
src/olmo_core/data/composable/numpy_document_source.py
`NumpyDocumentSource.get_document_offsets` (consecutive documents; the end of each
file always ends a document) and `NumpyDocumentSourceConfigBase.get_dtype`.
"""

import gzip
import json
import os
import pickle
import sys

import numpy as np
import pytest

import shardkit

OLMO_DTYPES = [np.uint8, np.uint16, np.uint32, np.uint64]


# ---- OLMo-core, transcribed (see the module docstring) ----------------------


def olmo_write_document_indices(data_path, *, dtype, eos_token_id):
    token_ids = np.memmap(data_path, mode="r", dtype=dtype)
    eos_token_locations = (token_ids == eos_token_id).nonzero()[0]
    metadata_path = data_path[: -len(".npy")] + ".csv.gz"  # Path.with_suffix(".csv.gz")
    with gzip.open(metadata_path, mode="wt") as f:
        start_idx = 0
        for eos_token_location in eos_token_locations:
            end_idx = eos_token_location + 1
            f.write(f"{start_idx},{end_idx}\n")
            start_idx = end_idx
    return metadata_path


def olmo_iter_document_indices(data_path, *, eos_token_id=None, bos_token_id=None, dtype=None):
    if eos_token_id is not None and dtype is not None:  # use_array_if_local
        mmap = np.memmap(data_path, mode="r", dtype=dtype)
        if bos_token_id is None:
            doc_boundaries = (mmap == eos_token_id).nonzero()[0]
        else:
            doc_boundaries = np.logical_and(
                mmap[:-1] == eos_token_id, mmap[1:] == bos_token_id
            ).nonzero()[0]
            if mmap[-1] == eos_token_id:
                doc_boundaries = np.append(doc_boundaries, mmap.shape[0] - 1)
        start_idx = 0
        for idx in doc_boundaries:
            end_idx = idx + 1
            yield start_idx, end_idx
            start_idx = end_idx
    else:
        metadata_path = os.path.join(
            os.path.dirname(data_path), os.path.basename(data_path).replace(".npy", ".csv.gz")
        )
        total_tokens = None
        if dtype is not None:
            total_tokens = os.path.getsize(data_path) // np.dtype(dtype).itemsize
        with gzip.open(metadata_path, "rt") as f:
            for line in f:
                start_index_str, end_index_str, *_ = line.split(",")
                start_index, end_index = int(start_index_str), int(end_index_str)
                if total_tokens is not None:
                    if start_index >= total_tokens:
                        raise RuntimeError("start out-of-bounds")
                    if end_index > total_tokens:
                        raise RuntimeError("end out-of-bounds")
                yield start_index, end_index


def olmo_get_document_offsets(source_paths, dtype, eos_token_id, bos_token_id=None):
    start_offset = 0
    for source_path in source_paths:
        source_size = os.path.getsize(source_path) // np.dtype(dtype).itemsize
        last_doc_end = 0
        indices = olmo_iter_document_indices(
            source_path, eos_token_id=eos_token_id, bos_token_id=bos_token_id, dtype=dtype
        )
        for doc_start, doc_end in indices:
            assert doc_start == last_doc_end  # API assumes consecutive documents
            yield doc_start + start_offset, doc_end + start_offset
            last_doc_end = doc_end
        if last_doc_end != source_size:
            yield last_doc_end + start_offset, source_size + start_offset
        start_offset += source_size


def olmo_get_dtype(vocab_size):
    for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
        if (vocab_size - 1) <= np.iinfo(dtype).max:
            return dtype
    raise ValueError("vocab size too big!")


def olmo_documents(paths, dtype, eos, bos=None):
    """The token arrays OLMo-core's NumpyDocumentSource gives, one per document."""
    tokens = np.concatenate([np.fromfile(p, dtype=dtype) for p in paths])
    return [tokens[s:e] for s, e in olmo_get_document_offsets(paths, dtype, eos, bos)]


# ---- helpers -------------------------------------------------------------------


def write_tokens(path, rng, dtype, eos, bos=None, tail=False, docs=None):
    """A Dolma-style file: documents of random ids (EOS / BOS ids among them too, so
    that an EOS not followed by the BOS occurs inside documents), each ending in EOS;
    the last without one when `tail`."""
    hi = min(int(np.iinfo(dtype).max), 2**31 - 1)
    parts = []
    for k in range(int(rng.integers(1, 40)) if docs is None else docs):
        body = rng.integers(0, hi, size=int(rng.integers(0, 30)), endpoint=True)
        body[rng.random(len(body)) < 0.1] = eos
        doc = ([bos] if bos is not None else []) + body.tolist()
        parts.append(doc + ([] if tail and k == 0 else [eos]))
    flat = [t for doc in parts[1:] + parts[:1] for t in doc]  # the tail doc last
    np.asarray(flat, dtype=dtype).tofile(path)
    return path


def expect_same(source, docs):
    assert source.num_documents == len(docs)
    assert source.lengths().tolist() == [len(d) for d in docs]
    for d, want in enumerate(docs):
        assert source.document(d).tolist() == want.astype(np.int64).tolist(), d


# ---- tests ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", OLMO_DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("bos", [None, 1])
@pytest.mark.parametrize("tail", [False, True])
def test_eos_scan_matches_olmo_core_documents(tmp_path, dtype, bos, tail):
    rng = np.random.default_rng(7)
    path = write_tokens(str(tmp_path / "part-0-00000.npy"), rng, dtype, 0, bos, tail)
    name = np.dtype(dtype).name
    source = shardkit.open_source(
        path, format="olmo", token_dtype=name, eos_token_id=0, bos_token_id=bos
    )
    expect_same(source, olmo_documents([path], dtype, 0, bos))
    # Reopened: the cache beside the file is reused and gives the same documents.
    cache = path + ".shardkit-docs-eos0" + ("" if bos is None else "-bos1")
    assert os.path.exists(cache)
    expect_same(
        shardkit.open_source(path, token_dtype=name, eos_token_id=0, bos_token_id=bos),
        olmo_documents([path], dtype, 0, bos),
    )


@pytest.mark.parametrize("dtype", OLMO_DTYPES, ids=lambda t: np.dtype(t).name)
def test_csv_gz_metadata_written_by_olmo_core_gives_its_documents(tmp_path, dtype):
    rng = np.random.default_rng(11)
    path = write_tokens(str(tmp_path / "a.npy"), rng, dtype, 3)
    olmo_write_document_indices(path, dtype=dtype, eos_token_id=3)
    want = [
        np.fromfile(path, dtype=dtype)[s:e]
        for s, e in olmo_iter_document_indices(path, dtype=dtype)
    ]  # the csv.gz branch
    vocab = int(np.iinfo(dtype).max) + 1 if dtype is not np.uint64 else 2**40
    assert olmo_get_dtype(vocab) == dtype
    expect_same(shardkit.open_source(path, vocab_size=vocab), want)  # detected: olmo


def test_several_files_are_one_source_in_the_order_given_and_loaders_read_it(tmp_path):
    rng = np.random.default_rng(2)
    paths = [
        write_tokens(str(tmp_path / f"part-{k}.npy"), rng, np.uint32, 50279, tail=k == 1)
        for k in range(3)
    ]
    order = [paths[2], paths[0], paths[1]]
    source = shardkit.open_source(order, token_dtype="uint32", eos_token_id=50279)
    assert source.num_files == 3
    expect_same(source, olmo_documents(order, np.uint32, 50279))
    loader = shardkit.TokenLoader(source, seq_len=32, batch_size=2, rank=0, world_size=1)
    seen = sorted(d for b in loader for d in b["documents"].tolist())
    assert seen == list(range(source.num_documents))
    again = pickle.loads(pickle.dumps(source))
    assert again.fingerprint == source.fingerprint


def test_resume_against_one_edited_token_is_refused(tmp_path):
    rng = np.random.default_rng(4)
    path = write_tokens(str(tmp_path / "a.npy"), rng, np.uint16, 0, docs=30)
    source = shardkit.open_source(path, token_dtype="uint16", eos_token_id=0)
    loader = shardkit.TokenLoader(source, seq_len=16, batch_size=2)
    next(iter(loader))
    state = loader.state_dict()
    fingerprint = source.fingerprint
    tokens = np.fromfile(path, dtype=np.uint16)
    inside = int(np.nonzero(tokens != 0)[0][3])  # a non-EOS token: the lengths stay
    tokens[inside] = tokens[inside] % 1000 + 1
    tokens.tofile(path + ".new")
    os.replace(path + ".new", path)  # a new version of the file (the old one stays mapped)
    edited = shardkit.open_source(path, token_dtype="uint16", eos_token_id=0)
    assert edited.lengths().tolist() == source.lengths().tolist()
    assert edited.fingerprint != fingerprint
    other = shardkit.TokenLoader(edited, seq_len=16, batch_size=2)
    with pytest.raises(ValueError, match="differ"):
        other.load_state_dict(state)


def test_a_stale_cache_is_rebuilt_from_the_data(tmp_path):
    path = str(tmp_path / "a.npy")
    np.asarray([5, 0, 6, 7, 0], dtype=np.uint16).tofile(path)
    assert shardkit.open_source(path, token_dtype="uint16", eos_token_id=0).lengths().tolist() == [
        2,
        3,
    ]
    cache = path + ".shardkit-docs-eos0"
    before = open(cache, "rb").read()
    np.asarray([5, 6, 0, 7, 0], dtype=np.uint16).tofile(path)  # same size, other boundaries
    source = shardkit.open_source(path, token_dtype="uint16", eos_token_id=0)
    assert source.lengths().tolist() == [3, 2]
    assert open(cache, "rb").read() != before
    # Other data's cache copied over it (mtime kept): rebuilt, not trusted.
    with open(cache, "wb") as f:
        f.write(before)
    expect_same(
        shardkit.open_source(path, token_dtype="uint16", eos_token_id=0),
        olmo_documents([path], np.uint16, 0),
    )


# (name, data bytes, csv.gz text or None, open_source keywords, words of the message)
HOSTILE = [
    (
        "truncated tokens",
        b"\x05\x00\x00",
        "0,1\n",
        dict(token_dtype="uint16"),
        "tokens: {d}/a.npy: size: 3 bytes is not a whole number of uint16 tokens",
    ),
    ("no dtype", b"\x05\x00", "0,1\n", dict(), "token_dtype: an OLMo token file has no header"),
    (
        "signed dtype",
        b"\x05\x00",
        "0,1\n",
        dict(token_dtype="int16"),
        "token_dtype: 'int16' is not an OLMo token dtype",
    ),
    (
        "numpy magic",
        b"\x93NUMPY\x01\x00",
        None,
        dict(token_dtype="uint8", eos_token_id=0),
        "tokens: {d}/a.npy: magic: starts with the NumPy magic",
    ),
    (
        "eos outside dtype",
        b"\x05\x00",
        None,
        dict(token_dtype="uint8", eos_token_id=300),
        "eos_token_id: 300 is outside the uint8 token ids [0, 255]",
    ),
    (
        "bos without eos",
        b"\x05\x00",
        "0,2\n",
        dict(token_dtype="uint8", bos_token_id=1),
        "bos_token_id: 1 needs eos_token_id",
    ),
    ("vocab 0", b"\x05\x00", "0,2\n", dict(vocab_size=0), "vocab_size: 0; a vocabulary"),
    (
        "no metadata",
        b"\x05\x00",
        None,
        dict(token_dtype="uint8"),
        "eos_token_id: {d}/a.npy: no metadata file {d}/a.csv.gz",
    ),
    (
        "rows not tiling",
        b"\x05\x00\x07",
        "0,1\n2,3\n",
        dict(token_dtype="uint8"),
        "metadata: {d}/a.csv.gz: row 2: start 2, expected 1",
    ),
    (
        "end past the tokens",
        b"\x05\x00\x07",
        "0,1\n1,9\n",
        dict(token_dtype="uint8"),
        "metadata: {d}/a.csv.gz: row 2: end 9 is past the end of {d}/a.npy (3 tokens",
    ),
    (
        "metadata of a shorter file",
        b"\x05\x00\x07",
        "0,1\n",
        dict(token_dtype="uint8"),
        "metadata: {d}/a.csv.gz: 1 rows end at token 1 but {d}/a.npy holds 3 tokens",
    ),
    (
        "csv not gzip",
        b"\x05\x00\x07",
        b"0,3\n",
        dict(token_dtype="uint8"),
        "metadata: {d}/a.csv.gz: not gzip-compressed",
    ),
    (
        "uint64 id past int32",
        np.asarray([1, 2**40], np.uint64).tobytes(),
        None,
        dict(token_dtype="uint64", eos_token_id=1),
        "tokens: {d}/a.npy: token 1 is 1099511627776",
    ),
]


@pytest.mark.parametrize("name,data,csv,kwargs,words", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_files_are_refused_naming_file_and_field(tmp_path, name, data, csv, kwargs, words):
    path = str(tmp_path / "a.npy")
    with open(path, "wb") as f:
        f.write(data)
    if isinstance(csv, bytes):
        with open(str(tmp_path / "a.csv.gz"), "wb") as f:
            f.write(csv)
    elif csv is not None:
        with gzip.open(str(tmp_path / "a.csv.gz"), "wt") as f:
            f.write(csv)
    with pytest.raises(ValueError) as e:
        shardkit.open_source(path, format="olmo", **kwargs)
    message = str(e.value)
    assert message.startswith(words.format(d=tmp_path)), message
    assert "\n" not in message


def test_cli_loader_stats_reads_olmo_files_and_names_bad_ones(cli, tmp_path):
    rng = np.random.default_rng(9)
    path = write_tokens(str(tmp_path / "a.npy"), rng, np.uint16, 0, docs=25)
    run = ["loader-stats", "--source", path, "--seq-len", "16", "--batch", "2", "--quiet"]
    out = cli(*run, "--token-dtype", "uint16", "--eos-token-id", "0", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    docs = olmo_documents([path], np.uint16, 0)
    assert report["documents"] == len(docs) and report["tokens"] == sum(map(len, docs)), report
    bad = cli(*run, "--vocab-size", "65536", "--eos-token-id", "70000")
    assert bad.returncode != 0
    assert bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "70000 is outside the uint16 token ids" in bad.stderr, bad.stderr


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
