"""``python -m shardkit prepare ...``: the Python commands of the package.

``prepare`` (raw text to token files, :func:`shardkit.prepare`) and
``image-table`` (the sample table of an image-text data set,
``shardkit/_image_table.py``); the C++ commands ``shardkit prepare`` and
``shardkit image-table`` run them. Everything else is the C++ command's
(``shardkit --help``).
"""

import sys

from shardkit._image_table import main as image_table_main
from shardkit._prepare import main

__all__ = ["image_table_main", "main"]

if __name__ == "__main__":
    commands = {"prepare": main, "image-table": image_table_main}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(
            "usage: python -m shardkit prepare|image-table [flags] "
            "(the other commands: shardkit --help)",
            file=sys.stderr,
        )
        sys.exit(2)
    sys.exit(commands[sys.argv[1]](sys.argv[2:]))
