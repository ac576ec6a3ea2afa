"""make demo's corpus: real text on this machine to batches, no download.

1. stdlib.jsonl   the Python standard library's own .py files (the interpreter's
                  lib dir, sorted by path, tests and site-packages left out), one
                  JSON line per file: {"path", "text"}
2. tokenizer.json a byte-level BPE tokenizer trained here by the `tokenizers`
                  package on those texts
3. stdlib.bin/.idx  `shardkit prepare` of the JSONL with that tokenizer (Megatron's
                  IndexedDataset format, one document per file, EOS appended)
4. `shardkit loader-stats --source stdlib` with equal steps over 4 ranks: the summary.

Every step whose output exists (and is newer than its input) is skipped, so the
second run is only step 4. Outputs are written under temporary names and
renamed. Usage: demo_corpus.py --cli build/dev/cli/shardkit --out build/demo/stdlib
[--files 300] [--vocab 4096]
"""

import argparse
import glob
import json
import os
import shlex
import subprocess
import sys
import sysconfig
import time


def newer(path, than):
    """Whether `path` exists and is at least as new as `than`."""
    return os.path.exists(path) and os.path.getmtime(path) >= os.path.getmtime(than)


def stdlib_files(count, max_bytes=32_000):
    """The first `count` standard-library .py files in path order (UTF-8, at most
    `max_bytes` each: the demo stays quick)."""
    lib = sysconfig.get_paths()["stdlib"]
    skip = ("site-packages", "test", "tests", "idlelib", "lib2to3")
    found = []
    for path in sorted(glob.glob(os.path.join(lib, "**", "*.py"), recursive=True)):
        parts = os.path.relpath(path, lib).split(os.sep)
        if any(p in skip for p in parts[:-1]) or os.path.getsize(path) > max_bytes:
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            found.append((os.path.relpath(path, lib), text))
            if len(found) == count:
                break
    return lib, found


def write_jsonl(path, count):
    lib, files = stdlib_files(count)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for rel, text in files:
            f.write(json.dumps({"path": rel, "text": text}) + "\n")
    os.replace(tmp, path)
    size = os.path.getsize(path)
    print(f"   {len(files)} files of {lib}, {size / 1e6:.1f} MB -> {path}")


def train_tokenizer(jsonl, path, vocab):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    with open(jsonl, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    start = time.time()
    tok.train_from_iterator(texts, trainer)
    tmp = f"{path}.tmp.{os.getpid()}"
    tok.save(tmp)
    os.replace(tmp, path)
    print(f"   vocabulary {tok.get_vocab_size()} in {time.time() - start:.1f} s -> {path}")


# `shardkit prepare` runs `python -m shardkit prepare`: this interpreter, with this
# checkout's package (python/) first on its path.
ENV = dict(
    os.environ,
    SHARDKIT_PYTHON=sys.executable,
    PYTHONPATH=os.pathsep.join(
        p
        for p in [
            os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"),
            os.environ.get("PYTHONPATH", ""),
        ]
        if p
    ),
)


def run(command):
    print("   $ " + shlex.join(command), flush=True)
    subprocess.run(command, check=True, env=ENV)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cli", required=True, help="the shardkit program")
    parser.add_argument("--out", required=True, help="folder of the corpus")
    parser.add_argument("--files", type=int, default=300, help="standard library files")
    parser.add_argument("--vocab", type=int, default=4096, help="BPE vocabulary size")
    parser.add_argument("--workers", type=int, default=2, help="shardkit prepare --workers")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    jsonl = os.path.join(args.out, "stdlib.jsonl")
    tokenizer = os.path.join(args.out, "tokenizer.json")
    prefix = os.path.join(args.out, "stdlib")

    print("== demo corpus 1/4: the standard library's .py files as JSONL")
    if os.path.exists(jsonl):
        print(f"   {jsonl} exists: skipped")
    else:
        write_jsonl(jsonl, args.files)
    print("== demo corpus 2/4: a byte-level BPE tokenizer trained here (tokenizers)")
    if newer(tokenizer, jsonl):
        print(f"   {tokenizer} exists: skipped")
    else:
        train_tokenizer(jsonl, tokenizer, args.vocab)
    print("== demo corpus 3/4: shardkit prepare -> Megatron .bin/.idx")
    if newer(prefix + ".idx", tokenizer) and newer(prefix + ".bin", tokenizer):
        print(f"   {prefix}.bin/.idx exist: skipped")
    else:
        run(
            [args.cli, "prepare", "--input", jsonl, "--tokenizer", tokenizer]
            + ["--output", prefix, "--workers", str(args.workers)]
        )
    print("== demo corpus 4/4: the loader over it, equal steps on 4 ranks")
    run(
        [args.cli, "loader-stats", "--source", prefix, "--seq-len", "1024", "--batch", "8"]
        + ["--world", "4", "--quiet"]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
