"""Token sources from the formats users already have (the loader area).

``open_source`` opens shardkit's ``.npy`` pairs, a Megatron-LM
IndexedDataset (``PREFIX.bin`` + ``PREFIX.idx``), OLMo / Dolma token files,
Hugging Face Arrow (``save_to_disk``) or Parquet token columns as one
:class:`TokenSource`:
memory-mapped, validated when opened (every error names the file, the field and
the value), lengths from the index alone. The format is decided from the files
unless given; the rule and every check are the C++ core's
(``shardkit/loader/source_formats.h``, ``megatron_source.h``,
``olmo_source.h``, ``arrow_source.h``; Parquet is decoded by pyarrow here). A source goes
wherever tokens and offsets go: ``TokenLoader(source, ...)``,
``TokenDataset``, ``TokenLoader.mixture([...])``, ``TrainPlan.from_source``.

>>> import os, tempfile, numpy as np, shardkit
>>> d = tempfile.mkdtemp()
>>> np.save(os.path.join(d, "a.tokens.npy"), np.arange(10, dtype=np.int32))
>>> np.save(os.path.join(d, "a.offsets.npy"), np.array([0, 4, 4, 10]))
>>> source = shardkit.open_source(os.path.join(d, "a.tokens.npy"))
>>> source.num_documents, source.num_tokens, source.lengths().tolist()
(3, 10, [4, 0, 6])
>>> source.document(2).tolist()
[4, 5, 6, 7, 8, 9]
>>> loader = shardkit.TokenLoader(source, seq_len=8, batch_size=1, shuffle=False)
>>> sorted(d for b in loader for d in b["documents"].tolist())
[0, 1, 2]
"""

from __future__ import annotations

import functools
import os
from typing import Any, List, Optional, Sequence, Union

import numpy as np

from shardkit import _core
from shardkit._forward import Forwarded as _Forwarded

__all__ = ["TokenSource", "open_source"]

PathLike = Union[str, "os.PathLike[str]"]


class TokenSource:
    """Tokenised documents numbered ``0 .. num_documents - 1``, read in place.

    Made by :func:`open_source`. Immutable and thread-safe; memory is the
    mapped files plus O(number of files). Pickles as the paths it was opened
    from (a DataLoader worker reopens them).
    """

    def __init__(self, core: Any, reopen: tuple) -> None:
        self._core = core
        self._reopen = reopen  # (paths, keyword arguments of open_source) for pickling

    num_documents = _Forwarded[int]("_core.num_documents")
    num_tokens = _Forwarded[int]("_core.num_tokens")
    num_files = _Forwarded[int](
        "_core.num_parts",
        doc="""Parts of the source: one per Megatron prefix, token file, Arrow
        record batch or Parquet file.""",
    )
    fingerprint = _Forwarded[int](
        "_core.fingerprint",
        doc="""The data fingerprint every loader state of this source carries
        (documents, tokens, files and every document's length): a resume
        against other data is refused.""",
    )

    def lengths(self) -> np.ndarray:
        """Every document's length in tokens (int64), from the index alone."""
        return self._core.lengths()

    def document(self, d: int) -> np.ndarray:
        """The tokens of document ``d`` (int32, a copy); IndexError outside
        ``[0, num_documents)``."""
        return self._core.document(_core._index(d, "document"))

    def __len__(self) -> int:
        return self.num_documents

    def __reduce__(self) -> Any:
        paths, kwargs = self._reopen
        return (functools.partial(open_source, **kwargs), (paths,))

    def __repr__(self) -> str:
        return (
            f"TokenSource(num_documents={self.num_documents}, num_tokens={self.num_tokens}, "
            f"num_files={self.num_files})"
        )


def _paths(path: Any) -> List[str]:
    if isinstance(path, (str, os.PathLike)):
        return [os.fspath(path)]
    if isinstance(path, Sequence) and not isinstance(path, (bytes, bytearray)):
        out = []
        for k, p in enumerate(path):
            if not isinstance(p, (str, os.PathLike)):
                raise ValueError(f"path: entry {k} is a {type(p).__name__}, expected a path")
            out.append(os.fspath(p))
        return out
    raise ValueError(f"path: expected a path or a list of paths, got {type(path).__name__}")


def _read_parquet(path: str, column: str) -> Any:
    """A Parquet file's list-of-ids column as an in-memory core source: pyarrow
    decodes the pages (a copy: Parquet is compressed and encoded, it cannot be
    viewed in place); the core validates the offsets as for any array."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as e:  # pragma: no cover - requirements-dev.txt installs it
        raise ValueError(f"format: 'parquet' needs pyarrow ({e})") from None
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as e:
        raise ValueError(f"path: {path}: not a readable Parquet file ({e})") from None
    if column not in schema.names:
        names = ", ".join(repr(n) for n in schema.names) or "none"
        raise ValueError(f"column: {path}: no column {column!r}; the columns are {names}")
    kind = schema.field(column).type
    if not (
        (pa.types.is_list(kind) or pa.types.is_large_list(kind))
        and pa.types.is_integer(kind.value_type)
    ):
        raise ValueError(
            f"column: {path}: {column!r} is {kind}, expected a list or large_list of integers"
        )
    try:
        array = pq.read_table(path, columns=[column]).column(column).combine_chunks()
    except (OSError, pa.ArrowException) as e:
        raise ValueError(f"path: {path}: cannot read column {column!r} ({e})") from None
    if array.null_count:
        row = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
        raise ValueError(
            f"column: {path}: {column!r} row {row} is null "
            "(a document is a list of ids; drop or fill null rows first)"
        )
    values = array.flatten()
    if values.null_count:
        raise ValueError(f"column: {path}: {column!r} holds {values.null_count} null ids")
    offsets = np.asarray(array.offsets, dtype=np.int64)
    offsets = offsets - offsets[0]
    tokens = values.to_numpy(zero_copy_only=False)
    if tokens.dtype.name not in ("uint16", "int32", "uint32"):
        if tokens.size and (int(tokens.min()) < -(2**31) or int(tokens.max()) >= 2**31):
            bad = int(np.flatnonzero((tokens < -(2**31)) | (tokens >= 2**31))[0])
            raise ValueError(
                f"tokens: {path}: token {bad} is {int(tokens[bad])}; ids must fit in int32"
            )
        tokens = tokens.astype(np.int32)
    return _core._TokenSource.from_arrays(np.ascontiguousarray(tokens), offsets)


def _is_parquet(path: str, format: Optional[str]) -> bool:
    return format == "parquet" or (format is None and path.endswith(".parquet"))


def open_source(
    path: Union[PathLike, Sequence[PathLike]],
    *,
    format: Optional[str] = None,
    token_dtype: Optional[str] = None,
    eos_token_id: Optional[int] = None,
    bos_token_id: Optional[int] = None,
    column: str = "input_ids",
    vocab_size: Optional[int] = None,
) -> TokenSource:
    """Opens ``path`` (a path, or a list of paths read as one source in the
    order given) as a :class:`TokenSource`.

    ``format``: ``"npy"`` (a directory of ``<stem>.tokens.npy`` +
    ``<stem>.offsets.npy`` pairs, or one ``<stem>.tokens.npy``),
    ``"megatron"`` (``PREFIX.bin`` + ``PREFIX.idx``; ``path`` is ``PREFIX`` or
    either file), ``"olmo"`` (an OLMo / Dolma headerless token file, see below),
    ``"arrow"`` (a ``datasets`` ``save_to_disk`` folder, or ``.arrow`` files:
    the rows of the list-of-ids column ``column``, viewed in the mapped files),
    ``"parquet"`` (the same column of ``.parquet`` files, decoded into memory by
    pyarrow) or ``None``: decided from the files (a ``save_to_disk`` folder or
    ``*.arrow`` is arrow; ``*.parquet`` is parquet; another directory is npy;
    ``PATH.idx`` + ``PATH.bin`` is megatron; ``*.tokens.npy`` is npy; another
    ``*.npy`` without the NumPy header is olmo).
    ``token_dtype``: the dtype of raw (not ``.npy``) npy-format token files
    (default ``"int32"``) and of OLMo files (``uint8``/``uint16``/``uint32``/
    ``uint64``; or give ``vocab_size`` and the smallest that holds it is
    used, OLMo-core's rule). Megatron tokens of every integer dtype are
    delivered as int32 (int64 ids outside that range are refused when
    opened); float dtypes are refused.

    OLMo documents: with ``eos_token_id`` an EOS scan (each EOS ends a
    document; with ``bos_token_id`` only an EOS followed by the BOS, or the
    file's last token; tokens after the last boundary are one more document),
    done once and cached beside the file (``PATH.shardkit-docs-eos<E>``, reused
    only when it proves itself against the data, else rebuilt); without it
    the ``start,end`` rows of the sibling ``.csv.gz`` (PATH with ``.npy``
    replaced).

    Errors: ValueError naming ``path`` (and the file, field and value),
    ``format``, ``column`` or the keyword at fault.
    """
    paths = _paths(path)
    if format is not None:
        format = _core._str(format, "format")
    column = _core._str(column, "column")
    if token_dtype is not None:
        token_dtype = _core._str(token_dtype, "token_dtype")
    ids = {}
    for name, value in (
        ("eos_token_id", eos_token_id),
        ("bos_token_id", bos_token_id),
        ("vocab_size", vocab_size),
    ):
        if value is not None:
            ids[name] = _core._index(value, name)
    if not paths:
        raise ValueError("path: no paths; give at least one")
    core_format = None if format == "parquet" else format
    opened = []
    run: List[str] = []  # consecutive paths the core opens in one call

    def flush() -> None:
        if run:
            opened.append(
                _core._TokenSource.open_source(
                    list(run), format=core_format, token_dtype=token_dtype, column=column, **ids
                )
            )
            run.clear()

    for p in paths:
        if _is_parquet(p, format):
            flush()
            opened.append(_read_parquet(p, column))
        else:
            run.append(p)
    flush()
    core = opened[0] if len(opened) == 1 else _core._TokenSource.concat(opened)
    kwargs = dict(format=format, token_dtype=token_dtype, column=column, **ids)
    return TokenSource(core, (paths, kwargs))
