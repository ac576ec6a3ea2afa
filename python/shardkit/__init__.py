"""shardkit: exact, fast data distribution for multi-host accelerator jobs.

Which rank and which dataloader worker gets which item, computed on every rank
from the plan's parameters alone (no communication, no index lists):

>>> import shardkit
>>> plan = shardkit.ShardPlan(10, 4)                 # lmms-eval round robin
>>> list(plan.shard(1))
[1, 5, 9]
>>> plan.counts()
[3, 3, 2, 2]
>>> padded = shardkit.ShardPlan(10, 4, remainder="pad")   # torch DistributedSampler
>>> s = padded.shard(3)
>>> list(s), s.padding, s.mask().tolist()
([3, 7, 1], 1, [True, True, False])
>>> epoch = shardkit.ShardPlan(10**9, 8, shuffle=True, seed=1, epoch=0)
>>> first = epoch.shard(5).numpy(0, 4)              # O(1): nothing is materialised
>>> len(first), first.dtype.name
(4, 'int64')
>>> epoch.audit().exactly_once
True
"""

from shardkit._files import save_state
from shardkit._prepare import prepare
from shardkit.eval import (
    EvalPlan,
    PlanMismatchError,
    ProcessInfo,
    RemoteRankError,
    discover,
    masked_count,
    masked_mean,
    masked_sum,
    pad_for_devices,
    rank_and_world,
    steps_for_count,
)
from shardkit.layout import (
    DataRoles,
    LoadingPlan,
    LocalToGlobal,
    Mesh,
    NamedSharding,
    PartitionSpec,
)
from shardkit.loader import TokenLoader, TrainAudit, TrainPlan, TrainStep, TrainSummary
from shardkit.packing import (
    PackedCollator,
    Packing,
    RankSchedule,
    StreamingPacker,
    balance_ranks,
    collate_packing,
    cp_document_padding,
    cp_rank_work,
    cp_restore_index,
    pack,
    pack_stream,
)
from shardkit.sharding import (
    AuditReport,
    Mixture,
    Shard,
    ShardPlan,
    WhaleChoice,
    whale_choice,
    whale_plan,
)
from shardkit.sources import TokenSource, open_source

__all__ = [
    "AuditReport",
    "Shard",
    "ShardPlan",
    "WhaleChoice",
    "whale_choice",
    "whale_plan",
    "Packing",
    "RankSchedule",
    "pack",
    "StreamingPacker",
    "pack_stream",
    "balance_ranks",
    "collate_packing",
    "PackedCollator",
    "cp_rank_work",
    "cp_restore_index",
    "cp_document_padding",
    "EvalPlan",
    "PlanMismatchError",
    "ProcessInfo",
    "RemoteRankError",
    "discover",
    "rank_and_world",
    "masked_count",
    "masked_mean",
    "masked_sum",
    "pad_for_devices",
    "steps_for_count",
    "TokenLoader",
    "TokenSource",
    "open_source",
    "prepare",
    "save_state",
    "Mixture",
    "DataRoles",
    "TrainPlan",
    "TrainAudit",
    "TrainStep",
    "TrainSummary",
    "LoadingPlan",
    "LocalToGlobal",
    "Mesh",
    "NamedSharding",
    "PartitionSpec",
]
__version__ = "0.1.0"
