"""PyTorch adapter of TokenLoader (re-exported by shardkit.torch).

``TokenDataset`` is an IterableDataset; batches are dicts of torch tensors made
with ``torch.from_numpy`` (no copy in the process that built them).

Equal steps (the default): every rank follows the epoch's global TrainPlan, so
every rank yields the same number of batches; DataLoader worker ``k`` of ``K``
produces the rank's steps k, k + K, ..., so the DataLoader yields them in
order. ``TokenDataLoader.state_dict()`` is then one small dict, the same on
every rank, that resumes on any world size, batch size or worker count. When
torch.distributed is initialized, the first iteration compares the plan's
fingerprint across ranks (one all_gather): a rank built with another
configuration raises PlanMismatchError on every rank instead of hanging.

Per rank (``equal_steps=False``): worker ``k`` on rank ``r`` is loader consumer
``r + k * W``; ``state_dict()`` lists the state of every worker after the
batches handed out, and the states of all ranks (gathered) resume elastically.

Epochs, one rule (docs/loader.md): the epoch is part of the state. When a pass
over the DataLoader runs out, the dataset stands at the start of the next
epoch; ``set_epoch(e)`` moves to the start of epoch ``e`` unless the dataset
already stands in epoch ``e`` (resumed, or the previous epoch ran out).
``persistent_workers=True`` is refused: persistent workers keep their own copy
of the dataset and would replay the same epoch.

>>> import numpy as np
>>> from shardkit.torch import TokenDataset, TokenDataLoader
>>> tokens, offsets = np.arange(40, dtype=np.int32), np.arange(0, 41, 5)
>>> ds = TokenDataset(tokens, offsets, seq_len=16, batch_size=1, rank=0, world_size=1)
>>> loader = TokenDataLoader(ds, num_workers=0)
>>> batch = next(iter(loader))
>>> batch["input_ids"].shape, batch["input_ids"].dtype
(torch.Size([1, 16]), torch.int64)
>>> state = loader.state_dict()              # the same on every rank
>>> state["kind"], state["epoch"], state["position"]
('train_plan', 0, 1)
"""

from __future__ import annotations

import functools
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import torch.distributed as dist
import torch.utils.data as tud

from shardkit import _core
from shardkit._states import require_state as _require_state
from shardkit._torch_eval import check_plan
from shardkit._torch_packing import to_torch
from shardkit.eval import rank_and_world
from shardkit.layout import data_rank_and_world, resolve_roles
from shardkit.loader import TokenLoader

__all__ = ["TokenDataset", "TokenDataLoader"]

State = Dict[str, Any]


def _inner(state: Any) -> Any:
    """The loader's own state inside a mixture loader's state (which wraps it
    with its order); any other state as it is."""
    if isinstance(state, dict) and state.get("kind") == "mixture_loader":
        return state.get("loader", state)
    return state


class TokenDataset(tud.IterableDataset):
    """TokenLoader as a torch IterableDataset, sharded over ranks and DataLoader
    workers. Takes TokenLoader's arguments (``worker`` / ``num_workers`` come
    from the DataLoader). Each batch carries ``"state"``: the worker's state after
    it (TokenDataLoader strips it and keeps it). :meth:`mixture` builds one over
    several sources mixed with weights (``TokenLoader.mixture``)."""

    def __init__(
        self,
        tokens: Any,
        offsets: Any = None,
        *,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        epoch: int = 0,
        roles: Any = None,
        mesh: Any = None,
        data_axes: Any = None,
        **options: Any,
    ) -> None:
        super().__init__()
        # roles (a shardkit.DataRoles) or mesh= and data_axes=: shard by the
        # data-parallel rank and size; replicas read identical batches.
        self.data_roles = resolve_roles(roles, mesh, data_axes)
        rank, world_size = data_rank_and_world(rank, world_size, self.data_roles)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.tokens, self.offsets = tokens, offsets
        # What builds a worker's TokenLoader: a plain one, or the TokenLoader.mixture
        # that mixture() hands over (as _mixture) before it runs this constructor.
        self._make = self.__dict__.pop("_mixture", None) or functools.partial(
            TokenLoader, tokens, offsets
        )
        self._epoch = epoch  # the epoch the next batch comes from
        self._finished: Optional[int] = None  # the epoch the last pass ran out of
        self.options = options if self.data_roles is None else dict(options, roles=self.data_roles)
        self.equal_steps = bool(
            options.get("equal_steps", _core._loader_option_defaults["equal_steps"])
        )
        self._resume: Union[None, State, List[State]] = None
        self.loader(0, 1)  # validate now, not inside a worker

    @classmethod
    def mixture(cls, sources: Sequence[Any], weights: Any, **kwargs: Any) -> "TokenDataset":
        """A TokenDataset over ``TokenLoader.mixture(sources, weights, ...)``: the
        mixture is the order stage, everything else as for one corpus (equal
        steps on every rank, DataLoader workers, state). Resuming with other
        ``weights`` changes them at the state's read point (docs/loader.md,
        "Mixing sources"). Keyword arguments are ``TokenLoader.mixture``'s and
        this class's (``rank``, ``world_size``, ``epoch``, ``roles``, ...)."""
        ds = cls.__new__(cls)
        ds._mixture = functools.partial(TokenLoader.mixture, sources, weights)
        TokenDataset.__init__(ds, None, None, **kwargs)
        return ds

    @property
    def epoch(self) -> int:
        """The epoch of the current pass; once a pass ran out, the epoch it ran
        (the dataset then stands at the start of the next one), so both
        ``set_epoch(ds.epoch + 1)`` after a pass and a plain next pass continue
        with the next epoch."""
        return self._epoch if self._finished is None else self._finished

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Moves to the start of ``epoch``, unless the dataset already stands
        in ``epoch`` (a loaded state, or the previous epoch ran out): then the
        position is kept."""
        epoch = _core._uint64(epoch, "epoch")
        self._finished = None
        if epoch == self._epoch:
            return
        self._epoch = epoch
        self._resume = None

    def load_state_dict(self, state: Union[State, Sequence[State]]) -> None:
        """Equal steps: a state from TokenDataLoader.state_dict() (any rank's:
        they are equal). Per rank: this rank's worker states, the states of
        every consumer of a run, or a merged state. The epoch comes with it."""
        _require_state(state)
        self._finished = None
        self._resume = list(state) if isinstance(state, (list, tuple)) else state
        first = self._resume[0] if isinstance(self._resume, list) and self._resume else self._resume
        if isinstance(first, dict) and "epoch" in first:
            self._epoch = int(first["epoch"])

    def _ran_out(self, finished: int, end: Optional[State]) -> None:
        """A whole pass over epoch ``finished`` was delivered: stand at the start of
        the next epoch (equal steps: the plan's end state ``end``; per rank: the
        next epoch from its start)."""
        if self.equal_steps and end is not None:
            self.load_state_dict(end)
        else:
            self._epoch, self._resume = finished + 1, None
        self._finished = finished

    @property
    def num_steps(self) -> int:
        """Equal steps: the steps of the whole epoch the dataset stands in (the
        same on every rank, also after a resume; for a learning-rate schedule).
        ValueError per rank (``equal_steps=False``: no fixed count)."""
        return self._plan_loader().num_steps

    @property
    def first_step(self) -> int:
        """Equal steps: the step of the epoch the next pass starts at (0, or the
        steps before a loaded state)."""
        return self._plan_loader().first_step

    def __len__(self) -> int:
        """Batches the next pass yields on this rank: ``num_steps - first_step``
        (exact, from the plan). TypeError per rank (``equal_steps=False``)."""
        if not self.equal_steps:
            raise TypeError(
                "len(): a per-rank TokenDataset (equal_steps=False) has no fixed batch count; "
                "use equal steps for len() and num_steps"
            )
        loader = self._plan_loader()
        return loader.num_steps - loader.first_step

    def __bool__(self) -> bool:  # not len(): a dataset is never falsy
        return True

    def _plan_loader(self) -> TokenLoader:
        if not self.equal_steps:
            raise ValueError(
                "equal_steps: this dataset packs per rank (equal_steps=False); it has no plan "
                "and no fixed step count"
            )
        return self.loader(0, 1)

    def roles(self, num_workers: int) -> List[int]:
        """The consumer each DataLoader worker plays: worker k plays rank + k * W,
        unless resumed from this rank's own worker states, which come in the
        order the DataLoader is to serve them (TokenDataLoader.state_dict)."""
        consumers = [self.rank + k * self.world_size for k in range(num_workers)]
        resume = self._resume
        if (
            isinstance(resume, list)
            and len(resume) == num_workers
            and all(_inner(s).get("consumers") == self.world_size * num_workers for s in resume)
        ):
            ids = [_inner(s).get("consumer") for s in resume]
            if sorted(ids) == consumers:
                return ids
        return consumers

    def loader(self, worker: int, num_workers: int) -> TokenLoader:
        """The TokenLoader of DataLoader worker ``worker``, positioned where it resumes."""
        consumer = None if self.equal_steps else self.roles(num_workers)[worker]
        # The worker role it plays: its own, or that of the consumer it resumes as.
        role = worker if consumer is None else (consumer - self.rank) // self.world_size
        loader = self._make(
            rank=self.rank,
            world_size=self.world_size,
            epoch=self._epoch,
            worker=role,
            num_workers=num_workers,
            **self.options,
        )
        if self.equal_steps:
            if self._resume is not None:
                loader.load_state_dict(self._resume)
            return loader
        resume = self._resume
        # A list of plain loader states goes to the core as it is (ResumeStateFor:
        # this consumer's own state, else the merge); a mixture loader's states
        # are chosen here until the mixture loader is the core's.
        if isinstance(resume, list) and any(_inner(s) is not s for s in resume):
            consumers = self.world_size * num_workers
            own = [
                s
                for s in resume
                if _inner(s).get("consumers") == consumers and _inner(s).get("consumer") == consumer
            ]
            if own:
                resume = own[0]
            elif len(resume) == 1 and _inner(resume[0]).get("consumers") == 0:
                resume = resume[0]
            else:
                # The states of every consumer of a run (another world size or
                # worker count): merged, then continued by this configuration.
                resume = loader.merge_states(resume)
        if resume is not None:
            loader.load_state_dict(resume)
        return loader

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = tud.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        loader = self.loader(worker, workers)
        finished = self._epoch
        first = loader.first_step if self.equal_steps else 0
        for batch in loader:
            out = to_torch(batch)
            if self.equal_steps:
                # step: the step of the epoch; state_at counts this pass's batches.
                out["state"] = loader.state_at(int(batch["step"]) - first + 1)
            else:
                out["state"] = loader.state_dict()
            yield out
        if info is None:
            # The pass ran out in this process (no DataLoader workers, whose copies
            # of the dataset would forget it): the next pass is the next epoch.
            self._ran_out(finished, loader.state_dict())


class TokenDataLoader(tud.DataLoader):
    """DataLoader over a TokenDataset (``batch_size=None``: the dataset already
    batches) whose ``state_dict()`` lists the state of each of its workers after
    the last batch handed out; ``load_state_dict`` resumes from it (or from the
    merged states of all ranks)."""

    def __init__(
        self,
        dataset: TokenDataset,
        num_workers: int = 0,
        *,
        check_plan: bool = True,
        group: Any = None,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("batch_size") is not None:
            raise ValueError(
                f"batch_size: {kwargs['batch_size']!r} given to TokenDataLoader, but the "
                "TokenDataset already batches (give batch_size to the TokenDataset; "
                "TokenDataLoader always runs with batch_size=None)"
            )
        kwargs.pop("batch_size", None)
        for name in ("batch_sampler", "sampler", "shuffle", "drop_last"):
            if kwargs.get(name):
                raise ValueError(
                    f"{name}: {kwargs[name]!r} is not an option of TokenDataLoader (the "
                    "TokenDataset orders, shards and batches; see its shuffle and seed)"
                )
        if kwargs.get("persistent_workers"):
            raise ValueError(
                "persistent_workers: not supported: persistent workers keep their own copy "
                "of the dataset, so set_epoch and load_state_dict would not reach them and "
                "every epoch would repeat the first"
            )
        super().__init__(dataset, batch_size=None, num_workers=num_workers, **kwargs)
        self._states: Dict[int, State] = {}
        self._state: Optional[State] = None  # equal steps: after the last batch served
        self._served = 0
        self._roles = dataset.roles(max(1, num_workers))
        self._check_plan = check_plan
        self._group = group
        self._checked = False

    def __iter__(self):
        ds: TokenDataset = self.dataset  # type: ignore[assignment]
        if ds.equal_steps:
            yield from self._iter_equal_steps(ds)
            return
        self._served = 0
        self._roles = ds.roles(max(1, self.num_workers))
        finished = ds._epoch
        for batch in super().__iter__():
            state = batch.pop("state")
            self._states[_inner(state)["consumer"]] = state
            self._served += 1
            yield batch
        # Every worker ran out: the next pass is the next epoch.
        self._states, self._served = {}, 0
        ds._ran_out(finished, None)

    def _iter_equal_steps(self, ds: TokenDataset):
        finished = ds._epoch
        start = ds.loader(0, 1)
        if self._check_plan and not self._checked and dist.is_available() and dist.is_initialized():
            # Once, before the first step: every rank must hold the same plan.
            check_plan(start, self._group)
            self._checked = True
        self._state = None
        for batch in super().__iter__():
            self._state = batch.pop("state")
            yield batch
        # The pass ran out: the dataset stands at the start of the next epoch,
        # the state after the last batch (its worker's plan reached the end);
        # without a batch, the plan's end (asking num_steps plans the epoch).
        ds._ran_out(
            finished,
            self._state
            if self._state is not None
            else start.state_at(start.num_steps - start.first_step),
        )
        self._state = None

    def state_dict(self) -> Union[State, List[State]]:
        """One state per worker of this rank, the worker to be served next first
        (so a resumed DataLoader, which starts with worker 0, continues the same
        sequence of batches while every worker still has batches). Equal steps:
        one dict, the same on every rank."""
        ds: TokenDataset = self.dataset  # type: ignore[assignment]
        if ds.equal_steps:
            return self._state if self._state is not None else ds.loader(0, 1).state_dict()
        workers = max(1, self.num_workers)
        out = []
        for i in range(workers):
            k = (self._served + i) % workers
            consumer = self._roles[k]
            state = self._states.get(consumer)
            out.append(state if state is not None else ds.loader(k, workers).state_dict())
        return out

    @property
    def num_steps(self) -> int:
        """Equal steps: the steps of the whole epoch (``TokenDataset.num_steps``), for
        a learning-rate schedule; ``len()`` is the batches of the next pass."""
        return self.dataset.num_steps  # type: ignore[attr-defined]

    def load_state_dict(self, state: Union[State, Sequence[State]]) -> None:
        self._states = {}
        self._state = None
        self._served = 0
        self.dataset.load_state_dict(state)  # type: ignore[attr-defined]
