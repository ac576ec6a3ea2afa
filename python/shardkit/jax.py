"""JAX adapters: global arrays from per-process data, which rows each host loads, and
evaluation collectives (``check_plan``, ``agree_steps``, ``gather_unshard``, ``fail_fast``,
``global_masked_sum`` over JAX's processes; see shardkit._jax_eval).

``make_array_from_process_local_data`` is a drop-in for JAX's function of that
name: the same arguments, the same array, but the index arithmetic (global shape
inference, local-shape validation, which local block feeds which device) is done
by shardkit's C++ core in time proportional to this process's devices, and the
array is assembled with ``jax.make_array_from_single_device_arrays``.

JAX is imported when a function is called, so this module imports without JAX
and without a running distributed runtime.

>>> import numpy as np, jax
>>> from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
>>> mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
>>> sharding = NamedSharding(mesh, P("data"))
>>> x = make_array_from_process_local_data(sharding, np.arange(4.0))
>>> x.shape, x.sharding == sharding
((4,), True)
>>> host_rows(sharding, 8)
[(0, 8)]
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from shardkit._jax_eval import (
    JaxEngine,
    agree_steps,
    check_plan,
    fail_fast,
    gather_unshard,
    global_masked_sum,
)
from shardkit.layout import LoadingPlan, NamedSharding
from shardkit.sharding import Shard, ShardPlan

__all__ = [
    # layout
    "host_items",
    "host_rows",
    "make_array_from_process_local_data",
    "to_shardkit",
    # evaluation over JAX's processes
    "JaxEngine",
    "agree_steps",
    "check_plan",
    "fail_fast",
    "gather_unshard",
    "global_masked_sum",
]


def to_shardkit(sharding: Any) -> NamedSharding:
    """The shardkit NamedSharding of a ``jax.sharding.NamedSharding`` (or a shardkit
    one, returned as is)."""
    if isinstance(sharding, NamedSharding):
        return sharding
    if not (hasattr(sharding, "mesh") and hasattr(sharding, "spec")):
        raise ValueError(
            f"sharding: expected a jax.sharding.NamedSharding, got {type(sharding).__name__}"
        )
    return NamedSharding.from_jax(sharding)


def _one_array(sharding: Any, local_data: Any, global_shape: Sequence[int] | None):
    import jax

    if isinstance(sharding, jax.sharding.PartitionSpec):
        # As JAX does: a bare spec means a NamedSharding over the mesh set by jax.set_mesh.
        from jax._src.api import pspec_to_sharding

        sharding = pspec_to_sharding("make_array_from_process_local_data", sharding)
    data = np.asarray(local_data)
    if jax.process_count() == 1 and global_shape is not None and tuple(global_shape) != data.shape:
        # JAX's own single-process rule: the local data is the global array.
        raise ValueError(
            "global_shape: on a single process it must be None or equal to local_data.shape;"
            f" got global_shape={tuple(global_shape)} and local_data.shape={data.shape}"
        )
    layout = to_shardkit(sharding)
    mapping = layout.local_to_global(data.shape, jax.process_index(), global_shape)
    devices = sharding.mesh.devices.flat
    mesh_devices = list(devices)
    arrays = []
    for k, device in enumerate(mapping.devices.tolist()):
        block = tuple(slice(int(a), int(b)) for a, b in mapping.local_slices[k])
        arrays.append(jax.device_put(data[block], mesh_devices[device]))
    return jax.make_array_from_single_device_arrays(mapping.global_shape, sharding, arrays)


def make_array_from_process_local_data(
    sharding: Any, local_data: Any, global_shape: Sequence[int] | None = None
):
    """Drop-in for ``jax.make_array_from_process_local_data``.

    sharding: a ``jax.sharding.NamedSharding`` (or a pytree prefix of them over
    ``local_data``); local_data: this process's data (numpy array or pytree of them);
    global_shape: the global shape (a tuple, or a pytree of them), or None to infer
    it, which fails with a ValueError naming the non-uniform dimensions when the
    owner layout makes a dimension non-uniform.
    """
    import jax

    if isinstance(local_data, (np.ndarray, jax.Array)) or np.isscalar(local_data):
        return _one_array(sharding, local_data, global_shape)
    leaves, treedef = jax.tree_util.tree_flatten(local_data)
    shardings = jax.tree_util.tree_leaves(
        jax.tree_util.tree_map(lambda _: sharding, local_data)
        if not isinstance(sharding, (list, tuple, dict))
        else sharding
    )
    shapes = (
        [global_shape] * len(leaves)
        if global_shape is None or isinstance(global_shape[0], int)
        else list(global_shape)
    )
    return jax.tree_util.tree_unflatten(
        treedef, [_one_array(s, d, g) for s, d, g in zip(shardings, leaves, shapes)]
    )


def _process(process_index: int | None) -> int:
    if process_index is not None:
        return int(process_index)
    import jax

    return jax.process_index()


def host_rows(
    sharding: Any, batch_size: int, *, process_index: int | None = None
) -> list[tuple[int, int]]:
    """The (start, stop) ranges of global batch rows this host must load, merged and in
    the order ``make_array_from_process_local_data`` expects its local rows.

    sharding: a JAX or shardkit NamedSharding whose spec entry 0 splits the batch;
    process_index: defaults to ``jax.process_index()``.
    """
    return LoadingPlan(to_shardkit(sharding), batch_size).rows(_process(process_index))


def host_items(
    sharding: Any,
    batch_size: int,
    order: Shard | ShardPlan,
    step: int,
    *,
    process_index: int | None = None,
):
    """(items, padding) this host reads at ``step``: the global batch of step t is
    entries [t * batch_size, (t + 1) * batch_size) of ``order`` (a Shard, or a
    ShardPlan with world_size 1, the same on every host), and the host reads only
    the entries of its rows, in local-data order."""
    if isinstance(order, ShardPlan):
        if order.world_size != 1:
            raise ValueError(
                f"order: a ShardPlan must have world_size 1 to be the global order, got "
                f"{order.world_size}; pass one of its shards instead"
            )
        order = order.shard(0)
    plan = LoadingPlan(to_shardkit(sharding), batch_size)
    return plan.items(order, step, _process(process_index))
