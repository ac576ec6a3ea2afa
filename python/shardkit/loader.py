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

from typing import Any, Optional, Sequence

from shardkit import _core
from shardkit._core import TrainAudit, TrainStep, TrainSummary
from shardkit._loader_base import LoaderSurface as _LoaderSurface
from shardkit._loader_base import core_source as _core_source
from shardkit._loader_base import loader_options as _loader_options
from shardkit._mixture_loader import MixtureTokenLoader as _MixtureTokenLoader
from shardkit.train_plan import TrainPlan

__all__ = ["TokenLoader", "TrainPlan", "TrainAudit", "TrainStep", "TrainSummary"]


class TokenLoader(_LoaderSurface):
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
        equal_steps: bool = _core._loader_option_defaults["equal_steps"],
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
        read: str = _core._loader_option_defaults["read"],
    ) -> None:
        # share_plan: one planner per host (local rank 0); local_rank None: the
        # core reads LOCAL_RANK (shardkit/loader/host_plan.h).
        if local_rank is None:
            local_rank = -1
        # The arguments named as the core's LoaderOptions fields go to the core as
        # they are: its one table checks and reads them (python/src/arguments.cc).
        given = locals()
        self.roles, options = _loader_options(
            {k: v for k, v in given.items() if k in _core._loader_option_names}
            | {"roles": roles, "mesh": mesh, "data_axes": data_axes}
        )
        self._source = _core_source(tokens, offsets, _core._str(token_dtype, "token_dtype"))
        self._loader = _core._TokenLoader(self._source, **options)
        self._options = self._loader.options  # as the core holds them (Whale's switches read)

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
        shuffle: bool = False,
        equal_steps: bool = _core._loader_option_defaults["equal_steps"],
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
        keyword arguments are :class:`TokenLoader`'s (not ``shuffle=True``,
        ``shard_files`` or ``mode="continuous"``: the mixture is the order)."""
        mixture = dict(by=by, block=block, schedule=schedule, interpolation=interpolation,
                       schedule_unit=schedule_unit, repeat=repeat, samples=samples)  # fmt: skip
        options.update(seq_len=seq_len, batch_size=batch_size, seed=seed, epoch=epoch)
        options.update(shuffle=shuffle, equal_steps=equal_steps)
        return _MixtureTokenLoader(  # type: ignore[return-value]
            sources, weights, token_dtype=token_dtype, mixture=mixture, options=options
        )

    def __repr__(self) -> str:
        o = self._options
        return (
            f"TokenLoader(documents={self.num_documents}, seq_len={o['seq_len']}, "
            f"batch_size={o['batch_size']}, rank={o['rank']}/{o['world_size']}, "
            f"worker={o['worker']}/{o['num_workers']}, epoch={self.epoch})"
        )


# A mixture loader is a TokenLoader to isinstance (it was a subclass): the two
# share their surface by composition over one base (no import cycle).
TokenLoader.register(_MixtureTokenLoader)
