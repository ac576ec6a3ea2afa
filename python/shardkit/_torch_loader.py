"""PyTorch adapter of TokenLoader (re-exported by shardkit.torch).

``TokenDataset`` is an IterableDataset: DataLoader worker ``k`` of ``K`` on rank
``r`` of ``W`` is loader consumer ``r + k * W``, so the workers of all ranks
split one global order without overlap. Batches are dicts of torch tensors made
with ``torch.from_numpy`` (no copy in the process that built them).
``TokenDataLoader`` is a DataLoader (``batch_size=None``) that remembers the
state of every worker after the batches *it has handed out*, so
``state_dict()`` / ``load_state_dict()`` resume exactly, and the states of all
ranks (gathered) resume elastically on another world size or worker count.

>>> import numpy as np
>>> from shardkit.torch import TokenDataset, TokenDataLoader
>>> tokens, offsets = np.arange(40, dtype=np.int32), np.arange(0, 41, 5)
>>> ds = TokenDataset(tokens, offsets, seq_len=16, batch_size=1, rank=0, world_size=1)
>>> loader = TokenDataLoader(ds, num_workers=0)
>>> batch = next(iter(loader))
>>> batch["input_ids"].shape, batch["input_ids"].dtype
(torch.Size([1, 16]), torch.int64)
>>> len(loader.state_dict())                 # one state per worker of this rank
1
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import torch.utils.data as tud

from shardkit._torch_packing import to_torch
from shardkit.eval import rank_and_world
from shardkit.loader import TokenLoader

__all__ = ["TokenDataset", "TokenDataLoader"]

State = Dict[str, Any]


class TokenDataset(tud.IterableDataset):
    """TokenLoader as a torch IterableDataset, sharded over ranks and DataLoader
    workers. Takes TokenLoader's arguments (``worker`` / ``num_workers`` come
    from the DataLoader). Each batch carries ``"state"``: the worker's state after
    it (TokenDataLoader strips it and keeps it)."""

    def __init__(
        self,
        tokens: Any,
        offsets: Any = None,
        *,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        epoch: int = 0,
        **options: Any,
    ) -> None:
        super().__init__()
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.tokens, self.offsets = tokens, offsets
        self.epoch = epoch
        self.options = options
        self._resume: Union[None, State, List[State]] = None
        self.loader(0, 1)  # validate now, not inside a worker

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self._resume = None

    def load_state_dict(self, state: Union[State, Sequence[State]]) -> None:
        """This rank's worker states (from TokenDataLoader.state_dict), the states
        of every consumer of a run, or a merged state."""
        self._resume = list(state) if isinstance(state, (list, tuple)) else state

    def roles(self, num_workers: int) -> List[int]:
        """The consumer each DataLoader worker plays: worker k plays rank + k * W,
        unless resumed from this rank's own worker states, which come in the
        order the DataLoader is to serve them (TokenDataLoader.state_dict)."""
        consumers = [self.rank + k * self.world_size for k in range(num_workers)]
        resume = self._resume
        if (
            isinstance(resume, list)
            and len(resume) == num_workers
            and all(s.get("consumers") == self.world_size * num_workers for s in resume)
        ):
            ids = [s.get("consumer") for s in resume]
            if sorted(ids) == consumers:
                return ids
        return consumers

    def loader(self, worker: int, num_workers: int) -> TokenLoader:
        """The TokenLoader of DataLoader worker ``worker``, positioned where it resumes."""
        consumer = self.roles(num_workers)[worker]
        role = (consumer - self.rank) // self.world_size
        loader = TokenLoader(
            self.tokens,
            self.offsets,
            rank=self.rank,
            world_size=self.world_size,
            epoch=self.epoch,
            worker=role,
            num_workers=num_workers,
            **self.options,
        )
        resume = self._resume
        if isinstance(resume, list):
            consumers = self.world_size * num_workers
            own = [
                s
                for s in resume
                if s.get("consumers") == consumers and s.get("consumer") == consumer
            ]
            if own:
                resume = own[0]
            elif len(resume) == 1 and resume[0].get("consumers") == 0:
                resume = resume[0]
            else:
                # The states of every consumer of a run (another world size or
                # worker count): merged, then continued by this configuration.
                resume = TokenLoader.merge_states(resume)
        if resume is not None:
            loader.load_state_dict(resume)
        return loader

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = tud.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        loader = self.loader(worker, workers)
        for batch in loader:
            out = to_torch(batch)
            out["state"] = loader.state_dict()
            yield out


class TokenDataLoader(tud.DataLoader):
    """DataLoader over a TokenDataset (``batch_size=None``: the dataset already
    batches) whose ``state_dict()`` lists the state of each of its workers after
    the last batch handed out; ``load_state_dict`` resumes from it (or from the
    merged states of all ranks)."""

    def __init__(self, dataset: TokenDataset, num_workers: int = 0, **kwargs: Any) -> None:
        super().__init__(dataset, batch_size=None, num_workers=num_workers, **kwargs)
        self._states: Dict[int, State] = {}
        self._served = 0
        self._roles = dataset.roles(max(1, num_workers))

    def __iter__(self):
        self._served = 0
        self._roles = self.dataset.roles(max(1, self.num_workers))  # type: ignore[attr-defined]
        for batch in super().__iter__():
            state = batch.pop("state")
            self._states[state["consumer"]] = state
            self._served += 1
            yield batch

    def state_dict(self) -> List[State]:
        """One state per worker of this rank, the worker to be served next first
        (so a resumed DataLoader, which starts with worker 0, continues the same
        sequence of batches while every worker still has batches)."""
        ds: TokenDataset = self.dataset  # type: ignore[assignment]
        workers = max(1, self.num_workers)
        out = []
        for i in range(workers):
            k = (self._served + i) % workers
            consumer = self._roles[k]
            state = self._states.get(consumer)
            out.append(state if state is not None else ds.loader(k, workers).state_dict())
        return out

    def load_state_dict(self, state: Union[State, Sequence[State]]) -> None:
        self._states = {}
        self._served = 0
        self.dataset.load_state_dict(state)  # type: ignore[attr-defined]
