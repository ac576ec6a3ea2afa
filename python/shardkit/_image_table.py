"""``shardkit image-table``: the sample table of an image-text data set, for
``shardkit multimodal-stats --table`` and ``MultimodalPlan`` / ``ConstantLengthDataset``
(``lengths=``, ``vision_tokens=``) without reading a sample.

Sources: WebDataset tar shards (``--tar a.tar,b.tar``, read by
:class:`shardkit.image_sources.TarImageText`: indexed in the core, the index
cached beside each shard) or a ``datasets`` ``save_to_disk`` folder with a
``datasets.Image`` column (``--hf FOLDER``, :class:`HFImageText`: image sizes
from their headers, no decode). Each image's vision tokens come from its size
by ``--vision-rule`` (``one``: 1 per image; ``qwen``: ``qwen_vision_tokens``;
``tile``: ``tile_vision_tokens``, default options); ``--inline-vision`` adds
them to the sample's length (models that put image tokens in the LM
sequence). The table is written atomically as JSON: ``{"lengths": [...],
"vision_tokens": [[per image], ...]}``. Errors are one line naming the flag,
exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

__all__ = ["main"]

_RULES = ("one", "qwen", "tile")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, status 2
        print(f"shardkit image-table: {message}", file=sys.stderr)
        sys.exit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="shardkit image-table", description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--tar", metavar="PATHS", help="WebDataset tar shards, comma-separated")
    src.add_argument("--hf", metavar="FOLDER", help="a datasets save_to_disk folder")
    p.add_argument("--text", default="ids", help="tar: the text member, ids | json (default ids)")
    p.add_argument("--text-column", default="input_ids", help="hf: the token column")
    p.add_argument("--image-column", default="images", help="hf: the datasets.Image column")
    p.add_argument("--vision-rule", default="one", help="one (default) | qwen | tile")
    p.add_argument("--inline-vision", action="store_true", help="add vision tokens to lengths")
    p.add_argument("--output", required=True, metavar="FILE", help="the table (JSON)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (ValueError, OSError) as e:
        print(f"shardkit image-table: {e}".replace("\n", "\\n"), file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    import json

    import numpy as np

    from shardkit._files import save_state
    from shardkit.image_sources import HFImageText, TarImageText
    from shardkit.multimodal import qwen_vision_tokens, tile_vision_tokens

    if args.vision_rule not in _RULES:
        raise ValueError(f"--vision-rule: expected one, qwen or tile, got {args.vision_rule!r}")
    rule = {"one": None, "qwen": qwen_vision_tokens, "tile": tile_vision_tokens}[args.vision_rule]
    if args.tar is not None:
        paths = args.tar.split(",")
        if not all(paths):
            raise ValueError(f"--tar: an empty path in {args.tar!r}")
        try:
            src = TarImageText(paths, text=args.text, vision_tokens=rule)
        except ValueError as e:
            raise ValueError(f"--tar: {e}") from None
        source = args.tar
    else:
        try:
            src = HFImageText(
                args.hf,
                text_column=args.text_column,
                image_column=args.image_column,
                vision_tokens=rule,
            )
        except FileNotFoundError as e:
            raise ValueError(f"--hf: {e}") from None
        source = args.hf
    table = src.sample_table()
    vision = [list(map(int, v)) for v in table["vision_tokens"]]
    lengths = np.asarray(table["lengths"], dtype=np.int64)
    if args.inline_vision:
        lengths = lengths + np.array([sum(v) for v in vision], dtype=np.int64)
    try:
        save_state(args.output, {"lengths": lengths.tolist(), "vision_tokens": vision})
    except ValueError as e:  # "path: cannot write ...": the flag is --output
        raise ValueError(f"--output: {e}") from None
    out = {
        "source": source,
        "samples": len(vision),
        "images": sum(len(v) for v in vision),
        "tokens": int(lengths.sum()),
        "vision_tokens": sum(sum(v) for v in vision),
        "output": args.output,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"{source}: {out['samples']} samples, {out['images']} images, {out['tokens']} "
            f"tokens, {out['vision_tokens']} vision tokens -> {args.output}"
        )
    return 0
