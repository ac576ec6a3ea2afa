"""make demo's corpus (tools/demo_corpus.py): the standard library's files ->
a tokenizer trained here -> `shardkit prepare` -> the loader on 4 ranks. The
oracles: the files themselves, the tokenizer's own encode, and megatron-core's
IndexedDataset reading what prepare wrote. The second run skips every step
but the loader's and rewrites nothing."""

import json
import os
import subprocess
import sys
import sysconfig
import warnings

import numpy as np
import pytest
from conftest import ROOT, cli_path

pytest.importorskip("tokenizers")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # "Transformer Engine and Apex are not installed"
    indexed_dataset = pytest.importorskip("megatron.core.datasets.indexed_dataset")


def run_demo(out):
    command = [sys.executable, str(ROOT / "tools" / "demo_corpus.py"), "--cli", cli_path()]
    command += ["--out", str(out), "--files", "40", "--vocab", "600"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_demo_corpus_is_the_stdlib_tokenized_and_read_by_megatron_then_skipped(tmp_path):
    from tokenizers import Tokenizer

    out = tmp_path / "demo"
    first = run_demo(out)
    assert "equal steps (pad)" in first and "every token delivered once" in first, first
    lib = sysconfig.get_paths()["stdlib"]
    rows = [json.loads(line) for line in (out / "stdlib.jsonl").read_text().splitlines()]
    assert len(rows) == 40
    assert [r["path"] for r in rows] == sorted(r["path"] for r in rows)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    megatron = indexed_dataset.IndexedDataset(str(out / "stdlib"))
    assert len(megatron) == 40
    for d, row in enumerate(rows):
        with open(os.path.join(lib, row["path"]), encoding="utf-8") as f:
            assert row["text"] == f.read(), row["path"]
        want = tok.encode(row["text"]).ids + [eos]
        assert np.asarray(megatron[d]).tolist() == want, row["path"]

    files = [out / n for n in ("stdlib.jsonl", "tokenizer.json", "stdlib.bin", "stdlib.idx")]
    stamps = [f.stat().st_mtime_ns for f in files]
    second = run_demo(out)
    assert second.count("skipped") == 3, second
    assert "equal steps (pad)" in second
    assert [f.stat().st_mtime_ns for f in files] == stamps
