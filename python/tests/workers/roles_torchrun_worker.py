"""One rank of the data-roles tests (test_roles_torchrun.py), run under torchrun with 4
gloo processes and a real torch DeviceMesh.

dp_tp / tp_dp: mesh dp=2 x tp=2 (or tp=2 x dp=2, data axis inner); every rank reads a
    TokenLoader epoch, a DistributedSampler epoch and the EvalPlan steps of its
    data-parallel rank (roles=, no rank/world), a TokenDataLoader epoch (equal steps,
    plan checked over all ranks), its TrainPlan steps, and evaluates an EvalPlan with
    roles (gather_unshard, global_masked_sum); rank 0 writes what each rank received.
pp: mesh dp=2 x pp=2 with broadcast_axes="pp": only pipeline stage 0 reads.
diverge: dp=2 x tp=2 with a ReplicaCheck every step; rank 3 reverses its batch at step 2;
    every rank writes the error it raised.
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from shardkit.torch import (
    DistributedSampler,
    TokenDataLoader,
    TokenDataset,
    gather_unshard,
    global_masked_sum,
)
from torch.distributed.device_mesh import init_device_mesh

from shardkit import DataRoles, EvalPlan, TokenLoader, TrainPlan
from shardkit.layout import ReplicaCheck, ReplicaDivergenceError

NUM_DOCS = 301


def data():
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 60, NUM_DOCS)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return np.arange(offsets[-1], dtype=np.int32), offsets


def equal_steps_and_eval(report, roles, tokens, offsets):
    """Roles with equal steps (the torch TokenDataLoader, whose plan check is one
    all_gather over all 4 ranks, and the TrainPlan), and an evaluation whose outputs
    are gathered and summed over all 4 ranks without counting a replica twice."""
    ds = TokenDataset(tokens, offsets, seq_len=64, batch_size=2, roles=roles, seed=9)
    report["torch_loader"] = [b["documents"].tolist() for b in TokenDataLoader(ds)]
    lengths = np.diff(offsets)
    train = TrainPlan(lengths, 64, 2, roles=roles, seed=4)
    report["train_steps"] = [train.step(roles.dp_rank, s) for s in range(train.num_steps)]
    plan = EvalPlan(NUM_DOCS, batch_size=8, roles=roles)
    outputs, total, count, naive = [], 0.0, 0, 0
    for s in range(plan.num_steps):
        ids, mask = plan.batch(plan.roles.dp_rank, s)
        values = torch.from_numpy(ids.astype(np.float64))  # the "model" output per slot
        outputs.append(values * 10)
        step_sum, step_count = global_masked_sum(values, mask, roles=plan.roles)
        total, count = total + float(step_sum), count + step_count
        naive += global_masked_sum(values, mask)[1]  # every replica counted
    report["unshard"] = gather_unshard(plan, torch.cat(outputs)).tolist()
    report["masked_sum"] = [total, count, naive]


def main():
    out, mode = Path(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    names = {"dp_tp": ("dp", "tp"), "tp_dp": ("tp", "dp"), "pp": ("dp", "pp")}
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=names.get(mode, ("dp", "tp")))
    roles = DataRoles(mesh, "dp", broadcast_axes="pp" if mode == "pp" else ())
    tokens, offsets = data()
    report = {
        "rank": rank,
        "dp_rank": roles.dp_rank,
        "dp_size": roles.dp_size,
        "group": roles.replica_group,
        "loads": roles.loads,
        "source": roles.source,
        "saves": roles.saves,
    }
    if mode == "diverge":
        plan = EvalPlan(NUM_DOCS, roles.dp_size, 8)
        check = ReplicaCheck(roles, "torch", every=1)
        try:
            for step in range(plan.num_steps):
                ids, _ = plan.batch(roles.dp_rank, step)
                if rank == 3 and step == 2:
                    ids = ids[::-1]
                check.check(step, ids)
            report["error"] = None
        except ReplicaDivergenceError as e:
            report["error"] = str(e)
    elif roles.loads:
        loader = TokenLoader(tokens, offsets, seq_len=64, batch_size=2, roles=roles, seed=9)
        report["loader"] = [b["documents"].tolist() for b in loader]
        sampler = DistributedSampler(range(NUM_DOCS), roles=roles, seed=3)
        report["sampler"] = list(sampler)
        plan = EvalPlan(NUM_DOCS, roles.dp_size, 8)
        report["eval"] = [plan.batch(roles.dp_rank, s)[0].tolist() for s in range(plan.num_steps)]
    if mode in ("dp_tp", "tp_dp"):  # every rank takes part in these collectives
        equal_steps_and_eval(report, roles, tokens, offsets)
    everything = [None] * dist.get_world_size()
    dist.all_gather_object(everything, report)
    if rank == 0:
        (out / f"{mode}.json").write_text(json.dumps(everything))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
