"""TrainPlan: equal steps for training, one global pack plan dealt to ranks
(the core's shardkit/loader/train_plan.h; re-exported by shardkit.loader)."""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Optional, Tuple

from shardkit import _core
from shardkit._arrays import int64_array as _int64_array
from shardkit._core import TrainAudit, TrainStep, TrainSummary
from shardkit._forward import Forwarded as _Forwarded
from shardkit.layout import data_rank_and_world, resolve_roles
from shardkit.sources import TokenSource, open_source

__all__ = ["TrainPlan", "TrainAudit", "TrainStep", "TrainSummary"]

Row = List[Tuple[int, int, int]]


class TrainPlan:
    """Equal steps for training, every document once per epoch.

    One global pack plan dealt to ranks: the epoch's documents in one global order
    (per ``(seed, epoch)``) go through one streaming packer into rows of
    ``seq_len`` tokens, and every global step deals ``world_size * batch_size``
    rows so that each rank gets exactly ``batch_size`` of them, balanced by cost.
    Every rank computes the same plan from the lengths alone.

    >>> import shardkit
    >>> lengths = [300, 1200, 50, 700, 20, 900, 410, 64, 5000, 128]
    >>> plan = shardkit.TrainPlan(lengths, seq_len=1024, batch_size=2, world_size=2)
    >>> plan.num_steps                                  # the same on every rank
    3
    >>> [len(plan.step(r, s)) for r in range(2) for s in range(plan.num_steps)]
    [2, 2, 2, 2, 2, 2]
    >>> rows = [row for s in range(3) for r in range(2) for row in plan.step(r, s)]
    >>> sum(length for row in rows for (document, start, length) in row) == sum(lengths)
    True
    >>> audit = plan.audit()
    >>> audit.exactly_once, audit.steps, audit.filler_rows   # filler: last step only
    (True, 3, 3)
    >>> state = plan.state_dict(1)                       # before step 1, on every rank
    >>> rest = shardkit.TrainPlan(lengths, seq_len=1024, batch_size=1, world_size=3, state=state)
    >>> rest.num_steps                                   # elastic: the rest of the epoch
    2

    ``mode``: ``"pad"`` (the last step is completed with filler rows, the only
    ones), ``"continuous"`` (no epoch boundary: the next epoch's rows follow,
    no filler) or ``"drop"`` (the final partial step is dropped and counted).
    ``cost``: ``"tokens"`` or ``"squared"`` (sum of squared piece lengths) for
    the per-step balance. ``micro_batches``: rows per rank per step are
    ``batch_size * micro_batches``. ``algorithm`` / ``buffer`` /
    ``max_images`` / ``max_sequences`` / ``oversize`` (``split`` or ``drop``)
    choose the streaming packer. ``state`` (a :meth:`state_dict`) continues a
    run, with any world size and batch shape; ``position`` starts after that
    many packs of the epoch's stream.

    ``cp_size`` C > 1 (context parallelism, docs/loader.md): every document is
    packed at its length rounded up to ``cp_granularity`` (default 2C; seq_len
    must be a multiple of it), so each row still fits seq_len once every piece
    is padded for the per-document head-tail split (``cp_strategy``); with
    ``cost="squared"`` the rows are balanced by the causal work of the busiest
    CP rank. The pieces keep their real lengths.
    """

    def __init__(
        self,
        lengths,
        seq_len: int,
        batch_size: int,
        world_size: Optional[int] = None,
        *,
        mode: str = "pad",
        shuffle: bool = True,
        seed: int = 0,
        epoch: int = 0,
        algorithm: str = "bfd",
        buffer: Optional[int] = None,
        cost: str = "tokens",
        images=None,
        max_images: Optional[int] = None,
        oversize: str = "split",
        micro_batches: int = 1,
        max_sequences: Optional[int] = None,
        position: int = 0,
        state: Optional[Dict[str, Any]] = None,
        roles: Any = None,
        mesh: Any = None,
        data_axes: Any = None,
        cp_size: int = 1,
        cp_strategy: str = "head_tail",
        cp_granularity: Optional[int] = None,
        data_fingerprint: int = 0,
    ) -> None:
        # data_fingerprint: what identifies the documents beyond their lengths (a
        # TokenSource's .fingerprint, which from_source passes), so that the states of
        # a loader over that source resume this plan and those of other data do not.
        # roles (a shardkit.DataRoles) or mesh= and data_axes=: the plan's ranks are
        # the data-parallel ranks (world_size = roles.dp_size; step(roles.dp_rank, s)).
        self.roles = resolve_roles(roles, mesh, data_axes)
        world_size = data_rank_and_world(None, world_size, self.roles)[1]
        if world_size is None:
            raise ValueError("world_size: required unless roles= is given")
        if state is not None and not isinstance(state, (str, dict)):
            raise ValueError(
                f"state: expected a dict from state_dict(), got {type(state).__name__}"
            )
        self._lengths = _int64_array(lengths, "lengths")
        self._images = None if images is None else _int64_array(images, "images")
        # Every option is checked and read by the core's one table (bindings.h).
        self._plan = _core._TrainPlan(
            self._lengths,
            self._images,
            None if state is None else state if isinstance(state, str) else json.dumps(state),
            _core._uint64(data_fingerprint, "data_fingerprint"),
            seq_len=seq_len,
            batch_size=batch_size,
            world_size=world_size,
            micro_batches=micro_batches,
            mode=mode,
            shuffle=shuffle,
            seed=seed,
            epoch=epoch,
            position=position,
            algorithm=algorithm,
            buffer=buffer,
            cost=cost,
            max_images=max_images,
            max_sequences=max_sequences,
            oversize=oversize,
            cp_size=cp_size,
            cp_strategy=cp_strategy,
            cp_granularity=cp_granularity,
        )

    @classmethod
    def from_source(
        cls, source: Any, seq_len: int, batch_size: int, world_size: Optional[int] = None, **kwargs
    ) -> "TrainPlan":
        """The plan over the documents of ``source`` (a :class:`shardkit.TokenSource`
        or anything :func:`shardkit.open_source` takes): ``TrainPlan(source.lengths(),
        ...)``, the lengths read from the index alone, bound to the source's data
        fingerprint (so the states of a TokenLoader over the same source resume it).
        Keyword arguments are :class:`TrainPlan`'s."""
        if not isinstance(source, TokenSource):
            source = open_source(source)
        kwargs.setdefault("data_fingerprint", source.fingerprint)
        return cls(source.lengths(), seq_len, batch_size, world_size, **kwargs)

    # -- the plan (read from the core's plan) -----------------------------------
    num_steps = _Forwarded[int](
        "_plan.num_steps",
        doc="""Steps of this plan (``step(rank, s)`` for s < num_steps), the same on
        every rank: the epoch's, or the rest of them for a plan from a state.""",
    )
    first_step = _Forwarded[int](
        "_plan.first_step",
        doc="""The step of the epoch that step 0 of this plan is: ``position // (world_size
        * rows_per_rank)`` (0 from the epoch's start).""",
    )
    epoch_steps = _Forwarded[int](
        "_plan.epoch_steps",
        doc="""Steps of the whole epoch as this plan counts them: ``first_step + num_steps``
        (a resumed run's step numbers and count stay those of the epoch).""",
    )
    world_size = _Forwarded[int]("_plan.world_size")
    rows_per_rank = _Forwarded[int](
        "_plan.rows_per_rank",
        doc="Rows per rank per step: batch_size * micro_batches.",
    )
    epoch = _Forwarded[int]("_plan.epoch")
    fingerprint = _Forwarded[int](
        "_plan.fingerprint",
        doc="""A hash of the whole plan; ranks compare it once at start
        (``shardkit.torch.check_plan(plan)``).""",
    )

    def describe(self) -> str:
        return self._plan.describe()

    @property
    def summary(self) -> TrainSummary:
        """Totals of the construction pass, a read-only :class:`TrainSummary`:
        packs, tokens, lower_bound, filler_rows, dropped, dropped_packs,
        dropped_tokens, per-step imbalance (max_step_imbalance,
        max_full_step_imbalance, mean_step_imbalance)."""
        return self._plan.summary()

    def step(self, rank: int, step: int) -> List[Row]:
        """Rank's rows of ``step``: ``rows_per_rank`` lists of
        ``(document, start, length)`` pieces; a filler row is ``[]``.
        Random access replays the packer from the nearest checkpoint; use
        :meth:`steps` to read a rank's steps in order."""
        return self._plan.step(_core._index(rank, "rank"), _core._index(step, "step")).rows

    def step_info(self, rank: int, step: int) -> TrainStep:
        """:meth:`step` as a read-only :class:`TrainStep`: ``rows``, ``tokens``
        (real tokens of the rank), ``filler_rows``, ``row_packs`` (stream
        index, -1 filler), ``row_epochs``, ``cost`` and the step's
        ``imbalance``."""
        return self._plan.step(_core._index(rank, "rank"), _core._index(step, "step"))

    def steps(self, rank: int, start: int = 0, *, info: bool = False) -> Iterator[Any]:
        """Rank's steps from ``start`` in order, streamed at planning speed
        (continuous mode: without end)."""
        reader = _core._TrainReader(
            self._plan, _core._index(rank, "rank"), _core._index(start, "start")
        )
        while True:
            t = reader.next()
            if t is None:
                return
            yield t if info else t.rows

    # -- state ------------------------------------------------------------------
    def state_dict(self, step: Optional[int] = None) -> Dict[str, Any]:
        """Where a run stands before ``step`` (default: after the last step),
        the same on every rank: ``{"version", "kind", "epoch", "position",
        "stream", "checksum"}`` (sealed: an edited state is refused). Pass it
        as ``state=`` to continue, with any world size or batch shape."""
        at = self.num_steps if step is None else _core._index(step, "step")
        return json.loads(self._plan.state_at(at))

    def audit(self) -> TrainAudit:
        """Replays the plan and checks it against the lengths: exactly once,
        equal steps, filler in the last step only."""
        return self._plan.audit()

    def __repr__(self) -> str:
        return self.describe().replace("TrainPlan(", f"TrainPlan(num_steps={self.num_steps}, ", 1)
