"""JAX adapters: global arrays from per-process data, which rows each host loads, and
evaluation collectives (``check_plan``, ``agree_steps``, ``gather_unshard``, ``fail_fast``,
``global_masked_sum`` over JAX's processes; see shardkit._jax_eval).

``make_array_from_process_local_data`` is a drop-in for JAX's function of that
name: the same arguments, the same array, but the index arithmetic (global shape
inference, local-shape validation, which local block feeds which device) is done
by shardkit's C++ core in time proportional to this process's devices (once per
sharding, shapes and process), and each array's blocks move to their devices in one
batched transfer. ``global_batches`` turns a global order (a Shard) or an EvalPlan into
global arrays, each host reading only its rows; ``to_items`` brings outputs back to item
order.

JAX is imported when a function is called, so this module imports without JAX
and without a running distributed runtime.

>>> import numpy as np, jax
>>> from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
>>> mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
>>> sharding = NamedSharding(mesh, P("data"))
>>> x = make_array_from_process_local_data(sharding, np.arange(4.0))
>>> x.shape, x.sharding == sharding
((4,), True)
>>> host_rows(sharding, 8)
[(0, 8)]
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from shardkit._jax_eval import (
    JaxEngine,
    agree_steps,
    check_plan,
    fail_fast,
    gather_unshard,
    global_masked_sum,
)
from shardkit.eval import EvalPlan
from shardkit.layout import LoadingPlan, NamedSharding
from shardkit.sharding import Shard, ShardPlan

__all__ = [
    # layout
    "TokenBatches",
    "global_batches",
    "host_items",
    "host_rows",
    "make_array_from_process_local_data",
    "to_items",
    "to_shardkit",
    # evaluation over JAX's processes
    "JaxEngine",
    "agree_steps",
    "check_plan",
    "fail_fast",
    "gather_unshard",
    "global_masked_sum",
]


def to_shardkit(sharding: Any) -> NamedSharding:
    """The shardkit NamedSharding of a ``jax.sharding.NamedSharding`` (or a shardkit
    one, returned as is)."""
    if isinstance(sharding, NamedSharding):
        return sharding
    if not (hasattr(sharding, "mesh") and hasattr(sharding, "spec")):
        raise ValueError(
            f"sharding: expected a jax.sharding.NamedSharding, got {type(sharding).__name__}"
        )
    return NamedSharding.from_jax(sharding)


_NAME = "make_array_from_process_local_data"


def _layout(sharding: Any) -> tuple:
    """(shardkit NamedSharding, the mesh's devices in row-major order) of a JAX sharding."""
    return to_shardkit(sharding), tuple(sharding.mesh.devices.flat)


def _is_shape_leaf(x: Any) -> bool:
    return x is None or isinstance(x, tuple)


@functools.lru_cache(maxsize=1024)
def _slicing(sharding: Any, local_shape: tuple, global_shape: Any, process: int) -> tuple:
    """(global shape, devices, distinct local blocks as index tuples, block of each
    device) for one (sharding, shapes, process): the index arithmetic of JAX's
    _array_from_process_local_data, done by the C++ core once per configuration (a
    training loop repeats its shapes; JAX caches its index maps the same way)."""
    layout, mesh_devices = _layout(sharding)
    mapping = layout.local_to_global(local_shape, process, global_shape)
    blocks, which, seen = [], [], {}
    for row in mapping.local_slices.tolist():
        key = tuple(map(tuple, row))
        k = seen.get(key)
        if k is None:  # replicas on one host share one block
            k = seen[key] = len(blocks)
            blocks.append(tuple(slice(a, b) for a, b in key))
        which.append(k)
    devices = [mesh_devices[d] for d in mapping.devices.tolist()]
    return mapping.global_shape, devices, blocks, which


def _device_blocks(sharding: Any, data: np.ndarray, global_shape: Any, process: int):
    """(global shape, devices, per-device numpy views of `data`) for this process."""
    if global_shape is not None:
        if None in global_shape:
            raise ValueError(f"global_shape: {tuple(global_shape)} has None; this is not supported")
        global_shape = tuple(map(int, global_shape))
    try:
        plan = _slicing(sharding, data.shape, global_shape, process)
    except TypeError:  # an unhashable sharding: no cache
        plan = _slicing.__wrapped__(sharding, data.shape, global_shape, process)
    shape, devices, blocks, which = plan
    views = [data[b] for b in blocks]
    return shape, devices, [views[k] for k in which]


def _starts(plans: list) -> list:
    starts, k = [], 0
    for plan in plans:
        starts.append(k)
        k += plan[2]
    return starts


def _put(global_shape: tuple, sharding: Any, views: list, devices: list):
    """One jax.Array from per-device numpy blocks in one batched host-to-device transfer:
    JAX's own fast path (what make_array_from_callback uses), or, on a JAX without it,
    the public device_put of the list and make_array_from_single_device_arrays."""
    import jax

    try:
        from jax._src import core
        from jax._src.interpreters import pxla
    except ImportError:
        core = pxla = None
    if pxla is not None and hasattr(pxla, "batched_device_put") and views:
        aval = core.update_aval_with_sharding(
            core.ShapedArray(global_shape, views[0].dtype), sharding
        )
        return pxla.batched_device_put(aval, sharding, views, devices)
    arrays = jax.device_put(views, devices)
    return jax.make_array_from_single_device_arrays(global_shape, sharding, arrays)


def _assemble(shardings: Sequence[Any], leaves: Sequence[Any], shapes: Sequence[Any], process: int):
    """One global jax.Array per leaf from this process's data: every leaf's per-device
    blocks go to their devices in one batched ``jax.device_put``."""
    from jax import dtypes

    plans, values, devices = [], [], []
    for sharding, leaf, shape in zip(shardings, leaves, shapes):
        data = np.asarray(leaf)
        canonical = dtypes.canonicalize_dtype(data.dtype)
        if canonical != data.dtype:  # as JAX: float64 -> float32 unless x64 is enabled
            data = data.astype(canonical)
        global_shape, leaf_devices, views = _device_blocks(sharding, data, shape, process)
        plans.append((global_shape, sharding, len(views)))
        values += views
        devices += leaf_devices
    out = []
    for (global_shape, sharding, count), start in zip(plans, _starts(plans)):
        out.append(
            _put(
                global_shape,
                sharding,
                values[start : start + count],
                devices[start : start + count],
            )
        )
    return out


def make_array_from_process_local_data(sharding: Any, local_data: Any, global_shape: Any = None):
    """Drop-in for ``jax.make_array_from_process_local_data``.

    sharding: a ``jax.sharding.NamedSharding`` or ``PartitionSpec`` (under
    ``jax.set_mesh``), or a pytree prefix of them over ``local_data``; local_data: this
    process's data (a numpy array or a pytree of them); global_shape: the global shape
    (a tuple), a pytree prefix of tuples over ``local_data``, or None to infer it (a
    ValueError names the non-uniform dimensions when it cannot be inferred). Prefixes,
    numpy integers in shapes and the errors (a list global_shape is a pytree, not a
    shape) follow JAX. shardkit's core computes which local block feeds which device
    (on one process the local data is the global array) and each array's blocks move
    in one batched host-to-device transfer; leaves that are not numpy arrays on a
    single process (jax.Arrays, Python scalars) go through ``jax.device_put`` as in JAX.
    """
    import jax
    from jax._src.api import pspec_to_sharding
    from jax._src.tree_util import broadcast_prefix

    leaves, treedef = jax.tree_util.tree_flatten(local_data)
    shardings = [pspec_to_sharding(_NAME, s) for s in broadcast_prefix(sharding, local_data)]
    shapes = broadcast_prefix(global_shape, local_data, is_leaf=_is_shape_leaf)
    if jax.process_count() == 1:
        for shape, leaf in zip(shapes, leaves):
            if shape is not None and shape != np.shape(leaf):
                raise ValueError(
                    "global_shape: on a single process it must be None or equal to "
                    f"local_data.shape; got global_shape={shape} and "
                    f"local_data.shape={np.shape(leaf)}"
                )
        if not all(type(leaf) is np.ndarray for leaf in leaves):
            # jax.Arrays move device to device, Python scalars stay weakly typed: as JAX.
            return jax.device_put(local_data, sharding)
        # The local data is the global array: the same assembly, every dimension whole.
        shapes = [np.shape(leaf) for leaf in leaves]
    arrays = _assemble(shardings, leaves, shapes, jax.process_index())
    return jax.tree_util.tree_unflatten(treedef, arrays)


def _process(process_index: int | None) -> int:
    if process_index is not None:
        return int(process_index)
    import jax

    return jax.process_index()


def host_rows(
    sharding: Any, batch_size: int, *, process_index: int | None = None
) -> list[tuple[int, int]]:
    """The (start, stop) ranges of global batch rows this host must load, merged and in
    the order ``make_array_from_process_local_data`` expects its local rows.

    sharding: a JAX or shardkit NamedSharding whose spec entry 0 splits the batch;
    process_index: defaults to ``jax.process_index()``.
    """
    return LoadingPlan(to_shardkit(sharding), batch_size).rows(_process(process_index))


def _global_order(order, param: str):
    """A ShardPlan as the global order: its one shard (ValueError naming
    `param` unless its world_size is 1); anything else as it is."""
    if not isinstance(order, ShardPlan):
        return order
    if order.world_size != 1:
        raise ValueError(
            f"{param}: a ShardPlan must have world_size 1 to be the global order, got "
            f"{order.world_size}; pass one of its shards instead"
        )
    return order.shard(0)


def host_items(
    sharding: Any,
    batch_size: int,
    order: Shard | ShardPlan,
    step: int,
    *,
    process_index: int | None = None,
):
    """(items, padding) this host reads at ``step``: the global batch of step t is
    entries [t * batch_size, (t + 1) * batch_size) of ``order`` (a Shard, or a
    ShardPlan with world_size 1, the same on every host), and the host reads only
    the entries of its rows, in local-data order."""
    order = _global_order(order, "order")
    plan = LoadingPlan(to_shardkit(sharding), batch_size)
    return plan.items(order, step, _process(process_index))


def _batch_sharding(sharding: Any, ndim: int):
    """The sharding of a rank-`ndim` leaf: dimension 0 split as in `sharding`, the rest
    whole (a mask or a per-row count takes the batch split only)."""
    from jax.sharding import NamedSharding as JaxNamedSharding
    from jax.sharding import PartitionSpec

    spec = tuple(sharding.spec)[:ndim]
    return JaxNamedSharding(sharding.mesh, PartitionSpec(*spec))


def _global_rows(source: Any, step: int, batch_size: int) -> tuple:
    """(items, padding) of every row of the global batch of `step`: entries
    [step * B, (step + 1) * B) of a Shard, or the ranks' batches of an EvalPlan, rank by
    rank (a global batch of world_size * plan.batch_size rows)."""
    if isinstance(source, EvalPlan):
        parts = [source.batch(r, step) for r in range(source.world_size)]
        return np.concatenate([p[0] for p in parts]), ~np.concatenate([p[1] for p in parts])
    # The last step is padded, never dropped: rows past the end repeat the order's head,
    # flagged as padding.
    n = len(source)
    start = step * batch_size
    stop = min(start + batch_size, n)
    items = source.numpy(start, stop)
    padding = np.zeros(batch_size, bool)
    padding[max(n - source.padding - start, 0) :] = True
    if stop - start < batch_size:
        fill = np.arange(batch_size - (stop - start)) % n
        items = np.concatenate([items, source.numpy(0, n)[fill] if n else fill])
    return items, padding


def global_batches(
    sharding: Any,
    source: Any,
    load: Any,
    *,
    batch_size: int | None = None,
):
    """Global ``jax.Array`` batches, each process reading only the rows its devices hold.

    sharding: a ``jax.sharding.NamedSharding`` whose spec entry 0 splits the batch (the
    data axes); source: the global order, the same on every process: a Shard (or a
    ShardPlan with world_size 1) with ``batch_size`` rows per step, or an EvalPlan (the
    global batch of step t is every rank's ``batch(r, t)``, rank by rank); load: maps this
    process's item ids (int64, in local-row order) to a numpy array or a pytree of them
    with those rows first. Yields per step a dict: ``batch`` (the loaded pytree as global
    arrays), ``mask`` (global bool [B], False on padded rows), ``items`` (global int64 [B]
    item ids, so outputs come back to item order: see ``to_items``), ``step``. The last
    step of a Shard is padded (rows past its end repeat its head, masked out), never
    dropped. Replica processes read the same rows (``LoadingPlan``); every process must
    iterate in step.
    """
    source = _global_order(source, "source")
    if isinstance(source, EvalPlan):
        rows_per_step = source.world_size * source.batch_size
        steps = source.num_steps
    elif isinstance(source, Shard):
        if batch_size is None:
            raise ValueError("batch_size: required when the source is a Shard")
        rows_per_step = int(batch_size)
        steps = -(-len(source) // rows_per_step) if rows_per_step > 0 else 0
    else:
        raise ValueError(
            f"source: expected a Shard, a ShardPlan or an EvalPlan, got {type(source).__name__}"
        )
    import jax

    plan = LoadingPlan(to_shardkit(sharding), rows_per_step)
    local_rows = np.concatenate(
        [np.arange(a, b, dtype=np.int64) for a, b in plan.rows(jax.process_index())]
        or [np.zeros(0, np.int64)]
    )
    row_sharding = _batch_sharding(sharding, 1)
    for step in range(steps):
        items, padding = _global_rows(source, step, rows_per_step)
        local = load(items[local_rows])
        leaves, treedef = _tree_flatten(local)
        shardings = [_batch_sharding(sharding, np.ndim(leaf)) for leaf in leaves]
        shapes = [(rows_per_step, *np.shape(leaf)[1:]) for leaf in leaves]
        mine = [~padding[local_rows], items[local_rows]]
        arrays = _assemble_any(
            shardings + [row_sharding, row_sharding],
            leaves + mine,
            shapes + [(rows_per_step,), (rows_per_step,)],
        )
        yield {
            "batch": _tree_unflatten(treedef, arrays[: len(leaves)]),
            "mask": arrays[-2],
            "items": arrays[-1],
            "step": step,
        }


_ROW_KEYS = ("input_ids", "labels", "position_ids", "document_ids", "attention_mask", "block_mask")


class TokenBatches:
    """The equal-steps TokenLoader as global ``jax.Array`` batches for a NamedSharding.

    ``TokenBatches(sharding, tokens, offsets, *, seq_len, batch_size, **loader_options)``:
    ``batch_size`` is the global batch (rows per step over all processes); the sharding's
    spec entry 0 splits it into ``T`` row blocks of ``batch_size / T`` rows (its data
    axes). Block k of every step is TokenLoader rank k of T (equal steps: one global
    TrainPlan, every rank the same number of steps, every document once per epoch), so
    the global batch equals the concatenation of ranks 0..T-1's batches. Each process
    runs loaders only for the blocks its devices hold (``LoadingPlan``), in local-row
    order; processes holding the same blocks (replicas over the model axes) load the same
    rows. ``loader_options`` go to every TokenLoader (``seed``, ``shuffle``, ``epoch``,
    ``mode``, ...; not ``rank`` / ``world_size``).

    Iterating yields per step a dict: ``batch`` (``input_ids``, ``labels``,
    ``position_ids``, ``document_ids`` [B, seq_len] and ``attention_mask`` /
    ``block_mask`` when the loader makes them, as global arrays), ``row_tokens`` (global
    int32 [B]: real tokens per row), ``mask`` (global bool [B], False on filler rows),
    ``documents`` (this process's documents of the step, host numpy), ``step``.
    ``state_dict()`` / ``load_state_dict()``: the plan's state, the same on every process.

    Context parallelism (``cp_size=C`` > 1; docs/context_parallel.md): the sharding's
    spec entry 1 must split the sequence dimension into exactly C blocks (a ``cp`` mesh
    axis, e.g. ``PartitionSpec("dp", "cp")``); column block c of every row is CP rank c's
    slice (``TokenLoader(cp_size=C, cp_rank=c)``), so a device holds the slice of its CP
    rank and the global [B, seq_len] arrays are the rows rearranged CP rank by CP rank
    (``cp_index`` [B, seq_len] is delivered too: each slot's position in the unsplit row,
    -1 on padding). Each process runs a loader per (row block, CP block) it holds and
    reads only those tokens. ``row_tokens`` counts the whole row's real tokens.
    ``cu_seqlens`` are per CP rank and flattened, so they are not delivered: attention
    over the ``cp`` axis takes the keys of a query's document by ``document_ids`` and
    ``position_ids`` (all-gathered over ``cp``).
    """

    def __init__(
        self,
        sharding: Any,
        tokens: Any,
        offsets: Any = None,
        *,
        seq_len: int,
        batch_size: int,
        **loader_options: Any,
    ) -> None:
        from shardkit.loader import TokenLoader

        for name in ("rank", "world_size", "roles", "mesh", "data_axes", "equal_steps"):
            if name in loader_options:
                raise ValueError(
                    f"{name}: TokenBatches takes the data-parallel layout from the sharding "
                    "(and always runs equal steps)"
                )
        if "cp_rank" in loader_options:
            raise ValueError(
                "cp_rank: TokenBatches takes the CP ranks from the sharding's sequence axis"
            )
        import jax

        self.sharding = sharding
        self.batch_size = int(batch_size)
        self._seq_len = seq_len
        cp_size = loader_options.get("cp_size", 1)
        layout = to_shardkit(sharding)
        if cp_size != 1 and len(layout.spec) > 1:
            # The rows' layout: spec entry 0 (entry 1 splits the sequence over CP).
            layout = to_shardkit(_batch_sharding(sharding, 1))
        plan = LoadingPlan(layout, self.batch_size)  # validates batch_size against the spec
        block = layout.shard_shape((self.batch_size,))[0]
        self.num_blocks = self.batch_size // block
        process = jax.process_index()
        #: the loader ranks (row blocks) this process reads, in local-row order
        self.blocks = [k for a, b in plan.rows(process) for k in range(a // block, b // block)]
        if not self.blocks:
            raise ValueError(
                f"sharding: process {process} holds no device of the sharding's mesh, so it "
                "has no rows to load"
            )
        #: the CP ranks (sequence blocks) this process reads, in local-column order
        self.cp_ranks = [None]
        if cp_size != 1:
            self.cp_ranks = self._cp_ranks(to_shardkit(sharding), cp_size, seq_len, process)
        self._loaders = [
            TokenLoader(
                tokens,
                offsets,
                seq_len=seq_len,
                batch_size=block,
                rank=k,
                world_size=self.num_blocks,
                **({} if c is None else {"cp_rank": c}),
                **loader_options,
            )
            for k in self.blocks
            for c in self.cp_ranks
        ]

    def _cp_ranks(self, layout: Any, cp_size: Any, seq_len: int, process: int) -> list:
        """The CP blocks of the sequence dimension this process holds."""
        if not isinstance(cp_size, (int, np.integer)) or isinstance(cp_size, bool):
            raise ValueError(f"cp_size: {cp_size!r} is not an integer")
        cp_size, seq_len = int(cp_size), int(seq_len)
        shape = (self.batch_size, seq_len)
        width = layout.shard_shape(shape)[1] if len(layout.spec) > 1 else seq_len
        if width * cp_size != seq_len:
            raise ValueError(
                f"cp_size: {cp_size} but the sharding's spec entry 1 splits seq_len {seq_len} "
                f"into {seq_len // width} blocks: put the CP mesh axis (of size cp_size) "
                "there, e.g. PartitionSpec('dp', 'cp')"
            )
        columns = layout.process_indices(shape, process)[1]
        return [c for a, b in columns for c in range(a // width, b // width)]

    @property
    def num_steps(self) -> int:
        """Steps of the whole epoch, the same on every process (also after a resume:
        steps are numbered from ``first_step``)."""
        return self._loaders[0].num_steps

    @property
    def first_step(self) -> int:
        """The step of the epoch the next pass starts at (0, or the steps before a
        loaded state); a pass yields ``num_steps - first_step`` steps."""
        return self._loaders[0].first_step

    @property
    def epoch(self) -> int:
        return self._loaders[0].epoch

    def set_epoch(self, epoch: int) -> None:
        """As ``TokenLoader.set_epoch``, for every block."""
        for loader in self._loaders:
            loader.set_epoch(epoch)

    def _steps(self):
        """One pass: the blocks' batches of each step. Every block's loader follows
        the same plan, so all run out at the same step and all move to the next
        epoch together (a zip would stop at the first exhausted loader and leave
        the others behind: misaligned epochs)."""
        its = [iter(loader) for loader in self._loaders]
        while True:
            parts, ended = [], []
            for it in its:
                batch = next(it, None)
                (ended if batch is None else parts).append(batch)
            if ended:
                if parts:  # cannot happen with one plan; never deliver a partial step
                    raise RuntimeError(
                        "TokenBatches: the row blocks' loaders ended at different steps"
                    )
                return
            steps = {int(p["step"]) for p in parts}
            if len(steps) != 1:
                raise RuntimeError(f"TokenBatches: the row blocks are at steps {sorted(steps)}")
            yield parts

    def state_dict(self) -> dict:
        """Where the run stands after the last step yielded (the plan's state: the same
        on every process and for every block)."""
        return self._loaders[0].state_dict()

    def load_state_dict(self, state: dict) -> None:
        for loader in self._loaders:
            loader.load_state_dict(state)

    def __iter__(self):
        import jax

        process = jax.process_index()
        row = _batch_sharding(self.sharding, 1)
        nc = len(self.cp_ranks)
        for parts in self._steps():
            keys = [k for k in _ROW_KEYS if k in parts[0]]
            if nc == 1:
                leaves = [np.concatenate([p[k] for p in parts]) for k in keys]
                row_tokens = np.concatenate([p["row_tokens"] for p in parts]).astype(np.int32)
            else:
                # The (row block, CP block) parts, row block by row block: CP slices side by
                # side, row blocks stacked (the process's local data, in JAX's order).
                keys.append("cp_index")
                grid = [parts[i : i + nc] for i in range(0, len(parts), nc)]
                leaves = [
                    np.concatenate([np.concatenate([p[k] for p in g], axis=1) for g in grid])
                    for k in keys
                ]
                # A row's real tokens: its pieces (the same on every CP rank).
                row_tokens = np.concatenate(
                    [
                        np.bincount(
                            g[0]["rows"], weights=g[0]["lengths"], minlength=len(g[0]["row_tokens"])
                        )
                        for g in grid
                    ]
                ).astype(np.int32)
                parts = [g[0] for g in grid]  # documents: once per row block
            arrays = _assemble(
                [_batch_sharding(self.sharding, np.ndim(x)) for x in leaves] + [row, row],
                leaves + [row_tokens, row_tokens > 0],
                [
                    (self.batch_size, *((self._seq_len,) if nc > 1 else np.shape(x)[1:]))
                    for x in leaves
                ]
                + [(self.batch_size,), (self.batch_size,)],
                process,
            )
            yield {
                "batch": dict(zip(keys, arrays[: len(keys)])),
                "row_tokens": arrays[-2],
                "mask": arrays[-1],
                "documents": np.concatenate([p["documents"] for p in parts]),
                "step": int(parts[0]["step"]),
            }


def _tree_flatten(tree: Any):
    import jax

    return jax.tree_util.tree_flatten(tree)


def _tree_unflatten(treedef: Any, leaves: list):
    import jax

    return jax.tree_util.tree_unflatten(treedef, leaves)


def _assemble_any(shardings: list, leaves: list, shapes: list) -> list:
    """_assemble for this process, also when there is one process (then the rows are
    the whole batch and the global shape is the local one)."""
    import jax

    return _assemble(shardings, leaves, shapes, jax.process_index())


def to_items(outputs: Any, items: Any, mask: Any) -> tuple:
    """(item ids, output rows) in item order from global per-step arrays: the real rows
    (mask True) of every step, sorted by item id, duplicates (replicated padding) gone.
    ``outputs``, ``items``, ``mask``: global ``jax.Array`` [B, ...] of one step, or lists
    of them over steps. Gathers to every process (``process_allgather``)."""
    import jax
    from jax.experimental import multihost_utils

    def host(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    many = isinstance(items, (list, tuple))
    outs = [host(o) for o in (outputs if many else [outputs])]
    ids = [host(i) for i in (items if many else [items])]
    masks = [host(m) for m in (mask if many else [mask])]
    ids_all = np.concatenate([i[m] for i, m in zip(ids, masks)])
    out_all = np.concatenate([o[m] for o, m in zip(outs, masks)])
    order = np.argsort(ids_all, kind="stable")
    ids_sorted = ids_all[order]
    keep = np.ones(len(order), bool)
    keep[1:] = ids_sorted[1:] != ids_sorted[:-1]
    return ids_sorted[keep], out_all[order][keep]
