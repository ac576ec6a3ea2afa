"""Files shardkit writes from Python: through the core's one atomic writer."""

from __future__ import annotations

import json
import os
from typing import Any

from shardkit import _core

__all__ = ["save_state"]


def save_state(path: str | os.PathLike[str], state: Any) -> None:
    """Writes a state (``state_dict()``, ``StreamingPacker.state()``, a list of
    them, or any JSON value) to ``path`` as JSON, atomically.

    The text goes to a temporary file in the same directory, is flushed to disk
    and renamed over ``path``: a kill, a full disk or a file-size limit during
    the save leaves the previous file whole (a killed save may leave a
    ``.<name>.tmp.*`` file beside it). Read it back with ``json.load``. Errors:
    ``TypeError`` naming ``path``, ``ValueError`` naming ``state`` (not JSON)
    or ``path`` (``path: cannot write 'ck.json': No space left on device``).

    >>> import json, os, tempfile, shardkit
    >>> path = os.path.join(tempfile.mkdtemp(), "ck.json")
    >>> shardkit.save_state(path, {"epoch": 1, "position": 8})
    >>> json.load(open(path))
    {'epoch': 1, 'position': 8}
    """
    if not isinstance(path, (str, os.PathLike)) or isinstance(path, bytes):
        raise TypeError(f"path: expected a str or os.PathLike, got {type(path).__name__} {path!r}")
    path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"path: expected a str path, got {type(path).__name__} {path!r}")
    try:
        text = json.dumps(state, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"state: is not JSON-serialisable ({e})") from None
    _core._write_file_atomically(path, (text + "\n").encode(), "path")
