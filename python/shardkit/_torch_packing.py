"""PyTorch side of packing: a collator returning tensors and a packed
IterableDataset (nanoVLM's ConstantLengthDataset, made deterministic).

Re-exported from ``shardkit.torch``.
"""

from __future__ import annotations

import queue as queue_module
import threading
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import torch
import torch.utils.data as tud

from shardkit import packing
from shardkit.eval import rank_and_world
from shardkit.layout import data_rank_and_world, resolve_roles
from shardkit.loader import TrainPlan
from shardkit.packing import StreamingPacker
from shardkit.sharding import ShardPlan

__all__ = ["PackedCollator", "ConstantLengthDataset", "to_torch"]

_MASKS = ("attention_mask", "block_mask")


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


def _image_count(sample) -> int:
    images = sample.get("images") if isinstance(sample, dict) else None
    return 0 if images is None else len(images)


class ConstantLengthDataset(tud.IterableDataset):
    """Packs a map-style dataset of tokenised samples into fixed-shape batches.

    The role of nanoVLM's ``ConstantLengthDataset`` (a producer thread packs
    samples through a bounded buffer into a bounded queue, with token and image
    budgets), but deterministic: the rank's samples come from a ShardPlan
    (``shuffle``, ``seed``, ``epoch``), they are packed in that order through
    a StreamingPacker with a buffer of ``buffer`` samples, and consecutive packs
    form batches of ``batch_size`` rows. Batch b is built by dataloader worker
    ``b % num_workers`` (the packing itself, lengths only, is cheap and runs in
    every worker), so ``DataLoader(ds, batch_size=None, num_workers=K)`` yields
    the same batches in the same order for every K.

    Equal steps (``equal_steps=True``, the default: a training dataset): the
    samples of *all* ranks go through one global :class:`shardkit.TrainPlan`
    (the lengths of every sample are read once, at construction, unless
    ``lengths`` / ``image_counts`` are given), so every rank yields the same
    number of batches of ``batch_size`` rows and every sample is in exactly one
    batch of one rank; only the last batch can hold filler rows (``row_tokens``
    0, all labels ignored). ``mode``: ``"pad"`` or ``"drop"`` (the final
    partial step dropped and counted); ``cost`` balances each step across
    ranks. ``equal_steps=False``: each rank packs its own ShardPlan share
    (ranks get different batch counts; the last batch may have fewer rows).

    A sample is a dict with ``input_ids`` (and optional ``labels``, used instead
    of input_ids for the loss, and ``images``, any sized sequence; the batch's
    ``images`` lists them in ``image_sample`` order), or a bare sequence of ids.
    Pass ``lengths`` (and ``image_counts``) to avoid reading every sample once to
    measure it. Samples longer than ``seq_len`` or with more than
    ``max_images_per_example`` images follow ``oversize`` (drop by default).

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
        shuffle: bool = False,
        seed: int = 0,
        epoch: int = 0,
        padding_side: str = "right",
        pad_token_id: int = 0,
        ignore_index: int = -100,
        block_mask: bool = False,
        equal_steps: bool = True,
        mode: str = "pad",
        cost: str = "tokens",
        roles: Any = None,
        mesh: Any = None,
        data_axes: Any = None,
    ) -> None:
        super().__init__()
        if equal_steps and mode == "continuous":
            raise ValueError(
                "mode: 'continuous' is not supported by ConstantLengthDataset (it has no "
                "state to carry into the next epoch); use pad or drop, or shardkit.torch."
                "TokenDataset"
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
        self.collator = packing.PackedCollator(
            self.seq_len,
            padding_side=padding_side,
            pad_token_id=pad_token_id,
            ignore_index=ignore_index,
            block_mask=block_mask,
        )
        # Samples with their own labels: those tokens collated alone, padded
        # with ignore_index, give the labels row.
        self.label_collator = packing.PackedCollator(
            self.seq_len,
            padding_side=padding_side,
            pad_token_id=ignore_index,
            ignore_index=ignore_index,
        )
        self._lengths = None if lengths is None else np.asarray(lengths, dtype=np.int64)
        self._images = None if image_counts is None else np.asarray(image_counts, dtype=np.int64)
        if self._lengths is not None and len(self._lengths) != len(dataset):
            raise ValueError(
                f"lengths: has {len(self._lengths)} entries, the dataset {len(dataset)}"
            )
        if self._images is not None and len(self._images) != len(dataset):
            raise ValueError(
                f"image_counts: has {len(self._images)} entries, the dataset {len(dataset)}"
            )
        self.equal_steps, self.mode, self.cost = bool(equal_steps), mode, cost
        if self.equal_steps:
            # Every rank plans every sample: the lengths (and image counts) of
            # the whole dataset, read once here and shipped to the workers.
            n = len(dataset)
            if self._lengths is None:
                self._lengths = np.asarray([self._length(i) for i in range(n)], np.int64)
            if self._images is None and (
                max_images_per_pack is not None or max_images_per_example is not None
            ):
                self._images = np.asarray([self._images_of(i) for i in range(n)], np.int64)
        # Validate everything now, not inside a worker.
        StreamingPacker(self.seq_len, **self.packer_options)
        self._plan()
        if self.equal_steps:
            self.train_plan()
        self._efficiency = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def train_plan(self) -> TrainPlan:
        """Equal steps: the epoch's global plan over every sample of every rank.
        A sample over ``max_images_per_example`` images is dropped (counted in
        ``summary.dropped``), as nanoVLM skips it."""
        images, max_images = self._images, self.packer_options["max_images"]
        cap = self.max_images_per_example
        if images is not None and cap is not None:
            too_many = int(images.sum()) + 1  # more than any pack budget below
            images = np.where(images > cap, too_many, images)
            if max_images is None:
                max_images = too_many - 1
        elif images is not None and max_images is None:
            images = None
        return TrainPlan(
            self._lengths,
            self.seq_len,
            self.batch_size,
            self.world_size,
            mode=self.mode,
            shuffle=self.shuffle,
            seed=self.seed,
            epoch=self.epoch,
            algorithm=self.packer_options["algorithm"],
            buffer=self.packer_options["buffer"],
            cost=self.cost,
            images=images,
            max_images=max_images,
            oversize=self.packer_options["oversize"],
            max_sequences=self.packer_options["max_sequences"],
        )

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
        return _image_count(self.dataset[i])

    def packs(self) -> Iterator[list]:
        """This rank's packs, in order, as lists of (item, start, length, images)
        (item = the dataset index); the same in every worker."""
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
            return s.tokens / (s.packs * self.seq_len) if s.packs else 1.0
        if self._efficiency is None:
            for _ in self.packs():
                pass
        return self._efficiency

    def _batch(self, packs: list) -> dict:
        samples = {}
        chunks, label_chunks, lengths, images, row_offsets, image_list = [], [], [], [], [0], []
        starts = []
        items = []
        for pack in packs:
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
                imgs = sample.get("images") if isinstance(sample, dict) else None
                images.append(0 if imgs is None else len(imgs))
                if imgs is not None:
                    image_list.extend(imgs)
            row_offsets.append(len(lengths))
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
        batch = to_torch(out)
        if image_list:
            batch["images"] = image_list
        return batch

    def _batches_of_worker(self, worker: int, workers: int) -> Iterator[list]:
        if self.equal_steps:
            plan = self.train_plan()
            steps = plan.steps(self.rank, worker)
            for s, rows in enumerate(steps):
                if s % workers == 0:  # steps worker, worker + K, ...
                    yield [[(d, start, length, 0) for d, start, length in row] for row in rows]
            return
        group = []
        b = 0
        for pack in self.packs():
            group.append(pack)
            if len(group) == self.batch_size:
                if b % workers == worker:
                    yield group
                group = []
                b += 1
        if group and b % workers == worker:
            yield group

    def __iter__(self) -> Iterator[dict]:
        info = tud.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
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
                for group in self._batches_of_worker(worker, workers):
                    if not put(self._batch(group)):
                        return
                put(done)
            except BaseException as error:  # surfaced in the consumer
                put(error)

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        try:
            while True:
                item = q.get()
                if item is done:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            thread.join(timeout=5)
