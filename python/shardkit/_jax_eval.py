"""Evaluation collectives through JAX multi-process (re-exported by shardkit.jax).

The collectives are ``jax.experimental.multihost_utils.process_allgather``
(one per call); the failure channel of ``fail_fast`` is the key-value store of
the coordination service that ``jax.distributed.initialize`` started. On CPU,
cross-process collectives need ``jax_cpu_collectives_implementation="gloo"``
(set it before ``jax.distributed.initialize``). A single process (world 1) needs
no ``jax.distributed.initialize``: the collectives are then the identity and
``fail_fast`` re-raises.
"""

from __future__ import annotations

import os
import pickle
import socket
from typing import Any, Optional

import numpy as np

from shardkit import eval as _ev
from shardkit.eval import EvalPlan

__all__ = [
    "JaxEngine",
    "check_plan",
    "agree_steps",
    "gather_unshard",
    "fail_fast",
    "global_masked_sum",
]

_FAILURE = "shardkit/failure"
_ACKS = "shardkit/failure_acks"
_HEARTBEAT = "shardkit/heartbeat"
_LEFT = "shardkit/left_after_failure"
_LEAVE_WAIT_S = 30.0  # beyond grace: how long process 0 waits for the others to leave


def _client():
    """The coordination service's client; None on a single process without
    ``jax.distributed.initialize``."""
    import jax
    from jax._src import distributed as jax_distributed

    client = getattr(jax_distributed.global_state, "client", None)
    if client is None and jax.process_count() > 1:
        raise RuntimeError(
            "JAX multi-process is not initialized: call jax.distributed.initialize first"
        )
    return client


def _coordinator_port() -> Optional[int]:
    from jax._src import distributed as jax_distributed

    address = getattr(jax_distributed.global_state, "coordinator_address", None)
    try:
        return int(str(address).rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None


def _cut_collective_connections() -> int:
    """Shuts down this process's TCP connections other than the coordination
    service's (those are the collectives' connections, gloo's on CPU), so that a
    collective blocked in C++ on this process and on its peers returns with an
    error instead of waiting for a process that has failed. Linux (/proc);
    returns how many connections it shut down (0 elsewhere)."""
    coordinator = _coordinator_port()
    if coordinator is None or not os.path.isdir("/proc/self/fd"):
        return 0
    cut = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            s = socket.socket(fileno=os.dup(fd))
        except (OSError, ValueError):
            continue
        try:
            if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            try:
                peer = s.getpeername()[1]
            except OSError:
                continue  # listening or unconnected
            if coordinator in (peer, s.getsockname()[1]):
                continue  # the coordination service: the failure channel
            s.shutdown(socket.SHUT_RDWR)
            cut += 1
        except OSError:
            pass
        finally:
            s.close()  # the duplicate only
    return cut


class JaxEngine:
    """The Engine of shardkit.eval over JAX's processes."""

    def __init__(self) -> None:
        import jax
        from jax.experimental import multihost_utils

        self.client = _client()
        self.rank = jax.process_index()
        self.world_size = jax.process_count()
        self._allgather = multihost_utils.process_allgather
        if self.client is None:
            # One process, no coordination service: the collectives are the
            # identity, the failure channel is local, and there is no shutdown
            # barrier to avoid (the fail_fast hooks that need peers are off).
            self._local: dict = {}
            self._allgather = lambda x: np.asarray(x)[np.newaxis]
            for hook in (
                "publish_failure",
                "heartbeat",
                "heartbeats",
                "leave_after_failure",
                "cut_collectives",
            ):
                setattr(self, hook, None)

    def allgather_exact(self, local: np.ndarray) -> np.ndarray:
        """[world, *local.shape], bit for bit. Without jax_enable_x64, JAX would
        turn 64-bit values into 32-bit ones, so they travel as pairs of int32."""
        local = np.ascontiguousarray(local)
        if local.dtype.itemsize != 8:
            return np.asarray(self._allgather(local))
        halves = np.asarray(self._allgather(local.reshape(-1).view(np.int32)))
        return halves.view(local.dtype).reshape((self.world_size,) + local.shape)

    def allgather_int64(self, values: np.ndarray) -> np.ndarray:
        return self.allgather_exact(np.asarray(values, dtype=np.int64))

    def allgather_rows(self, local: Any) -> list:
        if isinstance(local, np.ndarray) and local.dtype != object:
            return list(self.allgather_exact(local))
        blob = np.frombuffer(pickle.dumps(list(local)), dtype=np.uint8)
        sizes = self.allgather_int64(np.array([blob.size]))[:, 0]
        padded = np.zeros(int(sizes.max()), np.uint8)
        padded[: blob.size] = blob
        blobs = np.asarray(self._allgather(padded))
        return [pickle.loads(blobs[r, : sizes[r]].tobytes()) for r in range(self.world_size)]

    def set_failure(self, reason: str) -> None:
        if self.client is None:
            self._local[_FAILURE] = reason
            return
        self.client.key_value_set(_FAILURE, reason)

    def publish_failure(self, reason: str) -> str:
        """First writer wins: key_value_set refuses to overwrite."""
        try:
            self.client.key_value_set(_FAILURE, reason)
            return reason
        except Exception as e:
            if "ALREADY_EXISTS" not in str(e):
                raise
            return self.client.key_value_try_get(_FAILURE)

    def heartbeat(self, n: int) -> None:
        self.client.key_value_increment(f"{_HEARTBEAT}/{self.rank}", n)

    def heartbeats(self) -> list:
        return [
            int(self.client.key_value_increment(f"{_HEARTBEAT}/{r}", 0))
            for r in range(self.world_size)
        ]

    def leave_after_failure(self, grace: float) -> None:
        """Counts this process out (each process does so last, just before it
        exits). Process 0 hosts the coordination service, and a process still
        running when the service goes away aborts (SIGABRT, a C++ stack trace), so
        process 0 waits for every other process to leave: up to ``grace`` +
        _LEAVE_WAIT_S seconds (a process still there then is hung outside Python;
        the failed process may spend seconds in its own finally blocks)."""
        import time

        left = int(self.client.key_value_increment(_LEFT, 1))
        deadline = time.monotonic() + grace + _LEAVE_WAIT_S
        while self.rank == 0 and left < self.world_size and time.monotonic() < deadline:
            time.sleep(0.05)
            left = int(self.client.key_value_increment(_LEFT, 0))

    def cut_collectives(self) -> int:
        """Makes collectives blocked on this process and its peers return with an
        error (see _cut_collective_connections); the coordination service stays."""
        return _cut_collective_connections()

    def get_failure(self) -> Optional[str]:
        if self.client is None:
            return self._local.get(_FAILURE)
        try:
            return self.client.key_value_try_get(_FAILURE)
        except Exception as e:  # NOT_FOUND: no rank has failed
            if "NOT_FOUND" in str(e):
                return None
            raise

    def ack_failure(self) -> None:
        if self.client is None:
            self._local[_ACKS] = self._local.get(_ACKS, 0) + 1
            return
        self.client.key_value_increment(_ACKS, 1)

    def failure_acks(self) -> int:
        if self.client is None:
            return self._local.get(_ACKS, 0)
        return int(self.client.key_value_increment(_ACKS, 0))


def check_plan(plan: EvalPlan) -> None:
    """One process_allgather: raises PlanMismatchError on every process unless all
    hold ``plan``."""
    _ev.check_plan(plan, JaxEngine())


def agree_steps(local_count: int, batch_size: int, plan: Optional[EvalPlan] = None) -> int:
    """Dynamic counts: one process_allgather; the same step count on every process."""
    return _ev.agree_steps(local_count, batch_size, JaxEngine(), plan)


def gather_unshard(plan: EvalPlan, local_outputs: Any):
    """All processes' outputs back in item order, on every process."""
    return _ev.gather_unshard(plan, local_outputs, JaxEngine())


def fail_fast(*, grace: float = 2.0):
    """Context manager: one process's exception ends every process with its reason."""
    return _ev.fail_fast(JaxEngine(), grace=grace)


def global_masked_sum(values, mask, *, roles: Optional[Any] = None):
    """(sum of ``values`` over the real slots of every process, number of those
    slots): each process sums its own real slots on the host and one
    ``process_allgather`` adds the partial sums (not a ``psum`` inside a
    computation). ``values`` and ``mask`` are this process's step; with ``roles``
    (e.g. ``plan.roles``) only the reporter of each replica group adds its slots,
    so replicas count once. The same function in ``shardkit.torch`` takes the same
    arguments and returns the same pair."""
    _ev.masked_sum(values, mask)  # validates the mask against the values
    mask = _ev.counted_mask(mask, roles)
    local = np.append(
        np.asarray(_ev.masked_sum(values, mask), np.float64).reshape(-1), _ev.masked_count(mask)
    )
    total = JaxEngine().allgather_exact(local).sum(0)
    return total[:-1].reshape(np.shape(_ev.masked_sum(values, mask))), int(total[-1])
