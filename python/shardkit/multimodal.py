"""Image-text samples: equal steps with the vision encoder's work balanced
across ranks (the core's MultimodalPlan, shardkit/loader/multimodal_plan.h).

A sample has ``lengths[s]`` LM tokens (image tokens included where the model
inlines them) and ``image_counts[s]`` images, each with its vision tokens
(``vision_tokens``: one number per image, samples in order; default 1). Every
epoch, the samples are packed (first-fit decreasing, never split) under
``seq_len`` tokens, ``max_images`` images and ``max_vision_tokens`` vision
tokens per row; packs of similar vision cost form a step and are dealt so that
every rank gets ``batch_size`` rows. Samples that can never fit are dropped and
counted. The state (``state_dict(steps_done)``) resumes exactly, or on another
world size or batch size with every remaining sample exactly once.

>>> from shardkit.multimodal import MultimodalPlan
>>> plan = MultimodalPlan([600, 400, 500, 500], [2, 2, 1, 3],
...                       seq_len=1024, world_size=2, max_images=4)
>>> plan.num_steps, plan.summary["packs"], plan.summary["dropped"]
(1, 2, 0)
>>> sorted(s for r in range(2) for row in plan.rows(r, 0) for s in row)
[0, 1, 2, 3]
>>> plan.balance["mean_vision_ratio"]  # heaviest rank / mean rank, per step
1.0
>>> resumed = MultimodalPlan([600, 400, 500, 500], [2, 2, 1, 3],
...                          seq_len=1024, world_size=2, max_images=4,
...                          state=plan.state_dict(1))
>>> resumed.num_steps
0
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from shardkit import _core
from shardkit._arrays import int64_array as _int64_array
from shardkit._forward import Forwarded as _Forwarded

__all__ = ["MultimodalPlan", "flat_vision_tokens", "qwen_vision_tokens", "tile_vision_tokens"]


def _int64(values: Any, name: str) -> np.ndarray:
    """int64_array (a contiguous 1-D int64 array; floats must be whole
    numbers, never truncated); None is empty."""
    return _int64_array([] if values is None else values, name)


def flat_vision_tokens(per_sample: Sequence[Sequence[int]]) -> tuple:
    """(image_counts, vision_tokens) from one list of per-image vision tokens
    per sample.

    >>> flat_vision_tokens([[64, 64], [], [256]])
    ([2, 0, 1], [64, 64, 256])
    """
    counts = [len(v) for v in per_sample]
    flat = [int(x) for v in per_sample for x in v]
    return counts, flat


def qwen_vision_tokens(
    heights: Sequence[int],
    widths: Sequence[int],
    *,
    patch_size: int = 14,
    merge_size: int = 2,
    min_pixels: int = 56 * 56,
    max_pixels: int = 14 * 14 * 4 * 1280,
) -> np.ndarray:
    """LM tokens of each image under Qwen2-VL / Qwen2.5-VL's smart_resize
    (shardkit/loader/vision_tokens.h), from its height and width in pixels.

    >>> qwen_vision_tokens([224, 1000], [224, 2000]).tolist()
    [64, 1250]
    """
    sizes = _int64(heights, "heights"), _int64(widths, "widths")
    return _core._qwen_vision_tokens(*sizes, patch_size, merge_size, min_pixels, max_pixels)


def tile_vision_tokens(
    heights: Sequence[int],
    widths: Sequence[int],
    *,
    tile_size: int = 512,
    max_side: int = 2048,
    resize_to_max_side: bool = False,
    global_tile: bool = True,
    tokens_per_tile: int = 64,
) -> np.ndarray:
    """LM tokens of each image under nanoVLM's resize-and-split rule: tiles of
    ``tile_size`` pixels, plus one global tile when there is more than one
    (shardkit/loader/vision_tokens.h).

    >>> tile_vision_tokens([1000, 300], [2000, 400]).tolist()  # 2 x 4 + 1 tiles, 1 tile
    [576, 64]
    """
    sizes = _int64(heights, "heights"), _int64(widths, "widths")
    return _core._tile_vision_tokens(
        *sizes, tile_size, max_side, resize_to_max_side, global_tile, tokens_per_tile
    )


class MultimodalPlan:
    """One epoch's equal-steps plan of image-text samples (see the module)."""

    def __init__(
        self,
        lengths: Sequence[int],
        image_counts: Optional[Sequence[int]] = None,
        vision_tokens: Optional[Sequence[int]] = None,
        *,
        seq_len: int,
        batch_size: int = 1,
        world_size: int = 1,
        max_images: Optional[int] = None,
        max_vision_tokens: Optional[int] = None,
        max_images_per_sample: Optional[int] = None,
        vision_cost: str = "tokens",
        mode: str = "pad",
        shuffle: bool = True,
        seed: int = 0,
        epoch: int = 0,
        state: Optional[Dict[str, Any]] = None,
    ) -> None:
        lengths = _int64(lengths, "lengths")
        counts = _int64(
            image_counts if image_counts is not None else np.zeros(len(lengths)), "image_counts"
        )
        vision = _int64(vision_tokens, "vision_tokens")
        self.world_size = _core._index(world_size, "world_size")
        self.batch_size = _core._index(batch_size, "batch_size")
        self.roles = None
        self._plan = _core._MultimodalPlan(
            lengths,
            counts,
            vision,
            None if state is None else json.dumps(state),
            seq_len=seq_len,
            rows_per_rank=self.batch_size,
            world_size=self.world_size,
            max_images=max_images,
            max_vision_tokens=max_vision_tokens,
            max_images_per_sample=max_images_per_sample,
            vision_cost=vision_cost,
            mode=mode,
            shuffle=shuffle,
            seed=seed,
            epoch=epoch,
        )

    num_steps = _Forwarded[int](
        "_plan.num_steps", doc="Steps from the resume point on, the same on every rank."
    )

    def rows(self, rank: int, step: int) -> List[List[int]]:
        """The sample ids of each of ``rank``'s ``batch_size`` rows in ``step``
        (a filler row, last step only, is empty)."""
        return self._plan.rows(rank, step)

    def row_packs(self, rank: int, step: int) -> List[int]:
        """The pack id of each row (-1: filler)."""
        return self._plan.row_packs(rank, step)

    def state_dict(self, steps_done: int) -> Dict[str, Any]:
        """The state after ``steps_done`` steps of this plan: a small dict, the
        same on every rank."""
        return json.loads(self._plan.state_after(steps_done))

    summary = _Forwarded[Dict[str, int]](
        "_plan.summary",
        doc="""samples, dropped (oversize), packs, tokens, images, num_steps,
        filler_rows, dropped_packs and dropped_samples (drop mode).""",
    )

    balance = _Forwarded[Dict[str, Any]](
        "_plan.balance",
        doc="""Per step, heaviest rank / mean rank for LM tokens (``token_ratio``)
        and vision cost (``vision_ratio``); their mean and max over the steps
        without filler rows.""",
    )

    dropped_samples = _Forwarded[np.ndarray](
        "_plan.dropped_samples", doc="The samples dropped as oversize."
    )

    fingerprint = _Forwarded[int](
        "_plan.fingerprint",
        doc="Equal on ranks that will run the same steps (compared at start).",
    )

    def describe(self) -> str:
        s = self.summary
        return (
            f"MultimodalPlan(samples={s['samples']}, world_size={self.world_size}, "
            f"batch_size={self.batch_size}, num_steps={self.num_steps})"
        )
