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

Mixing sources (:class:`Mixture`): one global order of (source, item) samples with exact proportions.

Every block of ``block`` consecutive samples holds a fixed count of each source
(cumulative rounding of the weights, carried over the run, so each source's count
is within one sample of its target at every block boundary); inside a block the
order is a keyed rotation that spreads every source evenly; each source walks its
own keyed permutation, one per epoch of that source. Nothing is materialised: any
sample is computed from its position in O(log K + log block).

>>> import shardkit
>>> mix = shardkit.Mixture([1000, 50], [3, 1], block=4, seed=0)
>>> mix.block_counts(0), mix.block_counts(7)        # 3 of source 0, 1 of source 1
([3, 1], [3, 1])
>>> mix.consumed(8)                                 # two blocks
[6, 2]
>>> source, item = mix.source_of(5)
>>> source in (0, 1) and 0 <= item < mix.sizes[source]
True
>>> sources, items = mix.numpy(0, 8)                # int64 arrays, filled in C++
>>> sources.tolist().count(0), items.dtype.name
(6, 'int64')

A source that must not repeat stops the mixture when it runs out; every one of its
items is delivered exactly once:

>>> small = shardkit.Mixture([10, 1000], [1, 1], block=2, repeat=[False, True])
>>> len(small), small.consumed(len(small))
(20, [10, 10])

Weights can follow a schedule (positions in samples; ``interpolation="linear"``
moves them gradually), and a run resumes from a state with new weights: every
source continues where it stopped, nothing repeated or skipped:

>>> sched = shardkit.Mixture([100, 100], [1, 0], block=10, schedule=[(50, [0, 1])])
>>> sched.consumed(50), sched.consumed(80)
([50, 0], [50, 30])
>>> state = mix.state_dict(8)
>>> resumed = shardkit.Mixture.from_state(state, weights=[1, 1])
>>> resumed.consumed(0), resumed.block             # a block given by the user stays
([6, 2], 4)
"""

from __future__ import annotations

import os
import warnings
from typing import Mapping, Optional

from shardkit import _core
from shardkit._core import AuditReport, Mixture, Shard, ShardPlan, WhaleChoice

__all__ = [
    "AuditReport",
    "Mixture",
    "Shard",
    "ShardPlan",
    "WhaleChoice",
    "whale_choice",
    "whale_plan",
]

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
    env = _core._str_mapping(os.environ if env is None else env, "env")
    # The core reads the switches (the same reader as the loader's file sharding).
    unbalanced, drop_last = _core._whale_policy(
        {k: env[k] for k in (UNBALANCED, DROP_LAST) if k in env}
    )
    return _core._whale_slicing(
        _core._index(num_files, "num_files"),
        _core._index(world_size, "world_size"),
        unbalanced,
        drop_last,
    )


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
