"""Sharding: which rank (and dataloader worker) gets which item.

:class:`ShardPlan` is a pure function of its parameters (window -> order ->
split -> remainder -> workers); :class:`Shard` is one rank's list with O(1)
random access; ``ShardPlan.audit()`` proves coverage.

>>> from shardkit import ShardPlan
>>> plan = ShardPlan(10, 4, remainder="pad")
>>> plan.counts(), plan.padding(3), plan.shard(3).padding
([3, 3, 3, 3], 1, 1)

Whale (Alibaba PAI) file-slicing compatibility: Whale chooses how files are split over master workers from two environment
switches; :func:`whale_plan` reads them with Whale's rules and returns the
equivalent :class:`shardkit.ShardPlan`.

>>> from shardkit import whale_plan
>>> plan = whale_plan(10, 3, env={})                 # default: replicate, shuffled
>>> plan.remainder, plan.counts()
('replicate', [10, 10, 10])
>>> plan = whale_plan(10, 3, env={"WHALE_DROP_LAST_FILES": "True"})
>>> plan.remainder, plan.counts(), plan.dropped
('drop', [3, 3, 3], 1)
"""

from __future__ import annotations

import os
import warnings
from typing import Mapping, Optional

from shardkit import _core
from shardkit._core import AuditReport, Shard, ShardPlan, WhaleChoice

__all__ = ["AuditReport", "Shard", "ShardPlan", "WhaleChoice", "whale_choice", "whale_plan"]

UNBALANCED = "WHALE_UNBALANCED_IO_SLICING"
DROP_LAST = "WHALE_DROP_LAST_FILES"


def whale_choice(
    num_files: int, world_size: int, *, env: Optional[Mapping[str, str]] = None
) -> WhaleChoice:
    """How Whale slices ``num_files`` files over ``world_size`` master workers,
    reading ``WHALE_UNBALANCED_IO_SLICING`` and ``WHALE_DROP_LAST_FILES`` from
    ``env`` (default ``os.environ``): a :class:`WhaleChoice` (``remainder``,
    ``shuffle``, the ``reason`` in words, a ``warning`` or ``''``).

    >>> c = whale_choice(10, 3, env={"WHALE_UNBALANCED_IO_SLICING": "1"})
    >>> c.remainder, c.shuffle, bool(c.warning)
    ('uneven', False, True)
    """
    env = os.environ if env is None else env
    unbalanced = _core._parse_whale_bool(UNBALANCED, env.get(UNBALANCED, ""))
    drop_last = _core._parse_whale_bool(DROP_LAST, env.get(DROP_LAST, ""))
    return _core._whale_slicing(num_files, world_size, unbalanced, drop_last)


def whale_plan(
    num_files: int,
    world_size: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    env: Optional[Mapping[str, str]] = None,
) -> ShardPlan:
    """The ShardPlan Whale would use for ``num_files`` files over ``world_size``
    master workers, reading ``WHALE_UNBALANCED_IO_SLICING`` and
    ``WHALE_DROP_LAST_FILES`` from ``env`` (default ``os.environ``).

    Rules (:func:`whale_choice`): files that divide evenly split evenly;
    otherwise unbalanced slicing (uneven) wins over drop-last (drop), and with
    neither every worker reads every file in its own shuffled order
    (replicate), which is also forced when there are fewer files than workers.
    Emits a ``UserWarning`` where Whale's documentation warns (uneven shares
    with epoch-based stopping can hang).
    """
    choice = whale_choice(num_files, world_size, env=env)
    if choice.warning:
        warnings.warn(choice.warning, UserWarning, stacklevel=2)
    return ShardPlan(
        num_files,
        world_size,
        remainder=choice.remainder,
        shuffle=choice.shuffle,
        seed=seed,
        epoch=epoch,
    )
