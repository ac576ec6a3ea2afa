"""``python -m shardkit prepare ...``: the Python commands of the package.

``prepare`` (raw text to token files, :func:`shardkit.prepare`) is the one so
far; the C++ command ``shardkit prepare`` runs it. Everything else is the C++
command's (``shardkit --help``).
"""

import sys

from shardkit._prepare import main

__all__ = ["main"]

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "prepare":
        print(
            "usage: python -m shardkit prepare [flags] (the other commands: shardkit --help)",
            file=sys.stderr,
        )
        sys.exit(2)
    sys.exit(main(sys.argv[2:]))
