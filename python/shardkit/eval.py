"""Exactly-once evaluation in equal, fixed-shape steps on every rank.

``EvalPlan`` says which items each rank evaluates at each step (and which
slots are padding); the helpers here do the few collectives an evaluation
needs through the engine in use (``shardkit.torch``, ``shardkit.jax`` bind them
to torch.distributed and JAX): one to check that every rank holds the same
plan, one to agree on the step count when a filter makes counts dynamic, one
to gather outputs, and a failure channel so that one rank's exception ends
every rank with its reason instead of a hang.

>>> import numpy as np
>>> from shardkit import EvalPlan
>>> plan = EvalPlan(10, 3, 2)           # 10 items, 3 ranks, 2 slots per step
>>> plan.num_steps, plan.total_padding  # ceil(ceil(10 / 3) / 2) steps, 2 masked slots
(2, 2)
>>> indices, mask = plan.batch(1, 1)
>>> indices.tolist(), mask.tolist()     # the padded slot holds a valid index
([7, 1], [True, False])
>>> outputs = [np.concatenate([plan.batch(r, s)[0] * 10 for s in range(plan.num_steps)])
...            for r in range(3)]       # each rank's outputs, every slot of every step
>>> plan.unshard(outputs).tolist()
[0, 10, 20, 30, 40, 50, 60, 70, 80, 90]
>>> masked_mean(np.array([1.0, 3.0, 100.0]), np.array([True, True, False]))
2.0

Which process am I? ``discover()`` gives the rank, world size and local rank from the
engine in use; it is the one rank source of the package (``rank_and_world()`` fills
``rank=None`` / ``world_size=None`` from it everywhere).

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

>>> p = discover(environ={"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
...                       "OMPI_COMM_WORLD_LOCAL_RANK": "0"})
>>> p.rank, p.world_size, p.local_rank, p.source
(2, 4, 0, 'openmpi')
>>> discover(environ={}).source
'default'
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from typing import Any, Mapping, NamedTuple, Optional, Protocol

import numpy as np

from shardkit import _core
from shardkit._core import EvalPlan, pad_for_devices, steps_for_count

__all__ = [
    "ProcessInfo",
    "discover",
    "rank_and_world",
    "EvalPlan",
    "PlanMismatchError",
    "RemoteRankError",
    "Engine",
    "check_plan",
    "agree_steps",
    "gather_unshard",
    "fail_fast",
    "masked_sum",
    "masked_mean",
    "masked_count",
    "pad_for_devices",
    "steps_for_count",
]


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


class PlanMismatchError(RuntimeError):
    """The ranks built different plans (raised on every rank)."""


class RemoteRankError(RuntimeError):
    """Another rank failed; the message names it and its reason."""


def _as_bool(mask) -> np.ndarray:
    return np.asarray(mask, dtype=bool)


def masked_count(mask) -> int:
    """Number of real (unmasked) slots."""
    return int(_as_bool(mask).sum())


def masked_sum(values, mask, axis: int = 0):
    """Sum of values over the real slots (mask True) along ``axis``."""
    values = np.asarray(values)
    m = _as_bool(mask)
    shape = [1] * values.ndim
    shape[axis] = m.shape[0]
    total = np.where(m.reshape(shape), values, 0).sum(axis=axis)
    return total.item() if np.ndim(total) == 0 else total


def masked_mean(values, mask, axis: int = 0):
    """Mean of values over the real slots; NaN when there are none."""
    n = masked_count(mask)
    total = masked_sum(values, mask, axis=axis)
    if np.ndim(total) == 0:
        return total / n if n else float("nan")
    return total / n if n else np.full(np.shape(total), np.nan)


class Engine(Protocol):
    """The collectives an evaluation needs; shardkit.torch and shardkit.jax provide one."""

    rank: int
    world_size: int

    def allgather_int64(self, values: np.ndarray) -> np.ndarray: ...  # [world, k]
    def allgather_rows(self, local: Any) -> list: ...  # every rank's outputs
    def set_failure(self, reason: str) -> None: ...
    def get_failure(self) -> Optional[str]: ...
    def ack_failure(self) -> None: ...
    def failure_acks(self) -> int: ...  # how many ranks acknowledged


def _fingerprint_int64(plan: EvalPlan) -> int:
    return int(np.array([plan.fingerprint], dtype=np.uint64).view(np.int64)[0])


def _exchange(engine: Engine, plan: Optional[EvalPlan], local_count: int) -> np.ndarray:
    fp = _fingerprint_int64(plan) if plan is not None else 0
    rows = engine.allgather_int64(np.array([fp, local_count, engine.world_size], np.int64))
    if plan is not None:
        prints = rows[:, 0].astype(np.int64).view(np.uint64).tolist()
        message = _core.compare_fingerprints(prints)
        if message:
            raise PlanMismatchError(
                f"{message} (this is rank {engine.rank} with {plan.describe()})"
            )
        if plan.world_size != engine.world_size:
            raise ValueError(
                f"world_size: the plan has world_size {plan.world_size} but the "
                f"engine has {engine.world_size} ranks"
            )
    return rows


def check_plan(plan: EvalPlan, engine: Engine) -> None:
    """One collective before the first step: raises PlanMismatchError on every rank
    unless all ranks hold the same plan (parameters and shardkit version)."""
    _exchange(engine, plan, 0)


def agree_steps(
    local_count: int, batch_size: int, engine: Engine, plan: Optional[EvalPlan] = None
) -> int:
    """Dynamic counts: every rank passes how many items it kept after a filter;
    one collective returns the same ``ceil(max count / batch_size)`` on every
    rank (and checks ``plan``'s fingerprint in the same collective)."""
    if local_count < 0:
        raise ValueError(f"local_count: must be non-negative, got {local_count}")
    rows = _exchange(engine, plan, local_count)
    return steps_for_count(int(rows[:, 1].max()), batch_size)


def gather_unshard(plan: EvalPlan, local_outputs: Any, engine: Engine):
    """Gathers every rank's outputs (``num_steps * batch_size`` rows each) and
    returns one per item in item order, on every rank."""
    if len(local_outputs) != plan.num_steps * plan.batch_size:
        raise ValueError(
            f"local_outputs: rank {engine.rank} has {len(local_outputs)} rows, "
            f"expected {plan.num_steps * plan.batch_size} (num_steps x batch_size)"
        )
    return plan.unshard(engine.allgather_rows(local_outputs))


@contextlib.contextmanager
def fail_fast(engine: Engine, *, grace: float = 2.0, poll: float = 0.05):
    """Makes one rank's failure end every rank with its reason, in bounded time.

    On an exception inside the block this rank publishes ``"rank R: Type: message"``
    through the engine's side channel (torch: the c10d store; JAX: the
    coordination service's key-value store), waits up to ``grace`` seconds for
    the other ranks to acknowledge, and re-raises. On the other ranks a watcher
    thread sees the failure within ``poll`` seconds, prints it to stderr and
    acknowledges; their blocked collective then fails (or the launcher stops
    them) and the block raises RemoteRankError with the reason. A rank still
    blocked ``grace`` seconds after seeing the failure exits with status 1.
    """
    stop = threading.Event()
    seen: list[str] = []

    def watch() -> None:
        while not stop.wait(poll):
            try:
                reason = engine.get_failure()
            except Exception:  # the engine is shutting down: nothing more to watch
                return
            if reason is None:
                continue
            seen.append(reason)
            print(f"shardkit: rank {engine.rank} stopping: {reason}", file=sys.stderr, flush=True)
            try:
                engine.ack_failure()
            except Exception:
                pass
            if not stop.wait(grace):
                print(
                    f"shardkit: rank {engine.rank} still blocked {grace:.1f} s after the "
                    f"failure; exiting",
                    file=sys.stderr,
                    flush=True,
                )
                sys.stderr.flush()
                os._exit(1)
            return

    watcher = threading.Thread(target=watch, name="shardkit-fail-fast", daemon=True)
    watcher.start()
    try:
        yield
    except PlanMismatchError:
        # Every rank received every fingerprint and raises this same error:
        # nobody is left waiting, so there is nothing to publish.
        stop.set()
        raise
    except Exception as e:
        stop.set()
        if seen:  # another rank failed first: this error is a consequence
            raise RemoteRankError(seen[0]) from e
        reason = f"rank {engine.rank} failed: {type(e).__name__}: {e}"
        try:
            engine.set_failure(reason)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and engine.failure_acks() < engine.world_size - 1:
                time.sleep(poll)
        except Exception:
            traceback.print_exc()
        raise
    finally:
        stop.set()
