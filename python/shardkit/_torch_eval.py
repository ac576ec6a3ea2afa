"""Evaluation collectives through torch.distributed (re-exported by shardkit.torch).

Every function takes an optional process ``group`` (default: the default
group). The failure channel of ``fail_fast`` is the group's c10d store (the
one torchrun's rendezvous or ``init_process_group`` created).
"""

from __future__ import annotations

import datetime
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist

from shardkit import eval as _ev
from shardkit.eval import EvalPlan, discover

__all__ = [
    "TorchEngine",
    "check_plan",
    "agree_steps",
    "gather_unshard",
    "fail_fast",
    "global_masked_sum",
    "init_from_environment",
]

_FAILURE = "shardkit/failure"
_ACKS = "shardkit/failure_acks"
_HEARTBEAT = "shardkit/heartbeat"


class TorchEngine:
    """The Engine of shardkit.eval over an initialized torch.distributed group."""

    def __init__(self, group: Optional[Any] = None) -> None:
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(
                "torch.distributed is not initialized: call "
                "torch.distributed.init_process_group first"
            )
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.store = dist.distributed_c10d._get_default_store()

    def allgather_int64(self, values: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64))
        out = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(out, t, group=self.group)
        return torch.stack(out).numpy()

    def allgather_rows(self, local: Any) -> list:
        if isinstance(local, (np.ndarray, torch.Tensor)):
            t = torch.as_tensor(local)
            out = [torch.empty_like(t) for _ in range(self.world_size)]
            dist.all_gather(out, t.contiguous(), group=self.group)
            return [o.numpy() for o in out] if isinstance(local, np.ndarray) else out
        out: list = [None] * self.world_size
        dist.all_gather_object(out, list(local), group=self.group)
        return out

    def set_failure(self, reason: str) -> None:
        self.store.set(_FAILURE, reason)

    def publish_failure(self, reason: str) -> str:
        """First writer wins (compare_set with an empty expected value)."""
        return self.store.compare_set(_FAILURE, "", reason).decode()

    def heartbeat(self, n: int) -> None:
        self.store.add(f"{_HEARTBEAT}/{self.rank}", n)

    def heartbeats(self) -> list:
        return [int(self.store.add(f"{_HEARTBEAT}/{r}", 0)) for r in range(self.world_size)]

    def get_failure(self) -> Optional[str]:
        if not self.store.check([_FAILURE]):
            return None
        return self.store.get(_FAILURE).decode()

    def ack_failure(self) -> None:
        self.store.add(_ACKS, 1)

    def failure_acks(self) -> int:
        return int(self.store.add(_ACKS, 0))


def check_plan(plan: EvalPlan, group: Optional[Any] = None) -> None:
    """One all_gather: raises PlanMismatchError on every rank unless all hold ``plan``.

    >>> # in every process of a torchrun job:
    >>> # check_plan(EvalPlan(len(dataset), dist.get_world_size(), 32))
    """
    _ev.check_plan(plan, TorchEngine(group))


def agree_steps(
    local_count: int, batch_size: int, plan: Optional[EvalPlan] = None, group: Optional[Any] = None
) -> int:
    """Dynamic counts: one all_gather; the same step count on every rank."""
    return _ev.agree_steps(local_count, batch_size, TorchEngine(group), plan)


def gather_unshard(plan: EvalPlan, local_outputs: Any, group: Optional[Any] = None):
    """All ranks' outputs (tensors/arrays: all_gather; other objects:
    all_gather_object), back in item order, on every rank."""
    return _ev.gather_unshard(plan, local_outputs, TorchEngine(group))


def fail_fast(group: Optional[Any] = None, *, grace: float = 2.0):
    """Context manager: one rank's exception ends every rank with its reason."""
    return _ev.fail_fast(TorchEngine(group), grace=grace)


def global_masked_sum(
    values: torch.Tensor, mask, group: Optional[Any] = None, *, roles: Optional[Any] = None
):
    """(sum of ``values`` over the real slots of every rank, number of those
    slots), with one ``all_reduce``. ``values`` and ``mask`` are this rank's
    step; padded slots (mask False) never count. With ``roles`` (a DataRoles, e.g.
    ``plan.roles``) only the reporter of each replica group adds its slots: its
    replicas hold the same values, and counting them too would multiply the sum by
    the group size. The same function in ``shardkit.jax`` takes the same arguments
    and returns the same pair."""
    m = torch.as_tensor(np.asarray(mask, dtype=bool)).to(values.device)
    if values.dim() == 0 or m.dim() != 1 or m.shape[0] != values.shape[0]:
        raise ValueError(
            f"mask: has shape {tuple(m.shape)} but values has shape {tuple(values.shape)}; "
            "one flag per slot (values.shape[0])"
        )
    m = torch.as_tensor(_ev.counted_mask(m.cpu().numpy(), roles)).to(values.device)
    shape = (-1,) + (1,) * (values.dim() - 1)
    total = torch.where(m.reshape(shape), values, torch.zeros_like(values)).sum(0)
    packed = torch.cat([total.reshape(-1).to(torch.float64), m.sum().reshape(1).to(torch.float64)])
    dist.all_reduce(packed, group=group)
    return packed[:-1].reshape(total.shape), int(packed[-1].item())


def init_from_environment(backend: str = "gloo", timeout_s: float = 60.0) -> None:
    """init_process_group with the discovered rank and world (torchrun, MPI, SLURM)."""
    info = discover()
    dist.init_process_group(
        backend,
        rank=info.rank,
        world_size=info.world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
