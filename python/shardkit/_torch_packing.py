"""PyTorch side of packing: a collator returning tensors and a packed
IterableDataset (nanoVLM's ConstantLengthDataset, made deterministic).

Re-exported from ``shardkit.torch``.
"""

from __future__ import annotations

import atexit
import functools
import queue as queue_module
import threading
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.utils.data as tud

from shardkit import _core, packing
from shardkit._torch_eval import check_plan as _check_plan
from shardkit.eval import rank_and_world
from shardkit.layout import data_rank_and_world, resolve_roles
from shardkit.multimodal import MultimodalPlan
from shardkit.packing import StreamingPacker
from shardkit.sharding import ShardPlan

__all__ = ["PackedCollator", "ConstantLengthDataset", "to_torch"]

_MASKS = ("attention_mask", "block_mask")

# The producer threads of passes still open (a pass left unfinished: a
# generator suspended at interpreter exit). At exit Python ends daemon threads
# when they next take the GIL; one ended inside torch's or shardkit's C++ code
# aborts the process ("terminate called without an active exception"), so
# every open pass is stopped and its producer joined first.
_OPEN_PASSES: "dict[int, tuple[threading.Event, threading.Thread]]" = {}


@atexit.register
def _stop_open_passes() -> None:
    for stop, _ in list(_OPEN_PASSES.values()):
        stop.set()
    for _, thread in list(_OPEN_PASSES.values()):
        thread.join(timeout=5)


def to_torch(batch: dict) -> dict:
    """A batch dict of numpy arrays as torch tensors, sharing their buffers (no
    copy); masks (``attention_mask``, ``block_mask``) become ``torch.bool``;
    other values pass through. Every torch batch of shardkit is made here.

    >>> import numpy as np
    >>> b = to_torch({"input_ids": np.arange(3), "attention_mask": np.ones(3, np.uint8), "n": 1})
    >>> b["input_ids"].dtype, b["attention_mask"].dtype, b["n"]
    (torch.int64, torch.bool, 1)
    """
    out = {}
    for key, value in batch.items():
        if isinstance(value, np.ndarray):
            tensor = torch.from_numpy(value)
            out[key] = tensor.bool() if key in _MASKS else tensor
        else:
            out[key] = value
    return out


class PackedCollator(packing.PackedCollator):
    """:class:`shardkit.PackedCollator` returning torch tensors (int64 ids,
    labels and positions, int32 document_ids and cu_seqlens, bool masks).

    >>> c = PackedCollator(seq_len=5, padding_side="left")
    >>> b = c([[[7, 8], [9, 10]], [[1, 2, 3]]])
    >>> b["input_ids"].tolist()
    [[0, 7, 8, 9, 10], [0, 0, 1, 2, 3]]
    >>> b["position_ids"].tolist(), b["cu_seqlens"].dtype
    ([[0, 0, 1, 0, 1], [0, 0, 0, 1, 2]], torch.int32)
    """

    def __call__(self, packs):
        return to_torch(super().__call__(packs))


def _input_ids(sample) -> np.ndarray:
    ids = sample["input_ids"] if isinstance(sample, dict) else sample
    if isinstance(ids, torch.Tensor):
        ids = ids.numpy()
    return np.asarray(ids).reshape(-1)


def _images_and_vision(sample, i: int) -> tuple:
    """(number of images, vision tokens of each) of sample ``i``: its
    ``vision_tokens`` (one per image), else 1 per image."""
    images = sample.get("images") if isinstance(sample, dict) else None
    count = 0 if images is None else len(images)
    vision = sample.get("vision_tokens") if isinstance(sample, dict) else None
    if vision is None:
        return count, [1] * count
    vision = [int(v) for v in np.asarray(vision).reshape(-1)]
    if len(vision) != count:
        raise ValueError(
            f"vision_tokens: sample {i} has {count} images but {len(vision)} vision_tokens"
        )
    return count, vision


class ConstantLengthDataset(tud.IterableDataset):
    """Packs a map-style dataset of image-text samples into fixed-shape batches.

    The role of nanoVLM's ``ConstantLengthDataset`` (a producer thread packs
    samples under token and image budgets into a bounded queue), made
    deterministic and resumable, with the vision encoder's work balanced
    across ranks.

    Equal steps (``equal_steps=True``, the default: a training dataset): the
    samples of *all* ranks go through one global
    :class:`shardkit.multimodal.MultimodalPlan`: packed under ``seq_len``
    tokens, ``max_images_per_pack`` images and ``max_vision_tokens`` vision
    tokens per row (samples never split; a sample that can never fit, or
    with more than ``max_images_per_example`` images, is dropped and counted),
    then dealt so that every rank yields the same number of batches of
    ``batch_size`` rows, every sample is in exactly one row of one rank, and
    each step's vision cost (``vision_cost``: ``"tokens"``, the sum of the
    images' vision tokens, or ``"squared"``, the sum of their squares, for
    attention-bound encoders) is even across ranks. Only the last batch can
    hold filler rows (``row_tokens`` 0, all labels ignored); ``mode="drop"``
    drops that partial step instead (counted). ``shuffle=True`` (default)
    shuffles the samples and the order of steps, per ``seed`` and epoch.

    The sample table (length, images, vision tokens of every sample) is read
    once at construction, one ``dataset[i]`` per sample, unless given:
    ``lengths`` and ``image_counts`` (or ``vision_tokens``: per sample, the
    vision tokens of each of its images) make construction read no sample.
    Each sample read for a batch is checked against the table.

    State: ``state_dict()`` is a small dict, the same on every rank, after the
    batches this object yielded (iterated in this process, or through a
    ``DataLoader`` with ``num_workers=0``); with workers, pass the number of
    batches the loop consumed this pass: ``state_dict(steps_done=k)``.
    ``load_state_dict(state)`` resumes exactly where it was taken, also with
    another ``world_size`` or ``batch_size`` (every remaining sample exactly
    once). When a pass in this process runs out, the dataset stands at the
    start of the next epoch; ``set_epoch(e)`` moves to the start of epoch
    ``e`` unless the dataset already stands in epoch ``e``. With workers, call
    ``set_epoch(e)`` before every pass (as with DistributedSampler).
    ``persistent_workers=True`` is refused (a persistent worker keeps its own
    copy of the dataset and would replay its epoch): the second pass of a
    worker raises ValueError. With ``torch.distributed`` initialized,
    construction compares the plan's fingerprint across ranks (one
    all_gather; ``check_plan=False`` skips it): a rank with other samples or
    options raises PlanMismatchError naming it, on every rank, instead of
    hanging.

    Batch b of a pass is built by dataloader worker ``b % num_workers``, so
    ``DataLoader(ds, batch_size=None, num_workers=K)`` yields the same batches
    in the same order for every K. A batch holds the collator's fields
    (``input_ids``, ``labels``, ``position_ids``, ``document_ids``,
    ``attention_mask``, ``cu_seqlens``, ``image_sample`` [images, 3] = (row,
    document within the row, sample within the batch), ...), ``documents``
    (the sample ids), ``row_tokens``, ``vision_tokens`` (per row), ``step``
    (the batch's index in this pass) and ``images`` (every image of the
    batch's samples, in ``image_sample`` order).

    ``equal_steps=False``: each rank packs its own ShardPlan share through a
    StreamingPacker (``algorithm``, ``buffer``, ``max_sequences``,
    ``oversize``); ranks get different batch counts and no state.

    Images: ``image_decoder=shardkit.images.ImageDecoder(size=(h, w))`` decodes
    every image of a batch (in token order, ``image_sample`` order) on C++
    threads with the GIL released, in the thread that builds batches, and the
    batch carries ``pixel_values`` (uint8 [images, h, w, 3]), ``image_sizes``
    and ``image_offsets`` instead of ``images``. Any callable ``(images,
    samples) -> dict`` may take its place (a model's own processor: its dict's
    numpy arrays become tensors). A dataset with a ``sample_table()`` method
    (``shardkit.image_sources``) gives the table without a sample read.

    A sample is a dict with ``input_ids`` (and optional ``labels``, used instead
    of input_ids for the loss, ``images``, any sized sequence, and
    ``vision_tokens``, one number per image; default 1 per image), or a bare
    sequence of ids.

    >>> data = [{"input_ids": list(range(n))} for n in (5, 3, 7, 2, 6, 1)]
    >>> ds = ConstantLengthDataset(data, seq_len=8, batch_size=2, rank=0, world_size=1)
    >>> [(tuple(b["input_ids"].shape), b["row_tokens"].tolist()) for b in ds]
    [((2, 8), [8, 8]), ((2, 8), [8, 0])]
    >>> ds.efficiency() > 0.9
    True
    """

    def __init__(
        self,
        dataset: Any,
        *,
        seq_len: int,
        batch_size: int = 1,
        buffer: int = 1024,
        queue_size: int = 32,
        algorithm: str = "balanced",
        max_images_per_example: Optional[int] = None,
        max_images_per_pack: Optional[int] = None,
        max_sequences: Optional[int] = None,
        oversize: str = "drop",
        lengths: Optional[Sequence[int]] = None,
        image_counts: Optional[Sequence[int]] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        shuffle: bool = True,
        seed: int = 0,
        epoch: int = 0,
        padding_side: str = "right",
        pad_token_id: int = 0,
        ignore_index: int = -100,
        block_mask: bool = False,
        equal_steps: bool = _core._loader_option_defaults["equal_steps"],
        mode: str = "pad",
        cost: str = "tokens",
        roles: Any = None,
        mesh: Any = None,
        data_axes: Any = None,
        vision_tokens: Optional[Sequence[Sequence[int]]] = None,
        max_vision_tokens: Optional[int] = None,
        vision_cost: str = "tokens",
        check_plan: bool = True,
        group: Any = None,
        image_decoder: Optional[Callable[[list, list], dict]] = None,
    ) -> None:
        super().__init__()
        if image_decoder is not None and not callable(image_decoder):
            raise ValueError(
                f"image_decoder: expected a callable (images, samples) -> dict, e.g. "
                f"shardkit.images.ImageDecoder(size=(224, 224)), got {type(image_decoder).__name__}"
            )
        self.image_decoder = image_decoder
        if (
            lengths is None
            and image_counts is None
            and vision_tokens is None
            and callable(getattr(dataset, "sample_table", None))
        ):
            # An image-text source (shardkit.image_sources) knows its table: no sample is read.
            table = dataset.sample_table()
            lengths, vision_tokens = table["lengths"], table["vision_tokens"]
        if equal_steps and mode == "continuous":
            raise ValueError(
                "mode: 'continuous' is not supported by ConstantLengthDataset (it has no "
                "state to carry into the next epoch); use pad or drop, or shardkit.torch."
                "TokenDataset"
            )
        if equal_steps and max_sequences is not None:
            raise ValueError(
                f"max_sequences: {max_sequences} is not supported with equal_steps=True "
                "(the multimodal plan budgets tokens, images and vision tokens)"
            )
        if equal_steps and oversize != "drop":
            raise ValueError(
                f"oversize: {oversize!r} is not supported with equal_steps=True (image-text "
                "samples are never split; oversize samples are dropped and counted)"
            )
        if equal_steps and cost != "tokens":
            raise ValueError(
                f"cost: {cost!r} is not supported with equal_steps=True; the steps are "
                "balanced by vision_cost= ('tokens' or 'squared')"
            )
        if int(batch_size) < 1:
            raise ValueError(f"batch_size: must be at least 1, got {batch_size}")
        if int(queue_size) < 1:
            raise ValueError(f"queue_size: must be at least 1, got {queue_size}")
        self.dataset = dataset
        self.seq_len = int(seq_len)
        self.batch_size = int(batch_size)
        self.queue_size = int(queue_size)
        self.max_images_per_example = max_images_per_example
        self.max_vision_tokens = max_vision_tokens
        self.vision_cost = vision_cost
        # roles (a shardkit.DataRoles) or mesh= and data_axes=: shard by the
        # data-parallel rank and size; replicas yield identical batches.
        self.roles = resolve_roles(roles, mesh, data_axes)
        rank, world_size = data_rank_and_world(rank, world_size, self.roles)
        self.rank, self.world_size = rank_and_world(rank, world_size)
        self.shuffle, self.seed, self.epoch = shuffle, seed, epoch
        self.packer_options = dict(
            algorithm=algorithm,
            max_sequences=max_sequences,
            oversize=oversize,
            buffer=buffer,
            max_images=max_images_per_pack,
        )
        collator = functools.partial(
            packing.PackedCollator,
            self.seq_len,
            padding_side=padding_side,
            ignore_index=ignore_index,
        )
        self.collator = collator(pad_token_id=pad_token_id, block_mask=block_mask)
        # Samples with their own labels: those tokens collated alone, padded
        # with ignore_index, give the labels row.
        self.label_collator = collator(pad_token_id=ignore_index)
        n = len(dataset)
        self._lengths = None if lengths is None else np.asarray(lengths, dtype=np.int64)
        self._images = None if image_counts is None else np.asarray(image_counts, dtype=np.int64)
        self._vision = None  # flat per-image vision tokens, samples in order
        if vision_tokens is not None:
            if len(vision_tokens) != n:
                raise ValueError(
                    f"vision_tokens: has {len(vision_tokens)} entries, the dataset {n}"
                )
            counts = np.asarray([len(v) for v in vision_tokens], dtype=np.int64)
            if self._images is not None and not np.array_equal(counts, self._images):
                raise ValueError("vision_tokens: its image counts differ from image_counts")
            self._images = counts
            self._vision = np.asarray([int(x) for v in vision_tokens for x in v], dtype=np.int64)
        if self._lengths is not None and len(self._lengths) != n:
            raise ValueError(f"lengths: has {len(self._lengths)} entries, the dataset {n}")
        if self._images is not None and len(self._images) != n:
            raise ValueError(f"image_counts: has {len(self._images)} entries, the dataset {n}")
        self.equal_steps, self.mode, self.cost = bool(equal_steps), mode, cost
        self._state: Optional[dict] = None  # resume point inside self.epoch
        self._steps_done = 0  # batches yielded in this process since the resume point
        self._worker_passes = 0
        if self.equal_steps:
            if self._lengths is None:
                self._read_table()  # one dataset[i] per sample
            if self._images is None:
                self._images = np.zeros(n, dtype=np.int64)
            if self._vision is None:
                self._vision = np.ones(int(self._images.sum()), dtype=np.int64)
            self._table_checked = image_counts is not None or vision_tokens is not None
            self._image_offsets = np.concatenate([[0], np.cumsum(self._images)]).astype(np.int64)
        # Validate everything now, not inside a worker.
        StreamingPacker(self.seq_len, **self.packer_options)
        self._plan()
        if self.equal_steps:
            plan = self.train_plan()
            if check_plan and dist.is_available() and dist.is_initialized():
                _check_plan(plan, group)
        self._efficiency = None

    def _read_table(self) -> None:
        n = len(self.dataset)
        lengths = np.empty(n, dtype=np.int64)
        counts = np.empty(n, dtype=np.int64)
        vision: list = []
        for i in range(n):
            sample = self.dataset[i]
            lengths[i] = _input_ids(sample).size
            counts[i], v = _images_and_vision(sample, i)
            vision.extend(v)
        if self._images is not None and not np.array_equal(counts, self._images):
            raise ValueError("image_counts: differ from the samples' images")
        self._lengths, self._images = lengths, counts
        if self._vision is None:
            self._vision = np.asarray(vision, dtype=np.int64)

    def set_epoch(self, epoch: int) -> None:
        """Moves to the start of epoch ``epoch``, unless the dataset already
        stands in it (resumed there, or the previous pass ran out)."""
        if int(epoch) != self.epoch:
            self.epoch = int(epoch)
            self._state = None
            self._steps_done = 0

    def state_dict(self, steps_done: Optional[int] = None) -> dict:
        """Where the run stands: after the batches yielded in this process, or
        after ``steps_done`` batches of the current pass. The same on every rank.

        >>> data = [{"input_ids": [1] * n, "images": [0] * (n % 3)} for n in range(1, 9)]
        >>> ds = ConstantLengthDataset(data, seq_len=8, rank=0, world_size=2)
        >>> first = next(iter(ds))
        >>> state = ds.state_dict()
        >>> state["segments"]                      # [world_size, batch_size, steps]
        [[2, 1, 1]]
        >>> on_one = ConstantLengthDataset(data, seq_len=8, rank=0, world_size=1)
        >>> on_one.load_state_dict(state)          # elastic: the rest, on one rank
        """
        if not self.equal_steps:
            raise ValueError("equal_steps: state_dict needs equal_steps=True")
        k = self._steps_done if steps_done is None else int(steps_done)
        return self.train_plan().state_dict(k)

    def load_state_dict(self, state: dict) -> None:
        """Continues from ``state`` (from any world size or batch size)."""
        if not self.equal_steps:
            raise ValueError("equal_steps: load_state_dict needs equal_steps=True")
        if not isinstance(state, dict) or "epoch" not in state:
            raise ValueError(f"state: expected a dict from state_dict(), got {state!r}")
        saved = (self.epoch, self._state, self._steps_done)
        self.epoch, self._state, self._steps_done = int(state["epoch"]), dict(state), 0
        try:
            self.train_plan()  # refuses a state of other samples or options now
        except BaseException:
            self.epoch, self._state, self._steps_done = saved
            raise

    def train_plan(self) -> MultimodalPlan:
        """Equal steps: the global plan from the resume point on (every rank's
        rows of every remaining step of the epoch). Built once per (epoch,
        resume point) and kept."""
        key = (self.epoch, repr(self._state))
        cached = self.__dict__.get("_cached_plan")
        if cached is None or cached[0] != key:
            self._cached_plan = cached = (key, self._make_plan())
        return cached[1]

    def _make_plan(self) -> MultimodalPlan:
        plan = MultimodalPlan(
            self._lengths,
            self._images,
            self._vision,
            seq_len=self.seq_len,
            batch_size=self.batch_size,
            world_size=self.world_size,
            max_images=self.packer_options["max_images"],
            max_vision_tokens=self.max_vision_tokens,
            max_images_per_sample=self.max_images_per_example,
            vision_cost=self.vision_cost,
            mode=self.mode,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
            state=self._state,
        )
        plan.roles = self.roles
        return plan

    def __getstate__(self) -> dict:
        # A DataLoader worker started by spawn gets a pickled copy: the plan (a
        # compiled object) is rebuilt there.
        state = dict(self.__dict__)
        state.pop("_cached_plan", None)
        return state

    def _plan(self) -> ShardPlan:
        return ShardPlan(
            len(self.dataset),
            self.world_size,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
        )

    def _length(self, i: int) -> int:
        if self._lengths is not None:
            return int(self._lengths[i])
        return int(_input_ids(self.dataset[i]).size)

    def _images_of(self, i: int) -> int:
        if self._images is not None:
            return int(self._images[i])
        if self.packer_options["max_images"] is None and self.max_images_per_example is None:
            return 0
        return _images_and_vision(self.dataset[i], i)[0]

    def packs(self) -> Iterator[list]:
        """``equal_steps=False``: this rank's packs, in order, as lists of
        (item, start, length, images) (item = the dataset index); the same in
        every worker."""
        shard = self._plan().shard(self.rank)
        packer = StreamingPacker(self.seq_len, **self.packer_options)
        cap = self.max_images_per_example
        for k in range(len(shard)):
            i = shard[k]
            images = self._images_of(i)
            if cap is not None and images > cap:
                continue  # nanoVLM skips samples with too many images
            packer.push(i, self._length(i), images)
            yield from iter(packer.pop, None)
        packer.finish()
        yield from iter(packer.pop, None)
        self._efficiency = packer.efficiency

    def efficiency(self) -> float:
        """Real tokens / (packs x seq_len) of the rank's epoch (equal steps: of
        the global plan's packs)."""
        if self.equal_steps:
            s = self.train_plan().summary
            return s["tokens"] / (s["packs"] * self.seq_len) if s["packs"] else 1.0
        if self._efficiency is None:
            for _ in self.packs():
                pass
        return self._efficiency

    def _batch(self, packs: list) -> dict:
        samples = {}
        chunks, label_chunks, lengths, images, row_offsets, image_list = [], [], [], [], [0], []
        image_samples = []
        starts = []
        items = []
        row_vision = []
        for pack in packs:
            vision_sum = 0
            for item, start, length, _ in pack:
                sample = samples.get(item)
                if sample is None:
                    sample = samples[item] = self.dataset[item]
                ids = _input_ids(sample)
                items.append(len(chunks))
                chunks.append(ids)
                labels = sample.get("labels") if isinstance(sample, dict) else None
                label_chunks.append(ids if labels is None else _input_ids({"input_ids": labels}))
                starts.append(start)
                lengths.append(length)
                count, vision = _images_and_vision(sample, item)
                if self.equal_steps:
                    self._check_sample(item, sample, ids.size, count, vision)
                images.append(count)
                vision_sum += sum(vision)
                if count:
                    image_list.extend(sample["images"])
                    image_samples.extend([item] * count)
            row_offsets.append(len(lengths))
            row_vision.append(vision_sum)
        offsets = np.concatenate([[0], np.cumsum([c.size for c in chunks], dtype=np.int64)])
        args = (
            np.asarray(row_offsets),
            np.asarray(items),
            np.asarray(starts),
            np.asarray(lengths),
            np.asarray(images),
        )
        tokens = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
        out = self.collator.rows(*args, tokens, offsets)
        if any(lc is not ch for lc, ch in zip(label_chunks, chunks)):
            out["labels"] = self.label_collator.rows(*args, np.concatenate(label_chunks), offsets)[
                "labels"
            ]
        out["documents"] = np.asarray([item for pack in packs for item, *_ in pack], dtype=np.int64)
        out["row_tokens"] = np.asarray(
            [sum(length for _, _, length, _ in pack) for pack in packs], dtype=np.int32
        )
        out["vision_tokens"] = np.asarray(row_vision, dtype=np.int64)
        batch = to_torch(out)
        if self.image_decoder is not None:
            # Every image of the batch in token order, decoded at once (ImageDecoder:
            # on C++ threads with the GIL released); its fields join the batch.
            decoded = self.image_decoder(image_list, image_samples)
            batch.update(
                {
                    k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                    for k, v in decoded.items()
                }
            )
        elif image_list:
            batch["images"] = image_list
        return batch

    def _check_sample(self, i: int, sample, length: int, count: int, vision: list) -> None:
        """A sample read for a batch must be the one the plan was made from."""
        if length != int(self._lengths[i]):
            raise ValueError(
                f"lengths: sample {i} has {length} tokens, the table says {self._lengths[i]}"
            )
        if count != int(self._images[i]):
            raise ValueError(
                f"image_counts: sample {i} has {count} images, the table says {self._images[i]}"
            )
        a, b = self._image_offsets[i], self._image_offsets[i + 1]
        if (
            isinstance(sample, dict)
            and "vision_tokens" in sample
            and vision != self._vision[a:b].tolist()
        ):
            raise ValueError(
                f"vision_tokens: sample {i} has {vision}, the table says {self._vision[a:b].tolist()}"
            )

    def _batches_of_worker(self, worker: int, workers: int) -> Iterator[tuple]:
        if self.equal_steps:
            # A worker's copy keeps no plan (it ends with the worker).
            plan = self.train_plan() if tud.get_worker_info() is None else self._make_plan()
            for s in range(worker, plan.num_steps, workers):  # steps worker, worker + K, ...
                rows = plan.rows(self.rank, s)
                yield s, [[(d, 0, int(self._lengths[d]), 0) for d in row] for row in rows]
            return
        group = []
        b = 0
        for pack in self.packs():
            group.append(pack)
            if len(group) == self.batch_size:
                if b % workers == worker:
                    yield b, group
                group = []
                b += 1
        if group and b % workers == worker:
            yield b, group

    def __iter__(self) -> Iterator[dict]:
        info = tud.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        if info is not None:
            self._worker_passes += 1
            if self._worker_passes > 1:
                raise ValueError(
                    "persistent_workers: True is not supported by ConstantLengthDataset: a "
                    "persistent worker keeps its own copy of the dataset and would replay "
                    "its epoch; use persistent_workers=False and set_epoch(e) every pass"
                )
        q: queue_module.Queue = queue_module.Queue(maxsize=self.queue_size)
        done = object()
        stop = threading.Event()

        def put(item) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue_module.Full:
                    continue
            return False

        def produce():
            try:
                for step, group in self._batches_of_worker(worker, workers):
                    batch = self._batch(group)
                    batch["step"] = step
                    if not put(batch):
                        return
                put(done)
            except BaseException as error:  # surfaced in the consumer
                put(error)

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        _OPEN_PASSES[id(stop)] = (stop, thread)
        try:
            while True:
                item = q.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                if info is None and self.equal_steps:
                    self._steps_done += 1  # counted before the caller may ask state_dict()
                yield item
            if info is None and self.equal_steps:
                # The pass ran out: the dataset stands at the start of the next epoch.
                self.epoch += 1
                self._state = None
                self._steps_done = 0
        finally:
            stop.set()
            thread.join(timeout=5)
            _OPEN_PASSES.pop(id(stop), None)
