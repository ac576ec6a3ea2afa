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
"""

from shardkit._core import LoadingPlan, LocalToGlobal, Mesh, NamedSharding, PartitionSpec

__all__ = ["LoadingPlan", "LocalToGlobal", "Mesh", "NamedSharding", "PartitionSpec"]
