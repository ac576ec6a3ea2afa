"""shardkit.prepare(): raw text to token files that shardkit and Megatron read.

Tokenizing is the Hugging Face ``tokenizers`` library's (Rust); the files are
written by the C++ core's writer (``shardkit/loader/token_writer.h``: temporary
names renamed at the end, ids checked against the dtype). ``shardkit prepare``
on the command line runs ``python -m shardkit prepare`` (this module's
:func:`main`, through ``shardkit/__main__.py``) with the same flags.

Inputs, documents in input order: JSONL (``.jsonl`` / ``.json``, optionally
``.gz``; one object per line, the text under ``text_key``), Parquet
(``.parquet``; the column ``text_key``) and any other file as plain UTF-8 text
(the whole file is one document). Each document is ``tokenizer.encode(text).ids``
(the tokenizer's own special tokens included) plus the EOS id unless
``eos=False``. The output does not depend on ``workers``.

>>> import os, tempfile, shardkit
>>> from tokenizers import Tokenizer, models, pre_tokenizers, trainers
>>> d = tempfile.mkdtemp()
>>> tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
>>> tok.pre_tokenizer = pre_tokenizers.Whitespace()
>>> tok.train_from_iterator(["a b c", "b c d"], trainers.WordLevelTrainer(
...     special_tokens=["<unk>", "</s>"]))
>>> tok.save(os.path.join(d, "tokenizer.json"))
>>> with open(os.path.join(d, "in.jsonl"), "w") as f:
...     _ = f.write('{"text": "a b"}\\n{"text": "d"}\\n')
>>> out = shardkit.prepare([os.path.join(d, "in.jsonl")], os.path.join(d, "tokenizer.json"),
...                        os.path.join(d, "corpus"), progress=False)
>>> out["documents"], out["tokens"], out["format"]      # EOS after each document
(2, 5, 'megatron')
>>> shardkit.open_source(os.path.join(d, "corpus")).lengths().tolist()
[3, 2]
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

from shardkit import _core

__all__ = ["prepare", "main"]

# Tried in this order when neither eos_token nor the tokenizer's config names one.
_EOS_NAMES = ("</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "[SEP]")
_BATCH = 256  # documents per encode_batch call (and per task of a worker)


def _load_tokenizer(path: str):
    """The Tokenizer of a tokenizer.json, or of a transformers tokenizer
    directory (its tokenizer.json), and the EOS token its config names."""
    try:
        from tokenizers import Tokenizer
    except ImportError as e:  # pragma: no cover - requirements-dev.txt installs it
        raise ValueError(f"tokenizer: the tokenizers package is not installed ({e})") from None
    config_eos = None
    file = path
    if os.path.isdir(path):
        file = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(file):
            raise ValueError(
                f"tokenizer: {path!r} has no tokenizer.json (a fast tokenizer's file; "
                "save it with tokenizer.save_pretrained)"
            )
        config = os.path.join(path, "tokenizer_config.json")
        if os.path.isfile(config):
            with open(config, encoding="utf-8") as f:
                eos = json.load(f).get("eos_token")
            config_eos = eos.get("content") if isinstance(eos, dict) else eos
    if not os.path.isfile(file):
        raise ValueError(f"tokenizer: {path!r} is not a tokenizer.json file or directory")
    try:
        return Tokenizer.from_file(file), config_eos
    except Exception as e:
        raise ValueError(f"tokenizer: {file!r} is not a tokenizer.json ({e})") from None


def _eos_id(tokenizer, path: str, eos_token: Optional[str], config_eos: Optional[str]) -> int:
    names = [eos_token] if eos_token is not None else ([config_eos] if config_eos else [])
    names += [] if eos_token is not None else list(_EOS_NAMES)
    for name in names:
        i = tokenizer.token_to_id(name)
        if i is not None:
            return int(i)
    if eos_token is not None:
        raise ValueError(f"eos_token: {eos_token!r} is not a token of {path!r}")
    raise ValueError(
        f"eos_token: no EOS token found in {path!r} (tried {', '.join(names)}); "
        "give eos_token= (--eos-token) or eos=False (--no-eos)"
    )


def _texts(path: str, text_key: str) -> Iterator[str]:
    """The documents of one input file, in order."""
    name = path[:-3] if path.endswith(".gz") else path
    if name.endswith((".jsonl", ".json")):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            for line_no, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"inputs: {path}:{line_no}: not JSON ({e.msg})") from None
                text = row.get(text_key) if isinstance(row, dict) else None
                if not isinstance(text, str):
                    raise ValueError(f"text_key: {path}:{line_no} has no string under {text_key!r}")
                yield text
    elif path.endswith(".parquet"):
        import pyarrow.parquet as pq

        table = pq.ParquetFile(path)
        if text_key not in table.schema_arrow.names:
            raise ValueError(
                f"text_key: {path} has no column {text_key!r} (columns: "
                f"{', '.join(table.schema_arrow.names)})"
            )
        for batch in table.iter_batches(columns=[text_key], batch_size=_BATCH):
            for text in batch.column(0).to_pylist():
                if not isinstance(text, str):
                    raise ValueError(f"text_key: {path} has a non-string {text_key!r} value")
                yield text
    else:
        with open(path, encoding="utf-8") as f:
            yield f.read()


def _batches(texts: Iterator[str]) -> Iterator[List[str]]:
    batch: List[str] = []
    for t in texts:
        batch.append(t)
        if len(batch) == _BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


_worker_tokenizer = None


def _init_worker(path: str) -> None:
    global _worker_tokenizer
    _worker_tokenizer = _load_tokenizer(path)[0]


def _encode(batch: List[str]) -> List[List[int]]:
    return [e.ids for e in _worker_tokenizer.encode_batch(batch)]


def prepare(
    inputs: Sequence[str],
    tokenizer: str,
    output: str,
    *,
    format: str = "megatron",
    text_key: str = "text",
    eos: bool = True,
    eos_token: Optional[str] = None,
    workers: int = 1,
    token_dtype: Optional[str] = None,
    progress: Optional[bool] = None,
) -> Dict[str, Any]:
    """Tokenizes ``inputs`` (paths, in order) with ``tokenizer`` (a
    ``tokenizer.json`` or a transformers tokenizer directory; local files only)
    and writes ``output`` (a prefix): ``format="megatron"`` writes
    ``output.bin`` + ``output.idx`` (read by megatron-core's IndexedDataset and
    by :func:`shardkit.open_source`), ``"npy"`` writes ``output.tokens.npy`` +
    ``output.offsets.npy``. ``token_dtype``: default uint16 when the vocabulary
    has fewer than 65500 ids, else int32 (Megatron's rule). ``workers`` > 1
    encodes in that many processes (same output). ``progress``: a line on
    stderr refreshed with documents/s and tokens/s (default: when stderr is a
    terminal; otherwise one line per input file unless ``False``).

    Returns ``{"documents", "tokens", "format", "files"}``. Errors:
    ValueError naming the parameter (``inputs``, ``tokenizer``, ``text_key``,
    ``eos_token``, ``format``, ``workers``, ``output``, ``tokens``)."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    inputs = [os.fspath(p) for p in inputs]
    if not inputs:
        raise ValueError("inputs: no input files")
    for p in inputs:
        if not os.path.isfile(p):
            raise ValueError(f"inputs: {p!r} is not a file")
    workers = _core._index(workers, "workers")
    if workers < 1:
        raise ValueError(f"workers: {workers} must be at least 1")
    tokenizer_path = os.fspath(tokenizer)
    tok, config_eos = _load_tokenizer(tokenizer_path)
    eos_id = _eos_id(tok, tokenizer_path, eos_token, config_eos) if eos else None
    if token_dtype is None:
        token_dtype = _core._TokenWriter.dtype_for_vocabulary(tok.get_vocab_size())
    writer = _core._TokenWriter(os.fspath(output), format=format, token_dtype=token_dtype)
    terminal = progress is None and sys.stderr.isatty()
    documents = tokens = 0
    start = time.monotonic()
    pool = None
    if workers > 1:
        pool = multiprocessing.get_context("fork").Pool(
            workers, initializer=_init_worker, initargs=(tokenizer_path,)
        )
    try:
        for path in inputs:
            file_start, file_docs, file_tokens = time.monotonic(), 0, 0
            batches = _batches(_texts(path, text_key))
            encoded = (
                pool.imap(_encode, batches, chunksize=1)
                if pool is not None
                else ([e.ids for e in tok.encode_batch(b)] for b in batches)
            )
            for ids_list in encoded:
                for ids in ids_list:
                    if eos_id is not None:
                        ids.append(eos_id)
                    writer.add(np.asarray(ids, dtype=np.int64))
                    file_docs += 1
                    file_tokens += len(ids)
                if terminal:
                    seconds = max(time.monotonic() - start, 1e-9)
                    sys.stderr.write(
                        f"\rprepare: {path}: {documents + file_docs} documents, "
                        f"{(documents + file_docs) / seconds:,.0f} documents/s, "
                        f"{(tokens + file_tokens) / seconds / 1e6:.2f} M tokens/s "
                    )
                    sys.stderr.flush()
            documents += file_docs
            tokens += file_tokens
            if progress is not False and not terminal:
                seconds = time.monotonic() - file_start
                print(
                    f"prepare: {path}: {file_docs} documents, {file_tokens} tokens, "
                    f"{seconds:.1f} s",
                    file=sys.stderr,
                )
    finally:
        if pool is not None:
            pool.terminate()
    if terminal:
        sys.stderr.write("\n")
    result = writer.finish()
    result["format"] = format
    return result


# The messages start with the parameter; the command line names its flag.
_FLAGS = {
    "inputs": "--input",
    "tokenizer": "--tokenizer",
    "output": "--output",
    "format": "--format",
    "text_key": "--text-key",
    "eos_token": "--eos-token",
    "workers": "--workers",
    "token_dtype": "--token-dtype",
    "tokens": "--input",
}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``shardkit prepare`` / ``python -m shardkit prepare``: prints the result
    (one JSON object with ``--json``); a bad argument exits 2 with one line."""
    parser = argparse.ArgumentParser(
        prog="shardkit prepare",
        description="Tokenize raw text (JSONL, Parquet, plain text) into Megatron .bin/.idx "
        "(default) or shardkit's .npy pair.",
    )
    parser.add_argument("--input", nargs="+", required=True, metavar="FILE")
    parser.add_argument("--tokenizer", required=True, metavar="PATH")
    parser.add_argument("--output", required=True, metavar="PREFIX")
    parser.add_argument("--format", default="megatron", choices=["megatron", "npy"])
    parser.add_argument("--text-key", default="text")
    parser.add_argument("--no-eos", action="store_true", help="do not append EOS")
    parser.add_argument("--eos-token", default=None, help="the EOS token (default: found)")
    parser.add_argument("--token-dtype", default=None, help="default: from the vocabulary")
    parser.add_argument("--workers", type=int, default=1, metavar="N")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    try:
        result = prepare(
            args.input,
            args.tokenizer,
            args.output,
            format=args.format,
            text_key=args.text_key,
            eos=not args.no_eos,
            eos_token=args.eos_token,
            workers=args.workers,
            token_dtype=args.token_dtype,
            progress=False if args.quiet else None,
        )
    except ValueError as e:
        message = str(e).replace("\n", "\\n")
        name, _, rest = message.partition(":")
        if name in _FLAGS:
            message = _FLAGS[name] + ":" + rest
        print(f"shardkit prepare: {message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['documents']} documents, {result['tokens']} tokens -> "
            + ", ".join(result["files"])
        )
    return 0
