"""Global-array layout: JAX's NamedSharding arithmetic, computed by the C++ core.

A device is named by its position in row-major mesh order; ``owners[d]`` is the
process that holds device ``d``. Everything here is a pure function of the mesh,
the spec and the shape, so every process can compute every other process's view.

>>> from shardkit import Mesh, NamedSharding, PartitionSpec
>>> mesh = Mesh({"x": 2, "y": 4}, owners=[0, 0, 0, 0, 1, 1, 1, 1])
>>> s = NamedSharding(mesh, PartitionSpec(("x", "y"), None))
>>> s.shard_shape((16, 8))
(2, 8)
>>> s.devices_indices_map((16, 8))[5]
(slice(10, 12, None), slice(0, 8, None))
>>> s.local_shape((16, 8), 1)
(8, 8)
>>> s.infer_global_shape((8, 8))
(16, 8)

Unused mesh axes replicate; the replica id counts earlier devices holding the same
slice (JAX's ``device_replica_id_map``):

>>> NamedSharding(mesh, PartitionSpec("y")).replica_ids((8,)).tolist()
[0, 0, 0, 0, 1, 1, 1, 1]

How a process's local data fills its devices (``make_array_from_process_local_data``):
a device whose global slice starts at the k-th distinct start of its process reads
local block k.

>>> owners = [0, 1, 0, 1]                      # interleaved owners
>>> s = NamedSharding(Mesh({"data": 4}, owners=owners), PartitionSpec("data"))
>>> m = s.local_to_global((4,), process=1)
>>> m.global_shape, m.devices.tolist()
((8,), [1, 3])
>>> m.global_slices[:, 0].tolist(), m.local_slices[:, 0].tolist()
([[2, 4], [6, 8]], [[0, 2], [2, 4]])

The loading plan: which rows of each step's global batch a host reads, and back.

>>> from shardkit import LoadingPlan
>>> plan = LoadingPlan(s, 8)
>>> plan.rows(1), plan.hosts_of(6)
([(2, 4), (6, 8)], [1])

Errors name the value:

>>> s.shard_shape((6,))
Traceback (most recent call last):
...
ValueError: shape: dimension 0 of (6,) has size 6, which is not divisible by its 4 partitions (mesh axes 'data' of sizes 4 in P('data'))

Data roles from a parallelism mesh: tensor/pipeline/context axes replicate data, only the
data axes choose the shard. With torchrun's rank order over ``dp=2 x tp=2``, ranks 0 and 1
form a tensor-parallel pair that must see identical batches:

>>> from shardkit import DataRoles
>>> roles = DataRoles({"dp": 2, "tp": 2}, "dp", rank=1)
>>> roles.dp_rank, roles.dp_size, roles.replica_group, roles.loads
(0, 2, [0, 1], True)

Pipeline stages after the first take no data (Whale's master/slave rule), and one rank
per group saves the loader state:

>>> roles = DataRoles({"dp": 2, "pp": 2}, "dp", rank=3, broadcast_axes="pp")
>>> roles.dp_rank, roles.loads, roles.source, roles.saver
(1, False, 2, 2)
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from shardkit import _core
from shardkit._core import (
    DataRoles,
    LoadingPlan,
    LocalToGlobal,
    Mesh,
    NamedSharding,
    PartitionSpec,
)

__all__ = [
    "DataRoles",
    "LoadingPlan",
    "LocalToGlobal",
    "Mesh",
    "NamedSharding",
    "PartitionSpec",
    "ReplicaCheck",
    "ReplicaDivergenceError",
    "batch_fingerprint",
    "data_rank_and_world",
    "resolve_roles",
]


def resolve_roles(
    roles: Optional[_core.DataRoles] = None,
    mesh: Any = None,
    data_axes: Union[str, Sequence[str], None] = None,
) -> Optional[_core.DataRoles]:
    """``roles``, or ``DataRoles(mesh, data_axes)``, or None. Raises ValueError when
    only one of mesh / data_axes is given, or both roles and mesh."""
    if (mesh is None) != (data_axes is None):
        raise ValueError("data_axes: mesh= and data_axes= go together")
    if mesh is not None:
        if roles is not None:
            raise ValueError("roles: pass roles= or mesh= and data_axes=, not both")
        return DataRoles(mesh, data_axes)
    if roles is not None and not isinstance(roles, DataRoles):
        raise ValueError(f"roles: expected a shardkit.DataRoles, got {roles!r}")
    return roles


def data_rank_and_world(
    rank: Optional[int],
    world_size: Optional[int],
    roles: Optional[_core.DataRoles] = None,
    mesh: Any = None,
    data_axes: Union[str, Sequence[str], None] = None,
) -> Tuple[Optional[int], Optional[int]]:
    """(rank, world_size) a plan or loader shards by: ``roles.dp_rank`` / ``.dp_size``
    when roles (or mesh and data_axes) are given, else the arguments unchanged. Raises
    ValueError when both are given and disagree, or only one of mesh / data_axes."""
    roles = resolve_roles(roles, mesh, data_axes)
    if roles is None:
        return rank, world_size
    if rank is not None and rank != roles.dp_rank:
        raise ValueError(f"rank: {rank} differs from the roles' dp_rank {roles.dp_rank}")
    if world_size is not None and world_size != roles.dp_size:
        raise ValueError(
            f"world_size: {world_size} differs from the roles' dp_size {roles.dp_size}"
        )
    return roles.dp_rank, roles.dp_size


def batch_fingerprint(ids: Any) -> int:
    """A 64-bit (signed) fingerprint of a batch's item or document ids, order-sensitive."""
    return _core._batch_fingerprint(np.ascontiguousarray(np.asarray(ids).ravel(), np.int64))


class ReplicaDivergenceError(RuntimeError):
    """Ranks of one replica group received different batches (raised on every rank)."""


def _torch_allgather(values: np.ndarray) -> np.ndarray:
    import torch
    import torch.distributed as dist

    local = torch.from_numpy(values)
    out = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(out, local)
    return torch.stack(out).numpy()


def _jax_allgather(values: np.ndarray) -> np.ndarray:
    # Bit-exact int64 also without jax_enable_x64 (a fingerprint is 64 bits).
    from shardkit._jax_eval import JaxEngine

    return JaxEngine().allgather_int64(values)


class ReplicaCheck:
    """Checks every ``every`` steps that the ranks of each replica group hold identical
    batches: one all-gather of three int64 per rank through the user's engine.

    ``ReplicaCheck(roles, engine="torch"|"jax"|callable, every=1)``; ``check(step, ids)``
    is collective (every rank calls it at every step; it talks only when ``step % every
    == 0``) and raises ReplicaDivergenceError on every rank, naming the step and the
    ranks, when a group disagrees. ``ids``: the batch's document or item ids, or None on
    a rank that holds no batch (it takes no part). A callable engine maps this rank's
    int64 array to the [world, k] array of every rank's (row r = rank r).
    """

    def __init__(self, roles: _core.DataRoles, engine: Any = "torch", every: int = 1) -> None:
        if every < 1:
            raise ValueError(f"every: must be at least 1, got {every}")
        if engine == "torch":
            engine = _torch_allgather
        elif engine == "jax":
            engine = _jax_allgather
        elif not callable(engine):
            raise ValueError(f"engine: expected 'torch', 'jax' or a callable, got {engine!r}")
        self.roles, self.every, self._allgather = roles, every, engine

    def check(self, step: int, ids: Any) -> bool:
        """True when it compared (step % every == 0), False when it skipped."""
        if step % self.every:
            return False
        mine = np.array(
            [
                -1 if ids is None else self.roles.dp_rank,
                0 if ids is None else batch_fingerprint(ids),
                step,
            ],
            np.int64,
        )
        table = np.asarray(self._allgather(mine)).reshape(-1, 3)
        steps = np.unique(table[:, 2])
        if len(steps) != 1:
            raise ReplicaDivergenceError(
                f"step: the ranks checked different steps {steps.tolist()} (this is step {step})"
            )
        bad = _core._divergent_replicas(
            np.ascontiguousarray(table[:, 0]), np.ascontiguousarray(table[:, 1])
        )
        if bad:
            raise ReplicaDivergenceError(
                f"step {step}: ranks {list(bad)} (dp_rank {int(table[bad[0], 0])}) must see "
                "identical batches but received different ones"
            )
        return True
