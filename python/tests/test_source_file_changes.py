"""A token file changed after open_source is refused, never a crash or other tokens.

Sources map their files (token_source.h): a file cut after it was opened used to
kill the process with SIGBUS on the next read past its new end, and one written in
place delivered other tokens than the ones the source (and its fingerprint) was
opened on. Now every read of a batch (TokenLoader) or a document
(TokenSource.document / document_length / lengths) compares an fstat of each
mapped file with its size and modification time at open, before the copy and
after it. For npy pairs, Megatron
.bin/.idx (written and read back by megatron-core, the oracle of their documents)
and OLMo token files (with their scan cache), each file is truncated, extended or
rewritten in place (same size, new mtime) between open and read: the read is one
ValueError line naming the file and what changed; batches delivered before it are
the uninterrupted run's.
"""

import os
import re

import numpy as np
import pytest
from test_olmo_source import olmo_documents
from test_sources import megatron_documents, needs_megatron

import shardkit

try:
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
except ImportError:  # pragma: no cover - needs_megatron skips those cases
    IndexedDatasetBuilder = None

DOCUMENTS = 6000
EOS = 0
CHANGES = ["truncate", "extend", "rewrite"]


def random_documents(seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 60000, size=int(rng.integers(1, 60))) for _ in range(DOCUMENTS)]


def write_npy(tmp_path, docs, stem="part"):
    """shardkit's pair: (the path to open, [tokens file, offsets file], documents)."""
    tokens = tmp_path / f"{stem}.tokens.npy"
    offsets = tmp_path / f"{stem}.offsets.npy"
    np.save(tokens, np.concatenate(docs).astype(np.int32))
    np.save(offsets, np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64))
    return dict(path=str(tokens)), [tokens, offsets], [d.astype(np.int64) for d in docs]


def write_npy_parts(tmp_path, docs):
    """A directory of four pairs (a source of many files: the loader checks the parts a
    batch reads, token_source.h); the files named are the third part's."""
    folder = tmp_path / "parts"
    folder.mkdir()
    files = []
    for k, part in enumerate(np.array_split(np.arange(len(docs)), 4)):
        _, pair, _ = write_npy(folder, [docs[i] for i in part], stem=f"p{k}")
        files.append(pair)
    return dict(path=str(folder)), files[2], [d.astype(np.int64) for d in docs]


def write_megatron(tmp_path, docs):
    import torch

    prefix = str(tmp_path / "corpus")
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=np.int32)
    for d in docs:
        builder.add_item(torch.from_numpy(d.astype(np.int64)))
        builder.end_document()
    builder.finalize(prefix + ".idx")
    want = megatron_documents(prefix)  # what Megatron reads: the oracle
    files = [tmp_path / "corpus.bin", tmp_path / "corpus.idx"]
    return dict(path=prefix, format="megatron"), files, want


def write_olmo(tmp_path, docs):
    path = tmp_path / "part-0-00000.npy"
    np.concatenate([np.append(d, EOS) for d in docs]).astype(np.uint16).tofile(path)
    kw = dict(path=str(path), format="olmo", token_dtype="uint16", eos_token_id=EOS)
    shardkit.open_source(**kw)  # writes the scan cache, mapped by every later open
    (cache,) = [p for p in tmp_path.iterdir() if ".shardkit-docs" in p.name]
    return kw, [path, cache], olmo_documents([str(path)], np.uint16, EOS)


FORMATS = {
    "npy": (write_npy, ()),
    "megatron": (write_megatron, (needs_megatron,)),
    "olmo": (write_olmo, ()),
}


def change(path, how):
    """Truncates to one page, appends a page, or rewrites every byte past the first
    128 in place (same size) with a modification time surely not the old one."""
    before = os.stat(path)
    with open(path, "r+b") as f:
        if how == "truncate":
            f.truncate(4096)
        elif how == "extend":
            f.seek(0, os.SEEK_END)
            f.write(bytes(4096))
        else:
            data = bytearray(f.read())
            for i in range(128, len(data)):
                data[i] ^= 0x5A
            f.seek(0)
            f.write(bytes(data))
    if how == "rewrite":
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_007))
    after = os.stat(path)
    return before.st_size, after.st_size


def expect_refusal(error, path, sizes, concurrent=False):
    """`concurrent`: the loader's collating threads may stat the file while
    change() writes it. write(2) stamps the modification time first and grows
    the size a page at a time, so such a check may see the new time at the old
    size, or a size between the two."""
    text = str(error)
    assert "\n" not in text.strip(), text
    assert path.name in text and "changed since it was opened" in text, text
    old, new = sizes
    if old == new:
        assert f"same size {old}, written" in text, text
    elif not concurrent:
        assert f"(size {old} -> {new})" in text, text
    else:
        seen = re.search(rf"\(size {old} -> (\d+)\)", text)
        if seen:
            assert min(old, new) <= int(seen.group(1)) <= max(old, new), text
        else:
            assert f"same size {old}, written" in text, text


def cases(formats=FORMATS):
    for fmt, (writer, marks) in formats.items():
        for which in (0, 1):
            for how in CHANGES:
                name = f"{fmt}-{'data' if which == 0 else 'index'}-{how}"
                yield pytest.param(writer, which, how, id=name, marks=marks)


@pytest.mark.parametrize("writer,which,how", list(cases()))
def test_document_reads_refuse_a_changed_file(tmp_path, writer, which, how):
    kw, files, want = writer(tmp_path, random_documents(7))
    source = shardkit.open_source(**kw)
    assert source.num_documents == len(want)
    for d in (0, len(want) // 2, len(want) - 1):  # unchanged: the oracle's tokens
        assert source.document(d).tolist() == want[d].tolist(), d
    sizes = change(files[which], how)
    # The last document lies past a truncated file's end: SIGBUS before.
    for read in (
        lambda: source.document(len(want) - 1),
        lambda: source.document(0),
        source.lengths,
    ):
        with pytest.raises(ValueError) as e:
            read()
        expect_refusal(e.value, files[which], sizes)


@pytest.mark.parametrize("equal_steps", [False, True], ids=["per_rank", "equal_steps"])
@pytest.mark.parametrize(
    "writer,which,how", list(cases(dict(FORMATS, npy_parts=(write_npy_parts, ()))))
)
def test_loader_batches_refuse_a_changed_file(tmp_path, writer, which, how, equal_steps):
    kw, files, want = writer(tmp_path, random_documents(11))
    options = dict(seq_len=64, batch_size=4, seed=3, equal_steps=equal_steps)
    # The oracle: the uninterrupted epoch on the unchanged files.
    oracle = [
        (b["input_ids"].copy(), b["documents"].copy())
        for b in shardkit.TokenLoader(shardkit.open_source(**kw), **options)
    ]
    assert len(oracle) > 100
    loader = shardkit.TokenLoader(shardkit.open_source(**kw), **options)
    got = []
    it = iter(loader)
    for _ in range(2):
        b = next(it)
        got.append((b["input_ids"].copy(), b["documents"].copy()))
    sizes = change(files[which], how)
    with pytest.raises(ValueError) as e:
        for b in it:
            got.append((b["input_ids"].copy(), b["documents"].copy()))
    expect_refusal(e.value, files[which], sizes, concurrent=True)
    # Batches already copied before the change (prefetched) are the oracle's;
    # none after it.
    assert len(got) < len(oracle)
    for (ids, docs), (want_ids, want_docs) in zip(got, oracle):
        assert np.array_equal(docs, want_docs) and np.array_equal(ids, want_ids)


CHILD = r"""
import os, resource, sys
import numpy as np
import shardkit

resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))  # 32 descriptors kept at most
folder, parts = sys.argv[1], int(sys.argv[2])
source = shardkit.open_source(folder, format="npy")
last = source.num_documents - 1
for d in range(source.num_documents):  # every part readable, kept descriptor or not
    assert source.document(d).tolist() == list(range(d * 1000, (d + 1) * 1000)), d
tokens = os.path.join(folder, f"p{parts - 1:03d}.tokens.npy")
offsets = os.path.join(folder, f"p{parts - 1:03d}.offsets.npy")
how = sys.argv[3]
if how == "truncate":
    os.truncate(tokens, 4096)
else:  # another file renamed over the path: the mapped one is no longer the one named
    np.save(offsets + ".new.npy", np.array([0, 1000], dtype=np.int64))
    os.replace(offsets + ".new.npy", offsets)
try:
    source.document(last)
except ValueError as e:
    print(e)
else:
    print("read")
"""


@pytest.mark.parametrize("how", ["truncate", "replace"])
def test_past_the_descriptor_budget_the_path_is_checked(tmp_path, how):
    """A source of more files than a quarter of RLIMIT_NOFILE keeps no descriptor for
    the rest (a Dolma directory of thousands of files must not exhaust the limit):
    those are checked by path, still one line, never SIGBUS."""
    import subprocess
    import sys

    parts = 80  # 160 files, past the limit of 128 if each kept its descriptor; 32 kept
    for p in range(parts):
        np.save(
            tmp_path / f"p{p:03d}.tokens.npy", np.arange(p * 1000, (p + 1) * 1000, dtype=np.int32)
        )
        np.save(tmp_path / f"p{p:03d}.offsets.npy", np.array([0, 1000], dtype=np.int64))
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), str(parts), how],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])  # -7: SIGBUS
    line = run.stdout.strip()
    assert "\n" not in line and "changed since it was opened" in line, line
    if how == "truncate":
        assert "p079.tokens.npy" in line and "(size 4128 -> 4096)" in line, line
    else:
        assert "p079.offsets.npy" in line and "(replaced: inode" in line, line
