"""Which process am I? Rank, world size and local rank, from the engine in use.

shardkit never starts a distributed runtime; it asks the one that is running,
in this order (the first that answers wins):

1. ``torch.distributed``, when it is initialized (rank and world of the
   default group; the local rank from the launcher's environment);
2. JAX multi-process, when ``jax.distributed.initialize`` has run
   (``jax.process_index()`` / ``jax.process_count()``);
3. the launcher's environment (the C++ ``shardkit::DiscoverProcess`` reads it,
   same order in both languages): torchrun's ``RANK`` / ``WORLD_SIZE`` /
   ``LOCAL_RANK``; Open MPI's ``OMPI_COMM_WORLD_RANK`` / ``_SIZE`` /
   ``_LOCAL_RANK``; PMI's ``PMI_RANK`` / ``PMI_SIZE`` (MPICH, Intel MPI,
   ``srun --mpi=pmi2``); SLURM's ``SLURM_PROCID`` / ``SLURM_NTASKS`` /
   ``SLURM_LOCALID``;
4. otherwise a single process: rank 0 of 1.

torch and JAX are only consulted when they are already imported: discovery
never imports an engine.

>>> from shardkit.dist import discover
>>> p = discover(environ={"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
...                       "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
>>> p.rank, p.world_size, p.local_rank, p.source
(2, 4, 0, 'openmpi')
>>> discover(environ={}).source
'default'
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, NamedTuple, Optional

from shardkit import _core

__all__ = ["ProcessInfo", "discover", "rank_and_world"]


class ProcessInfo(NamedTuple):
    rank: int
    world_size: int
    local_rank: int
    source: str  # "torch.distributed", "jax", "torchrun", "openmpi", "pmi", "slurm", "default"


def _torch_info() -> Optional[tuple[int, int]]:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return None


def _jax_info() -> Optional[tuple[int, int]]:
    if "jax" not in sys.modules:
        return None
    try:
        from jax._src import distributed as jax_distributed
    except ImportError:  # a JAX without the private module: fall back to the environment
        return None
    if getattr(jax_distributed.global_state, "client", None) is None:
        return None
    import jax

    return jax.process_index(), jax.process_count()


def discover(environ: Optional[Mapping[str, str]] = None) -> ProcessInfo:
    """This process's rank, world size and local rank (see the module docstring).

    ``environ`` replaces ``os.environ`` and disables the engine checks (for
    tests). Raises ``ValueError`` naming the variable when a launcher's value is
    not an integer or the rank is outside its world.
    """
    env = dict(os.environ if environ is None else environ)
    if environ is None:
        for name, found in (("torch.distributed", _torch_info()), ("jax", _jax_info())):
            if found is None:
                continue
            # The launcher's local rank belongs to this process only if the
            # launcher describes the same world; a running engine is the truth
            # even when the environment is inconsistent.
            try:
                rank, world, local, _ = _core._discover_env(env)
            except ValueError:
                rank, world, local = -1, -1, 0
            return ProcessInfo(found[0], found[1], local if (rank, world) == found else 0, name)
    rank, world, local, source = _core._discover_env(env)
    return ProcessInfo(rank, world, local, source)


def rank_and_world(
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> tuple[int, int]:
    """``(rank, world_size)``: the arguments given, the rest from :func:`discover`.

    The one rank source of every shardkit class that takes ``rank=None`` /
    ``world_size=None`` (TokenLoader, the torch datasets and samplers), so two
    of them in one process always find the same rank.

    >>> rank_and_world(environ={"SLURM_PROCID": "3", "SLURM_NTASKS": "4"})
    (3, 4)
    >>> rank_and_world(1, None, environ={"SLURM_PROCID": "3", "SLURM_NTASKS": "4"})
    (1, 4)
    """
    if rank is not None and world_size is not None:
        return rank, world_size
    found = discover(environ)
    return (found.rank if rank is None else rank), (
        found.world_size if world_size is None else world_size
    )
