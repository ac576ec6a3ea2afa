"""Mixing sources: one global order of (source, item) samples with exact proportions.

Every block of ``block`` consecutive samples holds a fixed count of each source
(largest-remainder rounding of the weights, carried over the run, so each source's
count is within one sample of its target at every block boundary); inside a block
the order is a keyed permutation; each source walks its own keyed permutation, one
per epoch of that source. Nothing is materialised: any sample is computed from its
position.

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

from shardkit._core import Mixture

__all__ = ["Mixture"]
