"""Derives shardkit's embedded demo data set: the token and byte lengths of every
module of the Python standard library (the .py files under sysconfig's 'stdlib'
path, test suites excluded), tokenised with Python's own `tokenize`.

Only the lengths are committed (data/python_stdlib.tsv), not the text. Run with
the interpreter whose library you want measured:

    python3 tools/derive_stdlib_lengths.py > data/python_stdlib.tsv
"""

import io
import os
import sys
import sysconfig
import tokenize

SKIP = {
    tokenize.ENCODING,
    tokenize.ENDMARKER,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
}


def token_count(data: bytes) -> int:
    tokens = tokenize.tokenize(io.BytesIO(data).readline)
    return sum(1 for tok in tokens if tok.type not in SKIP)


def main() -> None:
    root = sysconfig.get_paths()["stdlib"]
    rows = []
    for directory, dirs, files in os.walk(root):
        rel_dir = os.path.relpath(directory, root)
        parts = rel_dir.split(os.sep)
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in ("test", "tests", "idle_test", "site-packages", "__pycache__")
        )
        if any(p in ("test", "tests") for p in parts):
            continue
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                data = f.read()
            try:
                tokens = token_count(data)
            except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
                continue  # a few files are deliberately malformed fixtures
            rows.append((os.path.relpath(path, root), tokens, len(data)))
    out = sys.stdout
    out.write(
        f"# Python {sys.version.split()[0]} standard library modules: "
        f"path, tokens (tokenize), bytes. {len(rows)} documents.\n"
    )
    out.write("path\ttokens\tbytes\n")
    for path, tokens, size in sorted(rows):
        out.write(f"{path}\t{tokens}\t{size}\n")


if __name__ == "__main__":
    main()
