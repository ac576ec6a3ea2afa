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
import re
import sys
import threading
import time
import traceback
from typing import Any, Mapping, NamedTuple, Optional, Protocol

import numpy as np

from shardkit import _core
from shardkit._core import EvalPlan, pad_for_devices, replica_sources, steps_for_count

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
    "counted_mask",
    "gather_unshard",
    "fail_fast",
    "masked_sum",
    "masked_mean",
    "masked_count",
    "pad_for_devices",
    "replica_sources",
    "steps_for_count",
]


class _ProcessTuple(NamedTuple):
    rank: int
    world_size: int
    local_rank: int
    source: str  # "torch.distributed", "jax", "torchrun", "openmpi", "pmi", "slurm", "default"


class ProcessInfo(_ProcessTuple):
    """(rank, world_size, local_rank, source), plus ``mesh``: the parallelism mesh the
    running engine holds, or None: torch's current DeviceMesh (``with mesh:``), or
    JAX's mesh (``jax.set_mesh`` / ``with mesh:``). ``roles(data_axes)`` builds this
    rank's DataRoles from it."""

    mesh: Any = None  # an attribute, not a tuple field: the 4-tuple stays as it was

    def roles(self, data_axes: Any, **options: Any) -> Any:
        """``shardkit.DataRoles(self.mesh, data_axes, self, **options)``; ValueError
        naming mesh when the engine holds none."""
        if self.mesh is None:
            raise ValueError(
                "mesh: the engine holds no mesh (torch: enter `with mesh:` for a "
                "DeviceMesh; JAX: jax.set_mesh); pass the mesh to shardkit.DataRoles"
            )
        return _core.DataRoles(self.mesh, data_axes, self.rank, **options)


def _torch_mesh() -> Any:
    """torch's current DeviceMesh (the innermost ``with mesh:``), or None."""
    dm = sys.modules.get("torch.distributed.device_mesh")
    resources = getattr(dm, "_mesh_resources", None)
    stack = getattr(resources, "mesh_stack", None)
    return stack[-1] if stack else None


def _jax_mesh() -> Any:
    """JAX's current concrete mesh (``jax.set_mesh`` or ``with mesh:``), or None."""
    if "jax" not in sys.modules:
        return None
    import jax

    candidates = []
    get_mesh = getattr(jax.sharding, "get_mesh", None)
    if get_mesh is not None:
        candidates.append(get_mesh)
    try:
        from jax._src.mesh import thread_resources

        candidates.append(lambda: thread_resources.env.physical_mesh)
    except ImportError:  # a JAX without the private module
        pass
    for get in candidates:
        try:
            mesh = get()
        except Exception:
            continue
        if mesh is not None and not getattr(mesh, "empty", False):
            return mesh
    return None


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
    """This process's rank, world size and local rank (see the module docstring),
    and ``.mesh``: the engine's mesh when it holds one (torch: the DeviceMesh of
    ``with mesh:``; JAX: ``jax.set_mesh`` or ``with mesh:``), else None.

    ``environ`` replaces ``os.environ`` and disables the engine checks (for
    tests). Raises ``ValueError`` naming the variable when a launcher's value is
    not an integer or the rank is outside its world.
    """
    env = _core._str_mapping(os.environ if environ is None else environ, "environ")
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
            info = ProcessInfo(found[0], found[1], local if (rank, world) == found else 0, name)
            info.mesh = _torch_mesh() if name == "torch.distributed" else _jax_mesh()
            return info
    rank, world, local, source = _core._discover_env(env)
    info = ProcessInfo(rank, world, local, source)
    if environ is None:
        mesh = _torch_mesh()
        info.mesh = mesh if mesh is not None else _jax_mesh()
    return info


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
    if rank is not None:
        rank = _core._index(rank, "rank")
    if world_size is not None:
        world_size = _core._index(world_size, "world_size")
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

    reason = ""  # set on the subclasses fail_fast raises in a blocked thread

    def __str__(self) -> str:
        return super().__str__() or self.reason


def _as_bool(mask) -> np.ndarray:
    m = np.asarray(mask, dtype=bool)
    if m.ndim != 1:
        raise ValueError(f"mask: expected a 1-D mask (one flag per slot), got shape {m.shape}")
    return m


def _check_mask(values: np.ndarray, m: np.ndarray, axis: int) -> None:
    """A mask shorter or longer than the slots would broadcast into a wrong metric."""
    if values.ndim == 0:
        raise ValueError("values: expected one value per slot, got a scalar")
    if not -values.ndim <= axis < values.ndim:
        raise ValueError(f"axis: {axis} is outside the {values.ndim} dimensions of values")
    if m.shape[0] != values.shape[axis]:
        raise ValueError(
            f"mask: has {m.shape[0]} entries but values has {values.shape[axis]} slots along "
            f"axis {axis} (shape {values.shape}); one flag per slot"
        )


def masked_count(mask) -> int:
    """Number of real (unmasked) slots."""
    return int(_as_bool(mask).sum())


def masked_sum(values, mask, axis: int = 0):
    """Sum of values over the real slots (mask True) along ``axis``. Raises
    ValueError naming mask when it does not have one flag per slot."""
    axis = _core._index(axis, "axis")
    values = np.asarray(values)
    m = _as_bool(mask)
    _check_mask(values, m, axis)
    shape = [1] * values.ndim
    shape[axis] = m.shape[0]
    total = np.where(m.reshape(shape), values, 0).sum(axis=axis)
    return total.item() if np.ndim(total) == 0 else total


def masked_mean(values, mask, axis: int = 0):
    """Mean of values over the real slots; NaN when there are none. Raises
    ValueError naming mask when it does not have one flag per slot."""
    total = masked_sum(values, mask, axis=axis)
    n = masked_count(mask)
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


def _exchange(engine: Engine, plan: Optional[Any], local_count: int) -> np.ndarray:
    """One all-gather of (fingerprint, local count, world size, dp_rank) from every
    rank; checks that the ranks hold one plan and that its ranks fit the engine's:
    without roles the plan's world is the engine's, with roles (``plan.roles``) every
    data-parallel rank is held by some rank (``replica_sources``)."""
    fp = _fingerprint_int64(plan) if plan is not None else 0
    roles = getattr(plan, "roles", None)
    if roles is not None and roles.rank != engine.rank:
        raise ValueError(
            f"roles: built for rank {roles.rank} but this is rank {engine.rank} of the "
            "engine; use the group the mesh numbers its ranks in"
        )
    dp_rank = roles.dp_rank if roles is not None else -1
    rows = engine.allgather_int64(np.array([fp, local_count, engine.world_size, dp_rank], np.int64))
    if plan is not None:
        prints = rows[:, 0].astype(np.int64).view(np.uint64).tolist()
        message = _core.compare_fingerprints(prints)
        if message:
            # Every rank sees the same fingerprints, so every rank joins this second
            # exchange: the plans' parameters, to name the one that differs.
            which = ""
            if hasattr(engine, "allgather_rows") and 0 not in prints:  # 0: a rank without plan
                described = engine.allgather_rows([plan.describe()])
                which = _core.compare_plan_descriptions([d[0] for d in described])
            raise PlanMismatchError(
                f"{message}{'; ' + which if which else ''} "
                f"(this is rank {engine.rank} with {plan.describe()})"
            )
        with_roles = rows[:, 3] >= 0
        if with_roles.any() and not with_roles.all():
            raise ValueError(
                f"roles: ranks {np.flatnonzero(with_roles).tolist()} built the plan with "
                f"roles but ranks {np.flatnonzero(~with_roles).tolist()} without "
                f"(this is rank {engine.rank})"
            )
        if roles is not None:
            replica_sources(rows[:, 3].tolist(), plan.world_size)
        elif plan.world_size != engine.world_size:
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
    returns one per item in item order, on every rank.

    One small collective first compares every rank's plan fingerprint and row
    count, so that ranks holding different plans (PlanMismatchError) or a
    rank with the wrong number of rows (ValueError naming the ranks) fail
    together on every rank instead of hanging in the gather or returning
    different results.

    A plan built with roles (``EvalPlan(n, batch_size=B, roles=roles)``): every rank
    of the engine passes its outputs, and each data-parallel rank's outputs are
    taken from one rank, the least of its replica group (``roles.reporter``); the
    other replicas hold the same outputs and are not counted again."""
    rows = _exchange(engine, plan, len(local_outputs))
    expected = plan.num_steps * plan.batch_size
    wrong = {r: int(n) for r, n in enumerate(rows[:, 1].tolist()) if n != expected}
    if wrong:
        raise ValueError(
            f"local_outputs: expected {expected} rows on every rank (num_steps x batch_size); "
            + ", ".join(f"rank {r} has {n}" for r, n in sorted(wrong.items()))
            + f" (this is rank {engine.rank})"
        )
    gathered = engine.allgather_rows(local_outputs)
    if getattr(plan, "roles", None) is not None:
        gathered = [gathered[g] for g in replica_sources(rows[:, 3].tolist(), plan.world_size)]
    return plan.unshard(gathered)


def counted_mask(mask: Any, roles: Optional[Any]) -> np.ndarray:
    """The mask a rank contributes to a global sum: ``mask``, or all False on a
    rank that is not its replica group's reporter (``roles.reports`` False), so
    that replicas holding the same outputs count once."""
    m = _as_bool(mask)
    if roles is not None and not roles.reports:
        return np.zeros_like(m)
    return m


_HEARTBEAT_S = 0.5  # how often a rank inside fail_fast tells the others it is alive
_LEFT_NORMALLY = 1 << 40  # added to a rank's heartbeat when it leaves the block normally
_COLLECTIVE_ERROR = re.compile(
    r"connection (closed|reset|refused)|broken pipe|timed? ?out|gloo|nccl|unavailable|"
    r"deadline_exceeded|socket|peer",
    re.IGNORECASE,
)


def _publish(engine: Engine, reason: str) -> str:
    """Publishes a failure; the first rank to publish wins. Returns the reason
    now on record: ``reason``, or an earlier rank's."""
    publish = getattr(engine, "publish_failure", None)
    if publish is not None:
        return publish(reason)
    earlier = engine.get_failure()
    if earlier:
        return earlier
    engine.set_failure(reason)
    return reason


def _is_collective_error(e: BaseException) -> bool:
    """An error of the communication layer (a peer gone, a timeout): a
    consequence of another rank's failure more often than a cause."""
    name = type(e).__name__
    if name in ("DistBackendError", "DistNetworkError", "XlaRuntimeError", "JaxRuntimeError"):
        return True
    return isinstance(e, (RuntimeError, ConnectionError, TimeoutError)) and bool(
        _COLLECTIVE_ERROR.search(str(e))
    )


def _async_raise(thread_id: int, exc_type: Optional[type]) -> None:
    """Raises ``exc_type`` in another thread at its next Python instruction
    (None clears a pending one). A thread blocked inside a C++ collective sees
    it only when the collective returns."""
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type) if exc_type else None
    )


def _unresponsive(engine: Engine, wait: float) -> list:
    """Ranks whose fail_fast heartbeat did not move during ``wait`` seconds
    (killed, or hung outside Python), excluding this rank and ranks that left
    the block normally."""
    beats = getattr(engine, "heartbeats", None)
    if beats is None:
        return []
    beat = getattr(engine, "heartbeat", None)
    try:
        before = beats()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:  # this rank keeps answering meanwhile
            if beat is not None:
                beat(1)
            time.sleep(_HEARTBEAT_S / 2)
        after = beats()
    except Exception:
        return []
    return [
        r
        for r in range(engine.world_size)
        if r != engine.rank and after[r] == before[r] and after[r] < _LEFT_NORMALLY
    ]


def _cut(engine: Engine) -> bool:
    """Shuts down the engine's collective connections where it can (JAX: gloo's
    sockets); True when it did."""
    cut = getattr(engine, "cut_collectives", None)
    if cut is None:
        return False
    try:
        return bool(cut())
    except Exception:
        return False


def _leave(engine: Engine, grace: float) -> None:
    leave = getattr(engine, "leave_after_failure", None)
    if leave is not None:
        leave(grace)


def _leave_and_exit(engine: Engine, grace: float) -> None:
    """Flushes stdout and stderr, leaves the collectives (``_leave``) and
    ends the process with status 1, whatever leaving raises."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        _leave(engine, grace)
    finally:
        os._exit(1)


@contextlib.contextmanager
def fail_fast(engine: Engine, *, grace: float = 2.0, poll: float = 0.05):
    """Makes one rank's failure end every rank with its reason, in bounded time.

    On an exception inside the block this rank publishes ``"rank R failed:
    Type: message"`` through the engine's side channel (torch: the c10d
    store; JAX: the coordination service's key-value store; the first rank to
    publish wins, later ones never overwrite it), waits up to ``grace``
    seconds for the other ranks to acknowledge, and re-raises.

    On the other ranks a watcher thread sees the failure within ``poll``
    seconds, prints it to stderr, acknowledges, and raises RemoteRankError
    (naming the failed rank and its reason) in the thread that runs the
    block, so that its ``except`` and ``finally`` blocks run. A thread blocked
    inside a collective gets it when the collective returns (torch's gloo
    returns an error once the failed rank's process is gone). JAX: the failed
    rank shuts down its collective connections once the others acknowledged
    (it may stay alive: process 0 hosts the coordination service), and a rank
    still blocked ``grace`` seconds after seeing the failure shuts down its own,
    so blocked collectives return and ``finally`` blocks run; a rank still
    blocked after that (or with an engine that cannot) exits with status 1
    (``os._exit``: its ``finally`` blocks do not run).

    A rank whose own error is a failed collective (a peer gone) first waits up
    to ``grace`` for another rank's report and raises RemoteRankError with
    it; when none comes, it names the ranks that stopped answering (their
    heartbeat, written every 0.5 s inside the block, stood still) instead of
    blaming itself.

    JAX: after a failure, a process ends with status 1 without JAX's shutdown
    barrier (which would wait ~100 s for processes that are gone); process 0,
    which hosts the coordination service, first waits up to ``grace`` seconds
    for the others to leave.
    """
    stop = threading.Event()
    seen: list[str] = []
    owner = threading.get_ident()

    def watch() -> None:
        last_beat = 0.0
        beat = getattr(engine, "heartbeat", None)
        while not stop.wait(poll):
            try:
                if beat is not None and time.monotonic() - last_beat >= _HEARTBEAT_S:
                    beat(1)
                    last_beat = time.monotonic()
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
            if not stop.is_set():
                _async_raise(owner, type("RemoteRankError", (RemoteRankError,), {"reason": reason}))
            if not stop.wait(grace) and _cut(engine):
                # Blocked in a collective that waits for the failed rank: its
                # connections are shut down, so the collective returns with an
                # error, the pending RemoteRankError is raised and the block's
                # except and finally clauses run.
                stop.wait(grace)
            if not stop.is_set():
                print(
                    f"shardkit: rank {engine.rank} still blocked {grace:.1f} s after the "
                    f"failure (inside a collective); exiting with status 1",
                    file=sys.stderr,
                    flush=True,
                )
                _leave_and_exit(engine, grace)
            return

    watcher = threading.Thread(target=watch, name="shardkit-fail-fast", daemon=True)
    watcher.start()
    try:
        yield
    except PlanMismatchError:
        # Every rank received every fingerprint and raises this same error:
        # nobody is left waiting, so there is nothing to publish.
        stop.set()
        _async_raise(owner, None)
        raise
    except Exception as e:
        stop.set()
        _async_raise(owner, None)  # a RemoteRankError still pending would replace this one
        _leave_at_exit(engine, grace)
        if seen:  # another rank failed first: this error is a consequence
            raise RemoteRankError(seen[0]) from e
        if _is_collective_error(e):
            # Another rank's report usually follows its failure within a poll.
            deadline = time.monotonic() + grace
            beat = getattr(engine, "heartbeat", None)
            last_beat = 0.0
            while time.monotonic() < deadline:
                try:
                    if beat is not None and time.monotonic() - last_beat >= _HEARTBEAT_S / 2:
                        beat(1)  # still alive: others resolving the same failure must not blame us
                        last_beat = time.monotonic()
                    earlier = engine.get_failure()
                except Exception:
                    break
                if earlier:
                    raise RemoteRankError(earlier) from e
                time.sleep(poll)
            gone = _unresponsive(engine, 3 * _HEARTBEAT_S)
            if gone:
                ranks = ", ".join(str(r) for r in gone)
                reason = (
                    f"rank{'s' if len(gone) > 1 else ''} {ranks} stopped responding "
                    f"(killed, or hung outside Python); rank {engine.rank} saw "
                    f"{type(e).__name__}: {e}"
                )
                try:
                    reason = _publish(engine, reason)
                except Exception:
                    traceback.print_exc()
                raise RemoteRankError(reason) from e
        reason = f"rank {engine.rank} failed: {type(e).__name__}: {e}"
        try:
            on_record = _publish(engine, reason)
            if on_record != reason:  # another rank published first
                raise RemoteRankError(on_record) from e
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and engine.failure_acks() < engine.world_size - 1:
                time.sleep(poll)
            # The others may be blocked in a collective that waits for this rank,
            # which stays alive (its own finally blocks, or process 0 hosting JAX's
            # coordination service): release them now.
            _cut(engine)
        except RemoteRankError:
            raise
        except Exception:
            traceback.print_exc()
        raise
    else:
        stop.set()
        beat = getattr(engine, "heartbeat", None)
        if beat is not None:
            try:
                beat(_LEFT_NORMALLY)
            except Exception:
                pass
    finally:
        stop.set()
        _async_raise(owner, None)


_exit_hooked = False


def _leave_at_exit(engine: Engine, grace: float) -> None:
    """Engines whose normal exit waits for every process (JAX's shutdown
    barrier) end the process right after the failure has propagated: the
    traceback is printed, ``finally`` blocks and earlier atexit handlers have
    run, then status 1 without the barrier."""
    global _exit_hooked
    if _exit_hooked or getattr(engine, "leave_after_failure", None) is None:
        return
    _exit_hooked = True
    import atexit

    atexit.register(_leave_and_exit, engine, grace)
