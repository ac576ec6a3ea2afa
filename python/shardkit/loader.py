"""TokenLoader: sharded, shuffled, packed token batches from memory-mapped files.

The C++ core reads the documents of this rank's share of one global shuffled
order, packs them into rows of ``seq_len`` tokens and collates fixed-shape
batches on background threads; Python receives numpy arrays that view the
batch buffers (no copy). The GIL is released while C++ works.

>>> import numpy as np, shardkit
>>> tokens = np.arange(1, 31, dtype=np.int32)           # 30 tokens
>>> offsets = np.array([0, 4, 10, 12, 30])              # 4 documents
>>> loader = shardkit.TokenLoader(tokens, offsets, seq_len=8, batch_size=2,
...                               shuffle=False)
>>> batch = next(iter(loader))
>>> batch["input_ids"].shape, batch["input_ids"].dtype.name
((2, 8), 'int64')
>>> seen = [d for b in [batch, *loader] for d in b["documents"].tolist()]
>>> sorted(set(seen))                                   # one epoch, every document
[0, 1, 2, 3]
>>> loader.state_dict()["epoch"]                        # the next pass is epoch 1
1
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from shardkit import _core
from shardkit._core import Mixture, TrainAudit, TrainStep, TrainSummary
from shardkit._states import require_state as _require_state
from shardkit.eval import rank_and_world
from shardkit.layout import data_rank_and_world, resolve_roles
from shardkit.sources import TokenSource, open_source
from shardkit.train_plan import TrainPlan

__all__ = ["TokenLoader", "TrainPlan", "TrainAudit", "TrainStep", "TrainSummary"]

PathLike = Union[str, "os.PathLike[str]"]


def _is_paths(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, (str, os.PathLike)) for v in value
    )


def _open_source(tokens: Any, offsets: Any, token_dtype: str):
    if isinstance(tokens, TokenSource):
        if offsets is not None:
            raise ValueError("offsets: must be None with a TokenSource")
        return tokens._core
    if offsets is None and (isinstance(tokens, (str, os.PathLike)) or _is_paths(tokens)):
        # Anything open_source takes: a directory, a Megatron prefix, a
        # <stem>.tokens.npy, or a list of them (the format from the files).
        return open_source(tokens, token_dtype=token_dtype)._core
    if isinstance(tokens, (str, os.PathLike)):
        path = os.fspath(tokens)
        if os.path.isdir(path):
            raise ValueError(f"offsets: must be None when tokens is a directory ({path!r})")
        if not isinstance(offsets, (str, os.PathLike)):
            raise ValueError("offsets: must be a path when tokens is a path")
        return _core._TokenSource.open(path, os.fspath(offsets), token_dtype=token_dtype)
    if offsets is None:
        raise ValueError("offsets: required with a token array")
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"tokens: expected a 1-D array, got shape {tokens.shape}")
    if tokens.dtype.name not in ("uint16", "int32", "uint32"):
        if tokens.dtype.kind not in "iu":
            raise ValueError(f"tokens: dtype {tokens.dtype} is not an integer type")
        if tokens.size and (tokens.min() < 0 or tokens.max() > np.iinfo(np.int32).max):
            raise ValueError(f"tokens: {tokens.dtype} values outside int32 range")
        tokens = tokens.astype(np.int32)
    tokens = np.ascontiguousarray(tokens)
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or offsets.dtype.kind not in "iu":
        raise ValueError(
            f"offsets: expected a 1-D integer array, got {offsets.dtype} of shape {offsets.shape}"
        )
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    return _core._TokenSource.from_arrays(tokens, offsets)


class TokenLoader:
    """Packed, fixed-shape token batches of one rank (or one dataloader worker).

    ``tokens`` / ``offsets``: .npy (or raw) file paths, or numpy arrays; document
    ``d`` is ``tokens[offsets[d]:offsets[d + 1]]``. ``tokens`` may also be a
    :class:`shardkit.TokenSource` or anything :func:`shardkit.open_source`
    takes (then ``offsets=None``): a directory of ``<stem>.tokens.npy`` +
    ``<stem>.offsets.npy`` pairs (numbered file by file in stem order), a
    Megatron ``PREFIX`` (``PREFIX.bin`` + ``PREFIX.idx``), or a list of them.

    Equal steps (``equal_steps=True``, the default: this is the training
    loader): batches follow the global :class:`TrainPlan` of the epoch, so
    every rank yields the same number of batches (``num_steps``) and every
    piece of every document is in exactly one batch of one rank. ``mode``:
    ``"pad"`` (the last step may hold filler rows, all masked), ``"continuous"``
    (no epoch boundary, no filler) or ``"drop"`` (the final partial step is
    dropped and counted); ``cost`` (``"tokens"`` / ``"squared"``) balances each
    step across ranks. Worker ``k`` of ``num_workers`` yields the rank's steps
    k, k + K, ...

    ``equal_steps=False``: each consumer packs its own share (consumer ``rank +
    worker * world_size`` reads entries c, c + C, ... of the global order);
    ranks then get different batch counts (an evaluation or single-process
    loader). Documents longer than ``seq_len`` are split into pieces
    (``oversize="split"``) or dropped (``"drop"``). ``algorithm`` and ``buffer``
    choose the streaming packer (next_fit, ffd, bfd, balanced).
    ``shard_files=True`` (per-rank only: with ``equal_steps=False``; with equal steps it is
    refused, ValueError naming ``shard_files``) assigns whole files to consumers by Whale's policies
    instead (``whale_unbalanced_io_slicing``, ``whale_drop_last_files``; when
    left ``None`` they follow ``WHALE_UNBALANCED_IO_SLICING`` /
    ``WHALE_DROP_LAST_FILES`` as :func:`shardkit.whale_plan` does;
    ``file_policy`` says which rule was applied).

    Iterating yields one epoch of dicts of numpy arrays: ``input_ids``,
    ``labels``, ``position_ids``, ``document_ids`` ([batch_size, seq_len]),
    ``cu_seqlens`` (flattened batch, padding runs included), ``documents`` /
    ``starts`` / ``lengths`` / ``rows`` (every piece of the batch),
    ``row_tokens`` (real tokens per row: 0 for a filler row), ``step``,
    ``max_seqlen`` and, with ``block_mask=True``, the dense block-diagonal
    ``block_mask`` [batch_size, seq_len, seq_len] (causal unless
    ``causal=False``). The last batch is padded, never dropped.

    Context parallelism (``cp_size`` C > 1, ``cp_rank`` r; or from ``roles``
    with cp axes): every array is CP rank r's slice ``[batch_size, seq_len //
    C]`` of the rows (per-document head-tail, seq_len a multiple of 2C or of
    ``cp_granularity``), with ``cp_index`` (each slot's position in the full
    row, -1 on padding), ``cu_seqlens_padded`` (the full rows' THD
    boundaries, every document padded) and local ``cu_seqlens``; the CP
    ranks of a group get the same rows. ``cp_strategy="balanced"`` keeps short
    documents whole on one CP rank, ``"ptrr"`` deals tokens round-robin
    (docs/context_parallel.md). See docs/loader.md.

    Epochs and resume, one rule: the epoch is part of the state. When an epoch
    runs out the loader stands at the start of the next one (``state_dict()``
    says so, the same on every rank with equal steps), so the next ``for``
    loop is the next epoch. ``set_epoch(e)`` moves to the start of epoch ``e``
    unless the loader already stands in epoch ``e`` (just resumed, or the
    previous epoch ran out), then it keeps its position. So both
    ``load_state_dict(s); set_epoch(s["epoch"])`` and a loop that calls
    ``set_epoch`` every epoch continue exactly. ``epoch`` is the epoch of the
    current pass (once a pass ran out, the epoch it ran), so
    ``set_epoch(loader.epoch + 1)`` after a pass is the next epoch too. With
    equal steps ``num_steps`` counts the whole epoch and batches carry
    ``step``, the step of the epoch, also after a resume (``first_step``: the
    step the next pass starts at).

    ``state_dict()`` is a small JSON-serialisable dict. With equal steps it is
    ``{"version", "kind": "train_plan", "epoch", "position", "stream", "checksum"}``, the
    same on every rank, and loads on any world size, batch size or worker
    count. Per-rank: ``load_state_dict(state)`` continues exactly where it was
    taken (same world size), or, given the states of *all* consumers of a run
    (a list) or their merge (``TokenLoader.merge_states``), continues the
    epoch on any world size and worker count.

    The arrays view buffers that are reused once every array of a batch has
    been released; copy them if you keep them beyond the step. ``num_threads``
    background threads collate ``prefetch`` batches ahead (with one more
    thread planning ahead of them when ``num_threads >= 1``; 0: everything in
    the calling thread); batches do not depend on either.
    """

    def __init__(
        self,
        tokens: Any,
        offsets: Any = None,
        *,
        seq_len: int,
        batch_size: int,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        shuffle: bool = True,
        seed: int = 0,
        epoch: int = 0,
        algorithm: str = "bfd",
        oversize: str = "split",
        buffer: Optional[int] = None,
        worker: int = 0,
        num_workers: int = 1,
        pad_token_id: int = 0,
        ignore_index: int = -100,
        padding_side: str = "right",
        num_threads: int = 1,
        prefetch: int = 2,
        token_dtype: str = "int32",
        shard_files: bool = False,
        whale_unbalanced_io_slicing: Optional[bool] = None,
        whale_drop_last_files: Optional[bool] = None,
        roles: Any = None,
        mesh: Any = None,
        data_axes: Any = None,
        equal_steps: bool = True,
        mode: str = "pad",
        cost: str = "tokens",
        block_mask: bool = False,
        causal: bool = True,
        cp_size: Optional[int] = None,
        cp_rank: Optional[int] = None,
        cp_granularity: Optional[int] = None,
        cp_strategy: str = "head_tail",
        share_plan: bool = False,
        local_rank: Optional[int] = None,
    ) -> None:
        # share_plan: one planner per host (local rank 0); local_rank None: the
        # core reads LOCAL_RANK (shardkit/loader/host_plan.h).
        if local_rank is None:
            local_rank = -1
        # roles (a shardkit.DataRoles) or mesh= and data_axes=: shard by the data-parallel
        # rank and size, so tensor/pipeline replicas read identical batches.
        self.roles = resolve_roles(roles, mesh, data_axes)  # None, or the DataRoles
        # Context parallelism: from the roles' cp axes unless given.
        if cp_size is None:
            cp_size = getattr(self.roles, "cp_size", 1) if self.roles is not None else 1
        if cp_rank is None:
            cp_rank = getattr(self.roles, "cp_rank", 0) if self.roles is not None else 0
        rank, world_size = rank_and_world(*data_rank_and_world(rank, world_size, self.roles))
        # The arguments named as the core's LoaderOptions fields go to the core as
        # they are: its one table checks and reads them (python/src/arguments.cc).
        given = locals()
        options = {k: given[k] for k in _core._loader_option_names if k in given and k != "epoch"}
        self._source = self._open(tokens, offsets, _core._str(token_dtype, "token_dtype"))
        self._options = options
        self._loader = self._make(epoch=epoch)
        # The options as the core holds them (Whale's switches read once, here).
        self._options = {k: v for k, v in self._loader.options.items() if k != "epoch"}

    def _open(self, tokens: Any, offsets: Any, token_dtype: str) -> Any:
        return _open_source(tokens, offsets, token_dtype)

    def _epoch_source(self) -> Any:
        """What the core loader reads each epoch: one source here (a mixture
        loader gives each epoch its window of the mixture)."""
        return self._source

    def _make(self, **kwargs: Any) -> Any:
        """A core loader over this loader's source(s) and options."""
        return _core._TokenLoader(self._epoch_source(), **kwargs, **self._options)

    @classmethod
    def mixture(
        cls,
        sources: Sequence[Any],
        weights: Any,
        *,
        seq_len: int,
        batch_size: int,
        by: str = "tokens",
        samples: Optional[int] = None,
        block: Optional[int] = None,
        seed: int = 0,
        schedule: Any = None,
        interpolation: str = "step",
        schedule_unit: str = "samples",
        repeat: Any = True,
        epoch: int = 0,
        token_dtype: str = "int32",
        **options: Any,
    ) -> "TokenLoader":
        """A loader over several token sources mixed with ``weights``: the order
        stage is a :class:`shardkit.Mixture` (``by``, ``block``, ``seed``,
        ``schedule``, ``interpolation``, ``schedule_unit``, ``repeat`` as there;
        ``by="tokens"``, the default, makes the weights shares of the tokens the
        model sees; ``schedule_unit="tokens"`` puts the schedule's positions in
        tokens).
        ``sources``: a list of ``(tokens, offsets)`` pairs (paths or arrays),
        :class:`shardkit.TokenSource` objects or paths :func:`shardkit.open_source`
        takes (a directory, a Megatron prefix). Epoch ``e`` reads the mixture's samples
        ``[e * samples, (e + 1) * samples)`` (``samples`` default: the whole
        mixture when a source does not repeat, else the sum of the sources'
        document counts), so every source's walk continues across epochs.
        Everything after the order is the loader's: sharding, packing, equal
        steps (``mode`` "pad" or "drop"), workers, roles, state. Batches add
        ``sources`` and ``items`` (which source and which of its documents each
        piece is; ``documents`` are positions in the epoch's window). Other
        keyword arguments are :class:`TokenLoader`'s (not ``shuffle``,
        ``shard_files`` or ``mode="continuous"``)."""
        return _MixtureTokenLoader(
            sources,
            weights,
            by=by,
            samples=samples,
            block=block,
            seed=seed,
            schedule=schedule,
            interpolation=interpolation,
            schedule_unit=schedule_unit,
            repeat=repeat,
            epoch=epoch,
            token_dtype=token_dtype,
            options=dict(seq_len=seq_len, batch_size=batch_size, **options),
        )

    # -- properties -------------------------------------------------------------
    @property
    def num_documents(self) -> int:
        return self._source.num_documents

    @property
    def rank(self) -> int:
        return self._options["rank"]

    @property
    def world_size(self) -> int:
        return self._options["world_size"]

    @property
    def epoch(self) -> int:
        """The epoch of the current pass; when a pass has run out, the epoch it
        ran (the loader then stands at the start of the next one, which
        ``state_dict()`` names), so ``set_epoch(epoch + 1)`` after a pass and a
        plain next ``for`` loop both continue with the next epoch."""
        return self._loader.epoch

    @property
    def _standing_epoch(self) -> int:
        """The epoch the next batch comes from (the state's)."""
        return self._loader.standing_epoch

    @property
    def file_policy(self) -> Optional[_core.WhaleChoice]:
        """With ``shard_files``: the Whale rule applied to the files (a
        :class:`shardkit.WhaleChoice`: ``remainder``, ``shuffle``, ``reason``,
        ``warning``); ``None`` otherwise."""
        return self._loader.file_policy

    @property
    def dropped(self) -> int:
        """Documents dropped so far this epoch (oversize="drop")."""
        return self._loader.dropped

    @property
    def equal_steps(self) -> bool:
        return self._options["equal_steps"]

    @property
    def num_steps(self) -> Optional[int]:
        """Equal steps: the steps of the whole epoch, the same on every rank and
        after a resume (batches carry ``step`` = first_step, first_step + 1, ...,
        so a schedule keyed on the step continues); None per rank."""
        return self._loader.epoch_steps

    @property
    def first_step(self) -> Optional[int]:
        """Equal steps: the step of the epoch the next pass starts at (0 at the
        epoch's start; after a resume, the steps before the state, counted as
        ``TrainPlan.first_step``); None per rank. A pass yields ``num_steps -
        first_step`` batches."""
        return self._loader.first_step

    @property
    def plan_summary(self) -> Optional[TrainSummary]:
        """Equal steps: the plan's :class:`TrainSummary` (packs, tokens,
        lower_bound, filler_rows, dropped, per-step imbalance), as
        :attr:`TrainPlan.summary`; None for a loader packing per rank."""
        return self._loader.train_summary()

    # -- iteration --------------------------------------------------------------
    def __iter__(self) -> Iterator[Dict[str, Any]]:
        # One pass: several threads iterating at once share its batches (each to
        # one of them) and all end with it; the core then stands in the next epoch.
        loader = self._loader
        pass_id = loader.begin_pass()
        while (batch := loader.next(pass_id)) is not None:
            yield batch

    def set_epoch(self, epoch: int) -> None:
        """Moves to the start of ``epoch``, unless the loader already stands in
        ``epoch`` (resumed, or the previous epoch ran out): then it keeps its
        position (see the class docstring)."""
        self._loader.set_epoch(epoch)

    @property
    def fingerprint(self) -> int:
        """Equal steps: the plan's fingerprint; ranks compare it once at start
        (``shardkit.torch.check_plan(loader)``) so that a rank built with
        another configuration fails instead of hanging."""
        return self._plan_field(self._loader.train_fingerprint)

    def describe(self) -> str:
        return self._plan_field(self._loader.train_describe)

    @staticmethod
    def _plan_field(value: Any) -> Any:
        if value is None:
            raise ValueError("equal_steps: this loader packs per rank; it has no global plan")
        return value

    # -- state ------------------------------------------------------------------
    def state_at(self, steps: int) -> Dict[str, Any]:
        """Equal steps: the state of this rank after ``steps`` batches of this
        pass (whichever dataloader worker produced them; the batch of step
        ``s`` is the pass's ``s - first_step``-th), the same on every rank."""
        return self._loader.train_state_at(_core._index(steps, "steps"))

    def state_dict(self) -> Dict[str, Any]:
        """The state after the last batch delivered: JSON-serialisable."""
        return self._loader.state()

    def load_state_dict(self, state: Union[Dict[str, Any], Sequence[Dict[str, Any]]]) -> None:
        """Continue from ``state``: this consumer's own state (exact resume), a
        merged state, or the list of the states of every consumer of a run (this
        consumer's own among them, else their merge: resume on any world size /
        worker count)."""
        _require_state(state)
        self._loader.restore(list(state) if isinstance(state, (list, tuple)) else state)

    @staticmethod
    def merge_states(states: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
        """One state per consumer (rank x worker) of a run -> a merged state from
        which any number of consumers delivers the rest of the epoch exactly once
        (mixture loader states merge as such, keeping their order)."""
        return _core._merge_loader_states(list(states))

    def __repr__(self) -> str:
        o = self._options
        return (
            f"TokenLoader(documents={self.num_documents}, seq_len={o['seq_len']}, "
            f"batch_size={o['batch_size']}, rank={o['rank']}/{o['world_size']}, "
            f"worker={o['worker']}/{o['num_workers']}, epoch={self.epoch})"
        )


def _open_sources(sources: Any, token_dtype: str) -> List[Any]:
    """The core sources of ``sources``: (tokens, offsets) pairs or paths."""
    if isinstance(sources, (str, os.PathLike)) or not isinstance(sources, Sequence):
        raise ValueError("sources: expected a list of (tokens, offsets) pairs or directories")
    opened = []
    for k, entry in enumerate(sources):
        if isinstance(entry, (tuple, list)):
            if len(entry) != 2:
                raise ValueError(
                    f"sources: entry {k} has {len(entry)} items; expected (tokens, offsets)"
                )
            opened.append(_open_source(entry[0], entry[1], token_dtype))
        else:
            opened.append(_open_source(entry, None, token_dtype))
    return opened


class _MixtureTokenLoader(TokenLoader):
    """A TokenLoader whose order stage is a :class:`shardkit.Mixture` over several
    sources (built by :meth:`TokenLoader.mixture`): it forwards to the core's
    mixture loader (shardkit/loader/mixture_loader.h), which owns the order, the
    epochs, the state, resume with changed weights and the mixture's rules."""

    def __init__(
        self,
        sources: Sequence[Any],
        weights: Any,
        *,
        by: str,
        samples: Optional[int],
        block: Optional[int],
        seed: int,
        schedule: Any,
        interpolation: str,
        schedule_unit: str,
        repeat: Any,
        epoch: int,
        token_dtype: str,
        options: Dict[str, Any],
    ) -> None:
        # The mixture loader's rules (shuffle off, no file sharding, no
        # continuous mode, at least one source) are the core's
        # (shardkit/loader/mixture_loader.cc); here only the arguments' shapes.
        for name in ("tokens", "offsets"):
            if name in options:
                raise ValueError(f"{name}: not an argument of a mixture loader (give sources)")
        self._sources = _open_sources(sources, token_dtype)
        self._mixture_args = dict(
            weights=weights,
            by=by,
            block=block,
            schedule=schedule,
            interpolation=interpolation,
            schedule_unit=schedule_unit,
            repeat=repeat,
            samples=samples,
        )
        options.setdefault("shuffle", False)  # the mixture is the order
        super().__init__(None, None, seed=seed, epoch=epoch, **options)

    def _open(self, tokens: Any, offsets: Any, token_dtype: str) -> Any:
        return None  # the sources are opened above; the core makes each epoch's view

    def _make(self, **kwargs: Any) -> Any:
        return _core._MixtureLoader(self._sources, **self._mixture_args, **kwargs, **self._options)

    @property
    def mixture(self) -> Mixture:
        """The mixture the loader reads now (after a resume with other weights,
        the one from the change on)."""
        return self._loader.mixture

    @property
    def file_policy(self) -> Optional[_core.WhaleChoice]:
        return None  # no file sharding with a mixture

    @property
    def num_steps(self) -> Optional[int]:
        return self._loader.num_steps

    # -- state: the loader's state and the order it reads ------------------------
    def state_dict(self) -> Dict[str, Any]:
        """``{"version", "kind": "mixture_loader", "epoch", "samples", "mixture",
        "loader", "checksum"}``: the loader's state (``"loader"``) and the
        mixture(s) its epoch reads, JSON-serialisable (weights as strings,
        exact), sealed: an edited state is refused."""
        return self._loader.state()

    def state_at(self, steps: int) -> Dict[str, Any]:
        return self._loader.state_at(_core._index(steps, "steps"))

    def load_state_dict(self, state: Union[Dict[str, Any], Sequence[Dict[str, Any]]]) -> None:
        """Continue from ``state`` (as :meth:`TokenLoader.load_state_dict`). When
        this loader's weights (or schedule) differ from the ones the state's run
        used, the run changes weights at the state's read point: the documents
        of the epoch the plan has already read stay as they were, the rest of
        the epoch (and later epochs) follow this loader's weights, every source
        continuing from its consumed count (nothing repeated or skipped within
        a source). ``last_resume`` says ``(changed, read, at)``."""
        _require_state(state)
        self._loader.load(state)

    @property
    def last_resume(self) -> Optional[Tuple[bool, int, int]]:
        """After :meth:`load_state_dict`: ``(changed, read, at)``; None before."""
        return self._loader.last_resume

    @property
    def changes(self) -> List[int]:
        """Global sample positions where the weights changed (on resume), from
        the current epoch's window on."""
        return self._loader.order.changes

    def window(self, epoch: Optional[int] = None) -> Tuple[int, int]:
        """(first, count): the mixture samples epoch ``epoch`` (default: the
        current one) reads, [first, first + count)."""
        return self._loader.order.window(self._standing_epoch if epoch is None else epoch)

    def window_samples(self, epoch: Optional[int] = None) -> Tuple[np.ndarray, np.ndarray]:
        """(sources, items) of every document of the epoch's window: document
        ``d`` of a batch is item ``items[d]`` of source ``sources[d]`` (16 bytes
        per sample of the window; batches carry their own ``sources`` and
        ``items``)."""
        e = self._standing_epoch if epoch is None else epoch
        _, count = self.window(e)
        return self._loader.locate(e, 0, count)

    @property
    def num_documents(self) -> int:
        return self._loader.num_documents

    @property
    def samples_per_epoch(self) -> int:
        return self._loader.samples

    def __repr__(self) -> str:
        return (
            f"TokenLoader.mixture(sources={self.mixture.num_sources}, "
            f"samples={self.samples_per_epoch}, seq_len={self._options['seq_len']}, "
            f"batch_size={self._options['batch_size']}, "
            f"rank={self.rank}/{self.world_size}, epoch={self.epoch})"
        )
