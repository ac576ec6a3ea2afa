"""Packing: variable-length samples into fixed-capacity sequences.

>>> import shardkit
>>> p = shardkit.pack([5, 3, 4, 2, 6], capacity=10)          # best-fit decreasing
>>> p.packs, p.num_packs, p.lower_bound, p.efficiency
([[4, 2], [0, 1, 3]], 2, 2, 1.0)
>>> shardkit.pack([5, 3, 4, 2, 6], 10, algorithm="next_fit").packs   # keeps order
[[0, 1], [2, 3], [4]]
>>> p = shardkit.pack([7, 30, 2], 10, oversize="split")      # 30 -> 10 + 10 + 10
>>> p.packs, p.dropped
([[1], [1], [1], [0, 2]], 0)
>>> shardkit.pack([5, 5, 5, 3, 3, 3, 2, 2, 2], 10, max_sequences=3).num_packs   # bfd
4
>>> shardkit.pack([5, 5, 5, 3, 3, 3, 2, 2, 2], 10, algorithm="histogram", max_sequences=3).packs
[[0, 3, 6], [1, 4, 7], [2, 5, 8]]
>>> shardkit.pack([6, 6, 3], 10).packs                  # ties: the last filled pack
[[0], [1, 2]]
>>> shardkit.pack([6, 6, 3], 10, compat="trl").packs    # TRL's rows: the first
[[0, 2], [1]]
>>> p = shardkit.pack([4, 4, 4, 4], 16, images=[3, 3, 0, 0], max_images=4)
>>> [sorted(x) for x in p.packs]
[[0], [1, 2, 3]]

Collating packs of tokenised samples into fixed-shape rows:

>>> c = shardkit.PackedCollator(seq_len=6)
>>> batch = c([[[11, 12, 13], [21, 22]]])        # one pack of two samples
>>> batch["input_ids"].tolist(), batch["labels"].tolist()
([[11, 12, 13, 21, 22, 0]], [[-100, 12, 13, -100, 22, -100]])
>>> batch["position_ids"].tolist(), batch["cu_seqlens"].tolist()
([[0, 1, 2, 0, 1, 0]], [0, 3, 5, 6])
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

import numpy as np

from shardkit import _core
from shardkit._arrays import int64_array as _int64
from shardkit._core import Packing, RankSchedule
from shardkit._forward import Forwarded as _Forwarded
from shardkit._states import require_state as _require_state

__all__ = [
    "Packing",
    "RankSchedule",
    "pack",
    "StreamingPacker",
    "pack_stream",
    "balance_ranks",
    "collate_packing",
    "collate_rows",
    "PackedCollator",
    "cp_rank_work",
    "cp_restore_index",
    "cp_document_padding",
]


def pack(
    lengths,
    capacity: int,
    *,
    algorithm: str = "bfd",
    images=None,
    max_images: Optional[int] = None,
    buffer: Optional[int] = None,
    oversize: str = "drop",
    max_sequences: Optional[int] = None,
    compat: str = "none",
) -> Packing:
    """Packs items of ``lengths`` tokens into packs of at most ``capacity`` tokens.

    algorithm: ``next_fit`` (keeps order), ``ffd``, ``bfd`` (default),
    ``balanced`` (as few packs as bfd or fewer, loads evened out; takes
    histogram packing when that needs fewer packs) or ``histogram`` (packs
    chosen from the length histogram; for ``max_sequences`` budgets and few
    distinct lengths; no images).
    images / max_images: images per item and per pack; max_sequences: items
    per pack; buffer: pack through a bounded buffer of that many items, in
    input order (streaming); oversize: ``drop`` (counted in ``dropped``),
    ``error`` or ``split`` (text only). An int64 array is used without a copy.
    compat: ``"trl"`` (with ``bfd``) gives the rows of TRL's
    ``pack_dataset(strategy="bfd")`` pack for pack (``"bfd_split"`` with
    ``oversize="split"``): ties among packs with equal room go to the one that
    reached it first, empty items are dropped, split pieces are ordered with
    the items, and ``buffer=B`` packs every B items on their own as
    pack_dataset's map batches do (B = its batch_size, 1000 by default).
    Returns a :class:`Packing` (``packs``, ``num_packs``, ``efficiency``,
    ``lower_bound``, ``dropped``; flat ``offsets`` / ``items`` / ``starts`` /
    ``lengths`` arrays).
    """
    lengths = _int64(lengths, "lengths")
    image_array = None if images is None else _int64(images, "images")
    return _core._pack(
        lengths,
        capacity,
        algorithm,
        image_array,
        max_images,
        max_sequences,
        oversize,
        buffer,
        compat,
    )


class StreamingPacker:
    """Items in one at a time, packs out as they close; memory bounded by ``buffer``.

    >>> sp = StreamingPacker(10, algorithm="bfd", buffer=4)
    >>> for i, n in enumerate([6, 5, 4, 3, 2]):
    ...     sp.push(i, n)
    >>> sp.pop()                                     # (item, start, length, images)
    [(0, 0, 6, 0), (2, 0, 4, 0)]
    >>> sp.finish()
    >>> [p for p in iter(sp.pop, None)]
    [[(1, 0, 5, 0), (3, 0, 3, 0), (4, 0, 2, 0)]]

    ``state_dict()`` is a plain dict (JSON-serialisable); ``load_state_dict(s)``
    (or ``StreamingPacker(..., state=s)``) continues exactly where it was taken.
    """

    def __init__(
        self,
        capacity: int,
        *,
        algorithm: str = "bfd",
        max_images: Optional[int] = None,
        max_sequences: Optional[int] = None,
        oversize: str = "drop",
        buffer: Optional[int] = None,
        state: Optional[dict] = None,
    ) -> None:
        self._options = (
            _core._index(capacity, "capacity"),
            _core._str(algorithm, "algorithm"),
            _core._optional_index(max_images, "max_images"),
            _core._optional_index(max_sequences, "max_sequences"),
            _core._str(oversize, "oversize"),
            _core._optional_index(buffer, "buffer"),
        )
        self._packer = _core._StreamingPacker(*self._options, state)
        self.capacity = self._options[0]

    def push(self, item: int, length: int, images: int = 0) -> None:
        self._packer.push(
            _core._index(item, "item"),
            _core._index(length, "length"),
            _core._index(images, "images"),
        )

    def push_many(self, items, lengths, images=None) -> None:
        self._packer.push_many(
            _int64(items, "items"),
            _int64(lengths, "lengths"),
            None if images is None else _int64(images, "images"),
        )

    def finish(self) -> None:
        self._packer.finish()

    def pop(self):
        """The oldest closed pack as [(item, start, length, images), ...], or None."""
        return self._packer.pop()

    pending = _Forwarded[int]("_packer.pending")
    buffered = _Forwarded[int]("_packer.buffered")
    efficiency = _Forwarded[float](
        "_packer.efficiency", doc="Real tokens / (closed packs x capacity) so far."
    )

    def take_dropped(self) -> list:
        return self._packer.take_dropped()

    def state_dict(self) -> dict:
        """Buffered and pending pieces and counters: a JSON-serialisable dict."""
        return self._packer.state()

    def load_state_dict(self, state: dict) -> None:
        """Continue exactly where ``state`` (from :meth:`state_dict`) was taken;
        the packer keeps its options."""
        self._packer = _core._StreamingPacker(*self._options, _require_state(state))


def _whole(value: Any, name: str, i: int) -> int:
    """One length of a stream: an integer, or a float that is a whole number
    (as pack() takes arrays); int(1.5) silently packed 1 token."""
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if not math.isfinite(v) or v != math.floor(v) or abs(v) >= 2.0**63:
            raise ValueError(f"{name}: item {i} is {v!r}, not a whole number below 2**63")
        return int(v)
    return _core._index(value, name)


def pack_stream(
    lengths: Iterable, capacity: int, *, images: Optional[Iterable] = None, **options
) -> Iterator[list]:
    """Packs an iterable of lengths lazily; yields each pack, as soon as it
    closes, as a list of (item, start, length, images), item = position in the
    stream. Options as for :class:`StreamingPacker` (buffer, algorithm, ...).

    >>> list(pack_stream(iter([3, 9, 2, 8]), 10, algorithm="next_fit"))
    [[(0, 0, 3, 0)], [(1, 0, 9, 0)], [(2, 0, 2, 0), (3, 0, 8, 0)]]
    """
    packer = StreamingPacker(capacity, **options)
    for value, name in ((lengths, "lengths"), (images, "images")):
        if name == "lengths" or value is not None:
            try:
                iter(value)
            except TypeError:
                raise TypeError(
                    f"{name}: expected an iterable of integers, got {type(value).__name__} {value!r}"
                ) from None
    image_iter = iter(images) if images is not None else None
    for i, n in enumerate(lengths):
        image = _whole(next(image_iter), "images", i) if image_iter is not None else 0
        packer.push(i, _whole(n, "lengths", i), image)
        yield from iter(packer.pop, None)
    packer.finish()
    yield from iter(packer.pop, None)


def balance_ranks(
    packing: Union[Packing, Sequence[float]],
    world_size: int,
    *,
    packs_per_rank: int = 1,
    cost: str = "tokens",
    drop_last: bool = False,
) -> RankSchedule:
    """Deals packs to ``world_size`` ranks: every rank gets exactly
    ``packs_per_rank`` packs per step, and each step's cost is even across ranks.

    cost: ``tokens`` or ``squared`` (sum of squared document lengths, the
    attention cost); or pass the per-pack costs directly. Returns a
    :class:`RankSchedule` (read-only): ``assignment`` [steps, world,
    packs_per_rank] (pack ids, -1 = padding pack), ``rank_costs`` [steps,
    world], ``num_steps``, ``max_step_imbalance``, ``max_full_step_imbalance``,
    ``total_imbalance``, ``padding_packs``, ``dropped_packs`` (drop_last).

    >>> s = balance_ranks([10, 1, 9, 2, 8, 3, 7, 4], 2, packs_per_rank=2)
    >>> s.assignment.tolist(), s.max_step_imbalance
    ([[[0, 6], [2, 4]], [[7, 1], [5, 3]]], 0.0)
    """
    if isinstance(packing, Packing):
        costs = _core._pack_costs(packing, cost)
    else:
        try:
            costs = [float(c) for c in np.asarray(packing, dtype=np.float64).ravel()]
        except (TypeError, ValueError) as e:
            raise type(e)(f"costs: expected numbers, got {packing!r:.80} ({e})") from None
    return _core._balance_ranks(
        costs,
        _core._index(world_size, "world_size"),
        _core._index(packs_per_rank, "packs_per_rank"),
        _core._bool(drop_last, "drop_last"),
    )


def collate_rows(
    row_offsets,
    items,
    starts,
    lengths,
    images,
    tokens,
    offsets,
    *,
    seq_len: int,
    padding_side: str,
    pad_token_id: int,
    ignore_index: int,
    block_mask: bool,
    causal: bool,
) -> dict:
    """Fixed-shape rows from pieces of documents (what :class:`PackedCollator`
    and :func:`collate_packing` call): row r holds pieces
    ``row_offsets[r]:row_offsets[r + 1]``; piece j is tokens ``starts[j]`` ..
    ``starts[j] + lengths[j]`` of document ``items[j]``, and document d is
    ``tokens[offsets[d]:offsets[d + 1]]``; ``images`` is empty or one count per
    piece. Returns the arrays described in :class:`PackedCollator`.

    >>> b = collate_rows([0, 2], [1, 0], [0, 1], [1, 2], [], [5, 6, 7, 8], [0, 3, 4],
    ...                  seq_len=5, padding_side="right", pad_token_id=0,
    ...                  ignore_index=-100, block_mask=False, causal=True)
    >>> b["input_ids"].tolist(), b["document_ids"].tolist()
    ([[8, 6, 7, 0, 0]], [[0, 1, 1, -1, -1]])
    """
    return _core._collate(
        _int64(row_offsets, "packs"),
        _int64(items, "packs"),
        _int64(starts, "packs"),
        _int64(lengths, "packs"),
        _int64(images, "images"),
        _int64(tokens, "tokens"),
        _int64(offsets, "offsets"),
        block_mask,
        seq_len=seq_len,
        padding_side=padding_side,
        pad_token_id=pad_token_id,
        ignore_index=ignore_index,
        causal=causal,
    )


def collate_packing(
    packing: Packing,
    tokens,
    offsets,
    *,
    packs: Optional[Sequence[int]] = None,
    seq_len: Optional[int] = None,
    padding_side: str = "right",
    pad_token_id: int = 0,
    ignore_index: int = -100,
    block_mask: bool = False,
    causal: bool = True,
) -> dict:
    """Rows for packs of a :class:`Packing` (all, or the ids in ``packs``) from a
    flat token array: item d is ``tokens[offsets[d]:offsets[d+1]]``; split
    pieces take their slice. seq_len defaults to the packing's capacity.
    Returns numpy arrays (see :class:`PackedCollator`).
    """
    ids = np.arange(packing.num_packs) if packs is None else _int64(packs, "packs")
    bounds = packing.offsets
    if ids.size and (ids.min() < 0 or ids.max() >= packing.num_packs):
        raise IndexError(f"packs: ids must lie in [0, {packing.num_packs})")
    entries = [np.arange(bounds[p], bounds[p + 1]) for p in ids]
    sel = np.concatenate(entries) if entries else np.zeros(0, dtype=np.int64)
    row_offsets = np.concatenate([[0], np.cumsum([len(e) for e in entries])]).astype(np.int64)
    return collate_rows(
        row_offsets,
        packing.items[sel],
        packing.starts[sel],
        packing.lengths[sel],
        np.zeros(0, dtype=np.int64),
        tokens,
        offsets,
        seq_len=packing.capacity if seq_len is None else _core._index(seq_len, "seq_len"),
        padding_side=padding_side,
        pad_token_id=pad_token_id,
        ignore_index=ignore_index,
        block_mask=block_mask,
        causal=causal,
    )


class PackedCollator:
    """Turns packs of tokenised samples into fixed-shape numpy arrays.

    Call it on a list of packs; a pack is a list of samples; a sample is a
    sequence of token ids, or a dict with ``input_ids`` (and optionally
    ``images``, any sized sequence). Returns a dict of numpy arrays:
    ``input_ids``, ``labels`` (-100 at document starts and on padding),
    ``position_ids`` (restarting per document), ``document_ids`` (-1 on
    padding), ``attention_mask`` [batch, seq_len]; ``cu_seqlens`` (int32,
    flash-attention varlen, over the flattened batch, padding runs as their
    own sequences) and ``max_seqlen``; ``block_mask`` [batch, seq_len, seq_len]
    when ``block_mask=True``; ``image_sample`` [images, 3] = (row, document,
    sample index within the batch). A pack longer than seq_len is an error,
    never truncated.
    """

    def __init__(
        self,
        seq_len: int,
        *,
        padding_side: str = "right",
        pad_token_id: int = 0,
        ignore_index: int = -100,
        block_mask: bool = False,
        causal: bool = True,
    ):
        # The collation options by the core's names (CollateOptions, read by its
        # one table) and block_mask (which arrays to build); the core converts
        # and checks them at construction, not at the first batch: collating
        # no rows validates them and builds nothing.
        self.options = dict(
            seq_len=seq_len,
            padding_side=padding_side,
            pad_token_id=pad_token_id,
            ignore_index=ignore_index,
            causal=causal,
        )
        self.block_mask = _core._bool(block_mask, "block_mask")
        empty, zero = np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
        self.rows(zero, empty, empty, empty, empty, empty, zero)

    # The options read back by their names, as before they were one dict.
    seq_len = property(lambda self: self.options["seq_len"])
    padding_side = property(lambda self: self.options["padding_side"])
    pad_token_id = property(lambda self: self.options["pad_token_id"])
    ignore_index = property(lambda self: self.options["ignore_index"])
    causal = property(lambda self: self.options["causal"])

    def __call__(self, packs: Sequence[Sequence[Any]]) -> dict:
        try:
            return self._collate(packs)
        except (TypeError, KeyError) as e:
            # 'int' object is not iterable and the like, named
            raise TypeError(
                f"packs: expected packs of samples (token id lists or dicts with input_ids), "
                f"got {packs!r:.80} ({type(e).__name__}: {e})"
            ) from None

    def _collate(self, packs: Sequence[Sequence[Any]]) -> dict:
        chunks, lengths, images, row_offsets = [], [], [], [0]
        for pack_ in packs:
            for sample in pack_:
                ids = sample["input_ids"] if isinstance(sample, dict) else sample
                ids = np.asarray(ids).reshape(-1)
                if ids.size and ids.dtype.kind not in "iub":
                    raise TypeError(f"a sample's token ids are {ids.dtype}, not integers")
                chunks.append(ids)
                lengths.append(ids.size)
                imgs = sample.get("images") if isinstance(sample, dict) else None
                images.append(0 if imgs is None else len(imgs))
            row_offsets.append(len(lengths))
        tokens = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        n = len(lengths)
        return self.rows(
            np.asarray(row_offsets, dtype=np.int64),
            np.arange(n),
            np.zeros(n, dtype=np.int64),
            np.asarray(lengths, dtype=np.int64),
            np.asarray(images, dtype=np.int64),
            tokens,
            offsets,
        )

    def rows(self, row_offsets, items, starts, lengths, images, tokens, offsets) -> dict:
        """:func:`collate_rows` with this collator's options: rows from pieces of
        documents given as arrays (row r holds pieces row_offsets[r]:row_offsets[r+1])."""
        return collate_rows(
            row_offsets,
            items,
            starts,
            lengths,
            images,
            tokens,
            offsets,
            block_mask=self.block_mask,
            **self.options,
        )


def _cp_row(lengths: Any, seq_len: int, cp_size: int, cp_granularity: Optional[int]) -> dict:
    """One CP row's arguments as the CP bindings take them (by keyword)."""
    return dict(
        lengths=_int64(lengths, "lengths").tolist(),
        seq_len=_core._index(seq_len, "seq_len"),
        cp_size=_core._index(cp_size, "cp_size"),
        cp_granularity=_core._optional_index(cp_granularity, "cp_granularity"),
    )


def cp_rank_work(
    lengths: Any,
    seq_len: int,
    cp_size: int,
    split: str = "document_head_tail",
    cp_granularity: Optional[int] = None,
) -> list:
    """The causal attention work (keys attended by each real query) of every CP
    rank for one row of documents of these lengths, under one split:
    ``"contiguous"``, ``"head_tail"`` (document-blind), ``"document_head_tail"``
    (shardkit's default layout), ``"balanced"`` (``cp_strategy="balanced"``: short
    documents whole on one CP rank) or ``"ptrr"`` (tokens dealt round-robin, mirrored
    passes); rules: shardkit/packing/context_parallel.h,
    docs/context_parallel.md.

    >>> import shardkit
    >>> shardkit.cp_rank_work([64], 64, 2, "contiguous")
    [528.0, 1552.0]
    >>> shardkit.cp_rank_work([64], 64, 2)
    [1040.0, 1040.0]
    >>> shardkit.cp_rank_work([5, 5, 2], 20, 2)   # head-tail: the padding on rank 0
    [7.0, 26.0]
    >>> shardkit.cp_rank_work([5, 5, 2], 20, 2, "balanced")  # 5 + 2 | 5, whole
    [18.0, 15.0]
    """
    row = _cp_row(lengths, seq_len, cp_size, cp_granularity)
    return _core._cp_rank_work(**row, split=_core._str(split, "split"))


def cp_restore_index(
    lengths: Any,
    seq_len: int,
    cp_size: int,
    cp_granularity: Optional[int] = None,
    cp_strategy: str = "head_tail",
) -> np.ndarray:
    """The inverse of the batches' ``cp_index`` for one row of documents of these
    lengths: for every position t of the unsplit row, ``r * (seq_len // cp_size) + j``
    when slot j of CP rank r holds token t, -1 past the row's tokens (torch's
    restore index): the ranks' slices concatenated and gathered at it give the
    row back.

    >>> import shardkit
    >>> shardkit.cp_restore_index([5, 2], 12, 2).tolist()   # padded to 8 and 4
    [0, 1, 6, 7, 8, 4, 10, -1, -1, -1, -1, -1]
    """
    row = _cp_row(lengths, seq_len, cp_size, cp_granularity)
    return _core._cp_restore_index(**row, cp_strategy=_core._str(cp_strategy, "cp_strategy"))


def cp_document_padding(
    lengths: Any,
    seq_len: int,
    cp_size: int,
    cp_granularity: Optional[int] = None,
    cp_strategy: str = "head_tail",
) -> int:
    """The padding tokens inside the documents of one row split over ``cp_size``
    CP ranks: every document padded to the granularity under ``"head_tail"``;
    under ``"balanced"`` only the documents it splits (whole ones are not
    padded); none under ``"ptrr"``. The rest of the row's padding is its
    padding run.

    >>> import shardkit
    >>> shardkit.cp_document_padding([5, 5, 2], 20, 2)   # 8 + 8 + 4 - 12
    8
    >>> shardkit.cp_document_padding([5, 5, 2], 20, 2, cp_strategy="balanced")
    0
    """
    row = _cp_row(lengths, seq_len, cp_size, cp_granularity)
    return _core._cp_document_padding(**row, cp_strategy=_core._str(cp_strategy, "cp_strategy"))
