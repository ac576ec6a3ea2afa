"""Image-text samples from the formats users have, as map-style datasets for
``shardkit.torch.ConstantLengthDataset``: WebDataset-style tar shards
(``TarImageText``, indexed in the core: shardkit/loader/tar_shard.h) and a
Hugging Face ``datasets`` dataset with ``datasets.Image`` columns
(``HFImageText``).

Text is already tokenised. The sample table (tokens per sample, images'
sizes read from their headers, never decoded) is read once at construction
and handed to the dataset through ``sample_table()``, so ConstantLengthDataset
reads no sample to plan. ``vision_tokens``: a function of (heights, widths)
arrays that returns the tokens per image, e.g. ``shardkit.multimodal.
qwen_vision_tokens``; default 1 per image. ``source[i]`` is a dict with
``input_ids`` (int64 array), ``images`` (the encoded bytes, in order) and
``vision_tokens``; pass ``image_decoder=shardkit.images.ImageDecoder(...)``
to ConstantLengthDataset to get the pixels decoded on C++ threads.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence

import numpy as np

from shardkit import _core
from shardkit.images import DEFAULT_PIXEL_LIMIT, image_info

__all__ = ["HFImageText", "TarImageText"]


class _Table:
    """lengths, image_start (samples + 1), heights, widths, vision tokens (flat)."""

    def _finish_table(self, lengths, image_start, heights, widths, vision_tokens) -> None:
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.image_start = np.asarray(image_start, dtype=np.int64)
        self.image_heights = np.asarray(heights, dtype=np.int64)
        self.image_widths = np.asarray(widths, dtype=np.int64)
        self.image_counts = np.diff(self.image_start)
        if vision_tokens is None:
            self.vision = np.ones(len(self.image_heights), dtype=np.int64)
        else:
            self.vision = np.asarray(
                vision_tokens(self.image_heights, self.image_widths), dtype=np.int64
            )
            if self.vision.shape != self.image_heights.shape:
                raise ValueError(
                    f"vision_tokens: returned {self.vision.shape[0] if self.vision.ndim else 0} "
                    f"values for {len(self.image_heights)} images"
                )

    def __len__(self) -> int:
        return len(self.lengths)

    def _vision_of(self, i: int) -> list:
        a, b = self.image_start[i], self.image_start[i + 1]
        return self.vision[a:b].tolist()

    def sample_table(self) -> dict:
        """{"lengths": tokens per sample, "vision_tokens": per sample, one number
        per image}: what ConstantLengthDataset would otherwise read sample by sample."""
        return {
            "lengths": self.lengths,
            "vision_tokens": [self._vision_of(i) for i in range(len(self))],
        }


class TarImageText(_Table):
    """Samples of WebDataset-style tar shards, in the order of ``paths`` and
    of each shard. A sample's text is its ``.ids`` member (``text="ids"``:
    little-endian int32 token ids) or ``.json`` member (``text="json"``: an
    object whose ``input_ids`` is a list of ints); its images are its .jpg,
    .jpeg, .png and .webp members (also ``0.jpg``, ``1.png``...), in tar
    order. Each shard is indexed once and the index cached beside it
    (``<shard>.shardkit-index.json``, sealed, written atomically, with a
    fingerprint of the shard's size and member headers; ``cache=False`` skips
    it); ``from_cache`` / ``cache_written`` say what happened.

    >>> import io, tarfile, tempfile, os, numpy as np
    >>> from PIL import Image
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "shard-0.tar")
    >>> with tarfile.open(path, "w") as tar:
    ...     for key, n in (("a", 3), ("b", 5)):
    ...         ids = np.arange(n, dtype="<i4").tobytes()
    ...         img = io.BytesIO(); Image.new("RGB", (64, 32)).save(img, "PNG")
    ...         for ext, data in (("ids", ids), ("png", img.getvalue())):
    ...             info = tarfile.TarInfo(f"{key}.{ext}"); info.size = len(data)
    ...             tar.addfile(info, io.BytesIO(data))
    >>> src = TarImageText([path])
    >>> len(src), src.lengths.tolist(), src.image_heights.tolist(), src.cache_written
    (2, [3, 5], [32, 32], True)
    >>> src[1]["input_ids"].tolist(), len(src[1]["images"])
    ([0, 1, 2, 3, 4], 1)
    >>> TarImageText([path]).from_cache
    True
    """

    def __init__(
        self,
        paths: Any,
        *,
        text: str = "ids",
        vision_tokens: Optional[Callable[[np.ndarray, np.ndarray], Any]] = None,
        cache: bool = True,
        pixel_limit: int = DEFAULT_PIXEL_LIMIT,
    ) -> None:
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        self.paths = [os.fspath(p) for p in paths]
        if not self.paths:
            raise ValueError("paths: no tar shard given")
        self._shards = [_core._TarShard(p, text, int(pixel_limit), bool(cache)) for p in self.paths]
        tables = [s.table() for s in self._shards]
        counts = [len(t[0]) for t in tables]
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        image_counts = np.concatenate([np.diff(t[1]) for t in tables])
        self._finish_table(
            np.concatenate([t[0] for t in tables]),
            np.concatenate([[0], np.cumsum(image_counts)]),
            np.concatenate([t[2] for t in tables]),
            np.concatenate([t[3] for t in tables]),
            vision_tokens,
        )
        self.from_cache = all(s.from_cache for s in self._shards)
        self.cache_written = all(s.cache_written or s.from_cache for s in self._shards)
        self.fingerprint = "".join(f"{s.fingerprint:016x}" for s in self._shards)

    def _locate(self, i: int) -> tuple:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index: {i} is outside [0, {n})")
        i %= n
        shard = int(np.searchsorted(self._starts, i, side="right")) - 1
        return shard, i - int(self._starts[shard])

    def key(self, i: int) -> str:
        shard, s = self._locate(int(i))
        return self._shards[shard].key(s)

    def members(self, i: int) -> list:
        """(extension, offset, size) of every member of sample i, in tar order."""
        shard, s = self._locate(int(i))
        return self._shards[shard].members(s)

    def __getitem__(self, i: int) -> dict:
        shard, s = self._locate(int(i))
        src = self._shards[shard]
        return {
            "input_ids": src.read_tokens(s),
            "images": src.read_images(s),
            "vision_tokens": self._vision_of(int(self._starts[shard]) + s),
        }


def _cache_key(dataset: Any, image_column: str) -> Optional[str]:
    """What an HFImageText table is built from: datasets' own fingerprint of the
    dataset, the image column and every Arrow file's path, size and mtime; None
    for a dataset without Arrow files on disk (nothing to bind a cache to)."""
    files = [f["filename"] for f in getattr(dataset, "cache_files", None) or []]
    fingerprint = getattr(dataset, "_fingerprint", None)
    if not files or not fingerprint:
        return None
    parts = [f"datasets:{fingerprint}", f"image_column:{image_column}"]
    for name in files:
        path = os.path.abspath(name)
        try:
            st = os.stat(path)
        except OSError:
            return None
        parts.append(f"file:{path}:{st.st_size}:{st.st_mtime_ns}")
    return "\n".join(parts)


class HFImageText(_Table):
    """Samples of a Hugging Face ``datasets`` dataset (a ``datasets.Dataset``
    or a ``save_to_disk`` folder) with a token column (``text_column``, a list
    of ints) and an image column (``image_column``) of the ``datasets.Image``
    feature, or a list of them. The image bytes are read from the Arrow
    table with pyarrow (Python, no decode; an image stored by ``path`` only is
    read from that file), their sizes from their headers in the core.

    The image sizes are read once per data set: when the dataset lives in Arrow
    files on disk (``load_from_disk``, ``load_dataset``), the table is cached
    beside the first of them (``shardkit-image-table-<hash>.json``, sealed,
    written atomically: shardkit/loader/image_table_cache.h), bound to the
    dataset's fingerprint, ``image_column`` and every Arrow file's path, size
    and modification time, and later opens read it instead of every image's
    header; ``cache=False`` skips it, an in-memory dataset always scans.
    ``from_cache`` / ``cache_written`` say what happened (as for
    ``TarImageText``, ``cache_written`` is True when the cache is on disk,
    read or written; False for a read-only folder). ``vision_tokens`` is
    applied after, so changing it needs no rebuild.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        text_column: str = "input_ids",
        image_column: str = "images",
        vision_tokens: Optional[Callable[[np.ndarray, np.ndarray], Any]] = None,
        pixel_limit: int = DEFAULT_PIXEL_LIMIT,
        cache: bool = True,
    ) -> None:
        import datasets

        if isinstance(dataset, (str, os.PathLike)):
            dataset = datasets.load_from_disk(os.fspath(dataset))
        features = dataset.features
        for column in (text_column, image_column):
            if column not in features:
                raise ValueError(
                    f"{'text_column' if column == text_column else 'image_column'}: "
                    f"{column!r} is not a column of the dataset ({list(features)})"
                )
        feature = features[image_column]
        self._many = isinstance(feature, (list, datasets.Sequence)) or (
            hasattr(datasets, "List") and isinstance(feature, datasets.List)
        )
        inner = feature[0] if isinstance(feature, list) else getattr(feature, "feature", feature)
        if not isinstance(inner, datasets.Image):
            raise ValueError(
                f"image_column: {image_column!r} is {type(inner).__name__}, not datasets.Image"
            )
        self.dataset = dataset
        self.text_column, self.image_column = text_column, image_column
        self.pixel_limit = int(pixel_limit)
        table = dataset.with_format("arrow")[:]  # the Arrow table, no decode
        self._texts = table.column(text_column)
        self._images = table.column(image_column)
        lengths = self._texts.combine_chunks().value_lengths().to_numpy(zero_copy_only=False)
        self.from_cache = self.cache_written = False
        self.cache_path = None
        key = _cache_key(dataset, image_column) if cache else None
        table = None
        if key is not None:
            self.cache_path = os.path.join(
                os.path.dirname(os.path.abspath(dataset.cache_files[0]["filename"])),
                _core._image_table_cache_name(key),
            )
            table = _core._read_image_table_cache(
                self.cache_path, key, self.pixel_limit, len(dataset)
            )
            self.from_cache = self.cache_written = table is not None
        if table is None:
            table = self._scan(len(dataset))
            if key is not None:
                self.cache_written = _core._write_image_table_cache(
                    self.cache_path, key, self.pixel_limit, *table
                )
        counts, heights, widths = table
        self._finish_table(
            lengths,
            np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]),
            heights,
            widths,
            vision_tokens,
        )

    def _scan(self, n: int) -> tuple:
        """(image counts, heights, widths) read from every image's header."""
        heights, widths, counts = [], [], []
        for i in range(n):
            encoded = self._encoded(i)
            counts.append(len(encoded))
            for j, data in enumerate(encoded):
                _, h, w = image_info(
                    data,
                    field=f"{self.image_column}: sample {i}, image {j}",
                    pixel_limit=self.pixel_limit,
                )
                heights.append(h)
                widths.append(w)
        return tuple(np.asarray(v, dtype=np.int64) for v in (counts, heights, widths))

    def _encoded(self, i: int) -> list:
        value = self._images[i].as_py()
        items: Sequence = value if self._many else ([] if value is None else [value])
        out = []
        for j, item in enumerate(items):
            data = None if item is None else item.get("bytes")
            if data is None and item is not None and item.get("path"):
                with open(item["path"], "rb") as f:
                    data = f.read()
            if data is None:
                raise ValueError(f"{self.image_column}: sample {i}, image {j} has no bytes or path")
            out.append(data)
        return out

    def __getitem__(self, i: int) -> dict:
        n = len(self)
        if not -n <= int(i) < n:
            raise IndexError(f"index: {i} is outside [0, {n})")
        i = int(i) % n
        ids = np.asarray(self._texts[i].as_py(), dtype=np.int64)
        return {"input_ids": ids, "images": self._encoded(i), "vision_tokens": self._vision_of(i)}
