"""shardkit prepare: raw text to Megatron .bin/.idx (and the .npy pair).

The oracles are the peers: the tokenizer's own ``encode`` of each document (a
tokenizer trained here by the ``tokenizers`` package on the Python standard
library's sources: no download) and megatron-core's ``IndexedDataset`` reading
the files prepare wrote.
"""

import glob
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import shardkit

tokenizers = pytest.importorskip("tokenizers", reason="tokenizers is not installed (make venv)")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        from megatron.core.datasets.indexed_dataset import IndexedDataset
    except ImportError:  # pragma: no cover - requirements-dev.txt installs it
        IndexedDataset = None

STDLIB = os.path.dirname(os.__file__)


def stdlib_texts(n):
    files = sorted(glob.glob(os.path.join(STDLIB, "*.py")))[:n]
    out = []
    for f in files:
        with open(f, encoding="utf-8") as fh:
            out.append(fh.read()[:3000])
    return files, out


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>", "</s>"])
    tok.train_from_iterator(stdlib_texts(20)[1], trainer)
    path = str(tmp_path_factory.mktemp("tok") / "tokenizer.json")
    tok.save(path)
    return path


@pytest.fixture
def corpus(tmp_path):
    """Three inputs: JSONL (with an empty document), plain text, Parquet."""
    files, texts = stdlib_texts(30)
    jsonl = tmp_path / "a.jsonl"
    docs = texts[:10] + [""] + texts[10:15]
    with open(jsonl, "w", encoding="utf-8") as f:
        for t in docs:
            f.write(json.dumps({"text": t, "id": 1}) + "\n")
    plain = tmp_path / "b.txt"
    plain.write_text(texts[15], encoding="utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": texts[16:30]}), parquet, row_group_size=5)
    return [str(jsonl), str(plain), str(parquet)], docs + [texts[15]] + texts[16:30]


def expected(tokenizer_path, texts, eos=True):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_path)
    eos_id = tok.token_to_id("</s>")
    return [tok.encode(t).ids + ([eos_id] if eos else []) for t in texts]


def run_cli(*args, timeout=120):
    cli = os.environ.get("SHARDKIT_CLI")
    if not cli:
        pytest.skip("SHARDKIT_CLI is not set (make test-python sets it)")
    env = dict(os.environ, SHARDKIT_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(shardkit.__file__)), env.get("PYTHONPATH", "")]
    )
    return subprocess.run(
        [cli, "prepare", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.skipif(IndexedDataset is None, reason="megatron-core is not installed")
def test_megatron_reads_prepare_output_as_the_tokenizers_own_encode(
    tmp_path, tokenizer_path, corpus
):
    inputs, texts = corpus
    out = run_cli(
        "--input",
        *inputs,
        "--tokenizer",
        tokenizer_path,
        "--output",
        str(tmp_path / "cli"),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    want = expected(tokenizer_path, texts)
    assert result["documents"] == len(texts) and result["format"] == "megatron"
    assert result["tokens"] == sum(len(w) for w in want)
    assert result["files"] == [str(tmp_path / "cli.bin"), str(tmp_path / "cli.idx")]
    # Not a terminal: one quiet line per input file.
    assert out.stderr.count("\n") == len(inputs) and "documents" in out.stderr
    ds = IndexedDataset(str(tmp_path / "cli"))
    assert ds.index.dtype == np.uint16  # a 600-id vocabulary: Megatron's own rule
    assert len(ds.document_indices) == len(texts) + 1
    for d, w in enumerate(want):
        np.testing.assert_array_equal(ds[d].astype(np.int64), w, err_msg=f"document {d}")
    # Deterministic whatever the workers: the same bytes from 3 processes, in Python.
    shardkit.prepare(inputs, tokenizer_path, str(tmp_path / "w3"), workers=3, progress=False)
    for ext in (".bin", ".idx"):
        with open(tmp_path / ("cli" + ext), "rb") as a, open(tmp_path / ("w3" + ext), "rb") as b:
            assert a.read() == b.read(), ext


def test_npy_output_and_no_eos(tmp_path, tokenizer_path, corpus):
    inputs, texts = corpus
    r = shardkit.prepare(
        inputs, tokenizer_path, str(tmp_path / "n"), format="npy", eos=False, progress=False
    )
    assert r["files"] == [str(tmp_path / "n.tokens.npy"), str(tmp_path / "n.offsets.npy")]
    want = expected(tokenizer_path, texts, eos=False)
    tokens, offsets = np.load(r["files"][0]), np.load(r["files"][1])
    assert tokens.dtype == np.uint16 and offsets[0] == 0 and len(offsets) == len(texts) + 1
    for d, w in enumerate(want):
        np.testing.assert_array_equal(tokens[offsets[d] : offsets[d + 1]], w)
    source = shardkit.open_source(r["files"][0])
    assert source.lengths().tolist() == [len(w) for w in want]


def test_bad_inputs_fail_with_one_line_and_leave_no_output(tmp_path, tokenizer_path, corpus):
    inputs, _ = corpus
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"body": "no text"}\n', encoding="utf-8")
    out = str(tmp_path / "out")
    cases = [
        (["--input", *inputs, str(bad)], f"--text-key: {bad}:2 has no string under 'text'"),
        (["--input", str(tmp_path / "missing.jsonl")], "--input: "),
        (["--input", inputs[0], "--workers", "0"], "--workers: 0 must be at least 1"),
        (["--input", inputs[0], "--eos-token", "<nope>"], "--eos-token: '<nope>' is not a token"),
    ]
    for args, words in cases:
        r = run_cli(*args, "--tokenizer", tokenizer_path, "--output", out)
        assert r.returncode == 2, (args, r.stderr)
        line = r.stderr.strip().splitlines()[-1]
        assert line.startswith("shardkit prepare: " + words), (args, r.stderr)
        # Interrupted by the error: no output and no temporary is left behind.
        assert sorted(os.listdir(tmp_path)) == sorted(
            os.path.basename(p) for p in inputs + [str(bad)]
        ), os.listdir(tmp_path)
    r = run_cli("--input", inputs[0], "--tokenizer", str(tmp_path), "--output", out)
    assert r.returncode == 2 and "--tokenizer: " in r.stderr and "no tokenizer.json" in r.stderr
