"""Evaluation collectives through JAX multi-process (re-exported by shardkit.jax).

The collectives are ``jax.experimental.multihost_utils.process_allgather``
(one per call); the failure channel of ``fail_fast`` is the key-value store of
the coordination service that ``jax.distributed.initialize`` started. On CPU,
cross-process collectives need ``jax_cpu_collectives_implementation="gloo"``
(set it before ``jax.distributed.initialize``).
"""

from __future__ import annotations

import pickle
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


def _client():
    from jax._src import distributed as jax_distributed

    client = getattr(jax_distributed.global_state, "client", None)
    if client is None:
        raise RuntimeError(
            "JAX multi-process is not initialized: call jax.distributed.initialize first"
        )
    return client


class JaxEngine:
    """The Engine of shardkit.eval over JAX's processes."""

    def __init__(self) -> None:
        import jax
        from jax.experimental import multihost_utils

        self.client = _client()
        self.rank = jax.process_index()
        self.world_size = jax.process_count()
        self._allgather = multihost_utils.process_allgather

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
        """Counts this process out; process 0 hosts the coordination service, so it
        waits up to ``grace`` seconds for the others to leave before it goes."""
        import time

        left = int(self.client.key_value_increment(_LEFT, 1))
        deadline = time.monotonic() + grace
        while self.rank == 0 and left < self.world_size and time.monotonic() < deadline:
            time.sleep(0.05)
            left = int(self.client.key_value_increment(_LEFT, 0))

    def get_failure(self) -> Optional[str]:
        try:
            return self.client.key_value_try_get(_FAILURE)
        except Exception as e:  # NOT_FOUND: no rank has failed
            if "NOT_FOUND" in str(e):
                return None
            raise

    def ack_failure(self) -> None:
        self.client.key_value_increment(_ACKS, 1)

    def failure_acks(self) -> int:
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
