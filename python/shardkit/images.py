"""Decoding encoded images (JPEG, PNG, WebP) in the C++ core
(shardkit/loader/image_decode.h): RGB uint8 pixels, [height, width, 3],
resized by Pillow's bilinear rule, batches decoded on a pool of C++ threads
with the GIL released.

Formats are told from the bytes' signature. PNG and lossless WebP equal
Pillow's ``Image.open(f).convert("RGB")``; JPEG uses libjpeg-turbo's accurate
IDCT, as Pillow (equal with the same libjpeg-turbo, else within 2 per
channel); the resize equals ``Image.resize((w, h), Image.BILINEAR)``.
Bad bytes (truncated, corrupt, unknown format, a header over ``pixel_limit``
pixels) raise one ValueError naming the field.

>>> import io, numpy as np
>>> from PIL import Image
>>> buf = io.BytesIO()
>>> Image.new("RGB", (40, 30), (200, 10, 10)).save(buf, "PNG")
>>> image_info(buf.getvalue())
('png', 30, 40)
>>> decode_image(buf.getvalue(), size=(15, 20))[0, 0].tolist()
[200, 10, 10]
>>> batch = ImageDecoder(size=(8, 8), threads=2)([buf.getvalue()] * 3)
>>> batch["pixel_values"].shape, batch["image_sizes"].tolist()[0]
((3, 8, 8, 3), [8, 8])
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from shardkit import _core

__all__ = ["ImageDecoder", "decode_image", "image_formats", "image_info", "resize_bilinear"]

# Pillow's decompression-bomb error threshold (2 * PIL.Image.MAX_IMAGE_PIXELS).
DEFAULT_PIXEL_LIMIT = 178956970


def _bytes(data: Any, field: str) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, np.ndarray) and data.dtype == np.uint8:
        return data.tobytes()
    raise ValueError(f"{field}: expected the encoded bytes of an image, got {type(data).__name__}")


def _size(size: Optional[Tuple[int, int]]) -> Tuple[int, int]:
    if size is None:
        return 0, 0
    try:
        h, w = (int(s) for s in size)
    except (TypeError, ValueError):
        raise ValueError(f"size: expected (height, width), got {size!r}") from None
    if h < 1 or w < 1:
        raise ValueError(f"size: sides must be >= 1, got {size!r}")
    return h, w


def image_formats() -> list:
    """The formats this build decodes, e.g. ['jpeg', 'png', 'webp']."""
    return list(_core._image_formats())


def image_info(data: Any, *, field: str = "image", pixel_limit: int = DEFAULT_PIXEL_LIMIT) -> tuple:
    """(format, height, width) read from the header alone (no pixel decoded)."""
    return tuple(_core._image_info(_bytes(data, field), field, int(pixel_limit)))


def decode_image(
    data: Any,
    *,
    size: Optional[Tuple[int, int]] = None,
    max_pixels: Optional[int] = None,
    field: str = "image",
    pixel_limit: int = DEFAULT_PIXEL_LIMIT,
    jpeg_draft: bool = False,
) -> np.ndarray:
    """Pixels [height, width, 3] uint8. ``size=(h, w)``: resized to exactly
    that; else ``max_pixels``: scaled down (both sides by sqrt(max_pixels /
    (h * w)), floored) when larger; else the decoded size.

    ``jpeg_draft=True`` (a faster mode, other pixels): a JPEG at least twice
    the target size is decoded at 1/2, 1/4 or 1/8 scale by libjpeg-turbo
    first, as Pillow's ``im.draft("RGB", (w, h))`` before the resize."""
    h, w = _size(size)
    return _core._decode_image(
        _bytes(data, field),
        field,
        h,
        w,
        int(max_pixels or 0),
        int(pixel_limit),
        bool(jpeg_draft),
    )


def resize_bilinear(pixels: np.ndarray, size: Tuple[int, int]) -> np.ndarray:
    """Pillow's ``Image.resize((w, h), Image.BILINEAR)`` of RGB uint8 pixels
    [height, width, 3]."""
    h, w = _size(size)
    return _core._resize_bilinear(np.ascontiguousarray(pixels, dtype=np.uint8), h, w)


class ImageDecoder:
    """Decodes a batch of encoded images on ``threads`` C++ threads (0: one per
    core) with the GIL released.

    ``decoder(images, samples=None)`` returns a dict:
    ``pixel_values``: uint8 [n, h, w, 3] with ``size=(h, w)``, else every
    image's pixels one after another (flat uint8); ``image_sizes``: int64
    [n, 2] (height, width after the resize); ``image_offsets``: int64 [n + 1],
    image i's bytes in the flat buffer. ``samples[i]`` (the sample image i
    belongs to) only names the sample in errors: ``ValueError("images: sample
    12, image 0: ...")``. ``jpeg_draft``: as in :func:`decode_image`.
    """

    def __init__(
        self,
        *,
        size: Optional[Tuple[int, int]] = None,
        max_pixels: Optional[int] = None,
        threads: int = 0,
        pixel_limit: int = DEFAULT_PIXEL_LIMIT,
        jpeg_draft: bool = False,
    ) -> None:
        self.size = None if size is None else _size(size)
        self.max_pixels = max_pixels
        self.pixel_limit = int(pixel_limit)
        self.jpeg_draft = bool(jpeg_draft)
        self._threads = int(threads)
        self._decoder = self._make()

    def _make(self):
        h, w = _size(self.size)
        return _core._ImageBatchDecoder(
            h, w, int(self.max_pixels or 0), self.pixel_limit, self._threads, self.jpeg_draft
        )

    @property
    def threads(self) -> int:
        return self._decoder.threads

    def __call__(self, images: Sequence[Any], samples: Optional[Sequence[int]] = None) -> dict:
        data = [_bytes(b, "images") for b in images]
        ids = [] if samples is None else [int(s) for s in samples]
        pixels, heights, widths, offsets, n = self._decoder.decode(data, ids)
        sizes = np.stack([heights, widths], axis=1) if n else np.zeros((0, 2), np.int64)
        if self.size is not None:
            pixels = pixels.reshape(n, self.size[0], self.size[1], 3)
        return {"pixel_values": pixels, "image_sizes": sizes, "image_offsets": offsets}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_decoder"]  # a DataLoader worker's copy makes its own threads
        return state

    def __setstate__(self, state: dict) -> None:
        state.setdefault("jpeg_draft", False)  # pickled before the option existed
        self.__dict__.update(state)
        self._decoder = self._make()
