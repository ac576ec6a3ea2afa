"""PyTorch adapters: a drop-in DistributedSampler, worker-aware iterable sharding,
packed datasets and collators returning tensors, the TokenLoader as a dataset, and
the evaluation collectives over torch.distributed.

>>> import torch.utils.data as tud
>>> from shardkit.torch import DistributedSampler
>>> data = list(range(10))
>>> ours = DistributedSampler(data, num_replicas=4, rank=3, shuffle=False)
>>> theirs = tud.DistributedSampler(data, num_replicas=4, rank=3, shuffle=False)
>>> list(ours) == list(theirs) == [3, 7, 1]
True
>>> ours.padding                                     # torch repeats index 1 unmarked
1
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional, Sequence, TypeVar, Union

import torch.utils.data as tud

from shardkit._torch_eval import (
    TorchEngine,
    agree_steps,
    check_plan,
    fail_fast,
    gather_unshard,
    global_masked_sum,
    init_from_environment,
)
from shardkit._torch_loader import TokenDataLoader, TokenDataset
from shardkit._torch_packing import ConstantLengthDataset, PackedCollator, to_torch
from shardkit.eval import rank_and_world
from shardkit.layout import data_rank_and_world, resolve_roles
from shardkit.sharding import Shard, ShardPlan

T = TypeVar("T")

__all__ = [
    # sharding
    "DistributedSampler",
    "ShardedIterableDataset",
    # packing
    "ConstantLengthDataset",
    "PackedCollator",
    "to_torch",
    # loader
    "TokenDataLoader",
    "TokenDataset",
    # evaluation over torch.distributed
    "TorchEngine",
    "agree_steps",
    "check_plan",
    "fail_fast",
    "gather_unshard",
    "global_masked_sum",
    "init_from_environment",
]


class DistributedSampler(tud.DistributedSampler):
    """Drop-in replacement for ``torch.utils.data.DistributedSampler``.

    Same constructor, ``set_epoch`` and ``len``; an instance of torch's class (so
    Trainer/Lightning/accelerate treat it as one). With ``shuffle=False`` the
    indices equal torch's, index for index, in both ``drop_last`` modes and when
    there are more replicas than samples. With ``shuffle=True`` the epoch order is
    shardkit's keyed permutation: O(1) memory instead of a ``randperm`` of the
    whole data set on every rank, and the same global order on every rank.
    Unlike torch, the padded (repeated) entries are known: see ``padding`` and
    ``mask()``; ``num_replicas`` / ``rank`` left out come from
    :func:`shardkit.discover` (torch.distributed when initialized, else the
    launcher's environment) instead of failing without a process group.
    """

    def __init__(
        self,
        dataset,
        num_replicas: Optional[int] = None,
        rank: Optional[int] = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        roles=None,
        mesh=None,
        data_axes=None,
    ) -> None:
        # roles (a shardkit.DataRoles) or mesh= and data_axes=: replicas are the
        # data-parallel groups, so tensor/pipeline ranks of one group get the same indices.
        rank, num_replicas = data_rank_and_world(rank, num_replicas, roles, mesh, data_axes)
        # torch asks torch.distributed for what is not given (and fails without a
        # process group); shardkit asks its one rank source, which answers the
        # same when a group is initialized and reads the launcher otherwise.
        rank, num_replicas = rank_and_world(rank, num_replicas)
        super().__init__(
            dataset,
            num_replicas=num_replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
        )

    def _shard(self) -> Shard:
        plan = ShardPlan(
            len(self.dataset),
            self.num_replicas,
            remainder="drop" if self.drop_last else "pad",
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
        )
        shard = plan.shard(self.rank)
        assert len(shard) == self.num_samples, (len(shard), self.num_samples)
        return shard

    def __iter__(self) -> Iterator[int]:
        shard = self._shard()
        chunk = 1 << 16
        for start in range(0, len(shard), chunk):
            yield from shard.numpy(start, min(len(shard), start + chunk)).tolist()

    @property
    def padding(self) -> int:
        """How many of this rank's indices (the last ones) repeat other items."""
        return self._shard().padding

    def mask(self):
        """numpy bool array: False at the padded (repeated) positions."""
        return self._shard().mask()


class ShardedIterableDataset(tud.IterableDataset):
    """Shards any indexable source over (rank, dataloader worker) with a ShardPlan.

    Every item of the window is read by exactly one (rank, worker) pair;
    consuming the workers round-robin (as DataLoader does with batch_size=1 or
    batch_size=None) reproduces the rank's order. ``source`` is a sequence or a
    callable ``index -> item`` (then pass ``num_items``). Other keyword arguments
    (split, remainder, shuffle, seed, offset, limit, weights) go to ShardPlan;
    call ``set_epoch`` between epochs when shuffling.

    With the default ``remainder="uneven"`` ranks get different item counts (7
    items on 2 ranks: 4 and 3), which hangs a loop with a collective per item.
    ``equal_counts=True`` gives every rank ``ceil(N / W)`` entries, as EvalPlan
    does: the padded entries hold a valid item and are marked, each entry is
    yielded as ``(item, real)`` with ``real`` False on padding (mask it out of
    the loss or the metric). Every item is real on exactly one rank.

    >>> ds = ShardedIterableDataset(list("abcdefg"), rank=1, world_size=2)
    >>> list(ds)
    ['b', 'd', 'f']
    >>> list(ShardedIterableDataset(list("abcdefg"), rank=1, world_size=2, equal_counts=True))
    [('b', True), ('d', True), ('f', True), ('a', False)]
    """

    def __init__(
        self,
        source: Union[Sequence[T], Callable[[int], T]],
        *,
        num_items: Optional[int] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        epoch: int = 0,
        equal_counts: bool = False,
        roles=None,
        mesh=None,
        data_axes=None,
        **plan_options,
    ) -> None:
        super().__init__()
        if equal_counts:
            remainder = plan_options.setdefault("remainder", "pad")
            if remainder != "pad":
                raise ValueError(
                    f"remainder: equal_counts pads the short ranks (remainder 'pad'), got "
                    f"{remainder!r}"
                )
        self.equal_counts = equal_counts
        if num_items is None:
            if callable(source) and not hasattr(source, "__len__"):
                raise ValueError("num_items: required when source is a callable")
            num_items = len(source)  # type: ignore[arg-type]
        self.source = source
        self.num_items = num_items
        # roles (a shardkit.DataRoles) or mesh= and data_axes=: shard by the
        # data-parallel rank and size; replicas read the same items.
        self.roles = resolve_roles(roles, mesh, data_axes)
        rank, world_size = data_rank_and_world(rank, world_size, self.roles)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.epoch = epoch
        self.plan_options = plan_options
        self.plan()  # validate now, not inside a worker

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def plan(self) -> ShardPlan:
        return ShardPlan(self.num_items, self.world_size, epoch=self.epoch, **self.plan_options)

    def __iter__(self) -> Iterator[T]:
        info = tud.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        shard = self.plan().shard(self.rank, worker=worker, num_workers=workers)
        get = self.source if callable(self.source) else self.source.__getitem__
        if self.equal_counts:
            mask = shard.mask()
            for k, index in enumerate(shard):
                yield get(index), bool(mask[k])
            return
        for index in shard:
            yield get(index)
