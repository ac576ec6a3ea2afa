"""Packed token batches from a memory-mapped file, side by side in one run:

  shardkit   TokenLoader (C++: read -> stream-pack bfd -> collate), everything
             in the calling thread (num_threads=0), i.e. one core;
  torch      a torch DataLoader (num_workers=0, one core) over the same .npy,
             memory-mapped by numpy: an IterableDataset streams the documents
             through a 1024-document buffer packed by best-fit decreasing in
             Python, and a TRL-style collate builds the same padding-free batch
             (input_ids, labels with -100 on each sequence start, position_ids,
             document ids, cu_seqlens);
  memcpy     one-core copy bandwidth of this machine per CPU s (bench_util: numpy copyto
             of 256 MiB, streaming, and of one batch's bytes in cache).

Both loaders produce [batch, seq_len] int64 batches of the same documents (the
shardkit run is not shuffled, so both read the file front to back). Prints the
machine, the sizes, both throughputs and the ratios.

"Per core" is measured in CPU time of the measuring thread (time.thread_time):
every side runs in that one thread, and on a shared machine wall time mostly
measures the other tenants. Wall-clock rates are printed beside them.

    PYTHONPATH=python .venv/bin/python bench/loader_vs_torch.py [--tokens 20e6]
"""

import argparse
import bisect
import os
import tempfile
import time

import bench_util
import numpy as np
import torch
import torch.utils.data as tud

torch.set_num_threads(1)


def make_data(directory, num_tokens, seed=0):
    rng = np.random.default_rng(seed)
    lengths = []
    total = 0
    while total < num_tokens:  # lognormal document lengths (median ~ 400 tokens)
        chunk = np.clip(rng.lognormal(6.0, 1.2, 100_000).astype(np.int64) + 1, 1, 32_768)
        lengths.append(chunk)
        total += int(chunk.sum())
    lengths = np.concatenate(lengths)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), num_tokens)) + 1]
    offsets = np.zeros(len(lengths) + 1, np.int64)
    offsets[1:] = np.cumsum(lengths)
    tokens = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    np.save(os.path.join(directory, "tokens.npy"), tokens)
    np.save(os.path.join(directory, "offsets.npy"), offsets)
    return int(offsets[-1]), len(lengths)


# ---- the torch side: Python packing (TRL-style) ---------------------------


def bfd(lengths, capacity):
    """Best-fit decreasing over one buffer: bins as lists of indices."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    room, bins = [], []  # room sorted ascending, bins aligned with it
    for i in order:
        k = bisect.bisect_left(room, lengths[i])
        if k == len(room):
            bins.insert(0, [i])
            room.insert(0, capacity - lengths[i])
            k = 0
        else:
            left = room.pop(k) - lengths[i]
            b = bins.pop(k)
            b.append(i)
            j = bisect.bisect_left(room, left)
            room.insert(j, left)
            bins.insert(j, b)
    return bins


class PackedRows(tud.IterableDataset):
    """Documents from the memory-mapped file, split at seq_len, packed in a
    buffer by BFD; yields one row (a list of token arrays) at a time."""

    def __init__(self, directory, seq_len, buffer=1024):
        self.directory, self.seq_len, self.buffer = directory, seq_len, buffer

    def __iter__(self):
        tokens = np.load(os.path.join(self.directory, "tokens.npy"), mmap_mode="r")
        offsets = np.load(os.path.join(self.directory, "offsets.npy"))
        pending = []
        for d in range(len(offsets) - 1):
            doc = tokens[offsets[d] : offsets[d + 1]]
            for s in range(0, len(doc), self.seq_len):
                pending.append(doc[s : s + self.seq_len])
            if len(pending) >= self.buffer:
                yield from self._pack(pending)
                pending = []
        yield from self._pack(pending)

    def _pack(self, pieces):
        for b in bfd([len(p) for p in pieces], self.seq_len):
            yield [pieces[i] for i in b]


def trl_collate(rows, seq_len=4096, batch_size=8):
    """Padding-free flattening as TRL/transformers do it, into fixed shapes."""
    input_ids = torch.zeros((batch_size, seq_len), dtype=torch.int64)
    labels = torch.full((batch_size, seq_len), -100, dtype=torch.int64)
    position_ids = torch.zeros((batch_size, seq_len), dtype=torch.int64)
    document_ids = torch.full((batch_size, seq_len), -1, dtype=torch.int32)
    cu = [0]
    for r, row in enumerate(rows):
        t = 0
        for k, piece in enumerate(row):
            n = len(piece)
            ids = torch.from_numpy(np.asarray(piece, dtype=np.int64))
            input_ids[r, t : t + n] = ids
            labels[r, t + 1 : t + n] = ids[1:]
            position_ids[r, t : t + n] = torch.arange(n)
            document_ids[r, t : t + n] = k
            cu.append(cu[-1] + n)
            t += n
        if t < seq_len:
            cu.append(cu[-1] + seq_len - t)
    for _ in range(len(rows), batch_size):
        cu.append(cu[-1] + seq_len)
    return dict(
        input_ids=input_ids,
        labels=labels,
        position_ids=position_ids,
        document_ids=document_ids,
        cu_seqlens=torch.tensor(cu, dtype=torch.int32),
    )


def count_pass(loader, real_tokens, max_seconds=None):
    """(real tokens, batches, CPU s of this thread, wall s) of a pass over `loader`,
    cut after `max_seconds` CPU s when given."""
    start, cpu = time.perf_counter(), time.thread_time()
    tokens = batches = 0
    for batch in loader:
        tokens += real_tokens(batch)
        batches += 1
        if max_seconds is not None and time.thread_time() - cpu > max_seconds:
            break
    return tokens, batches, time.thread_time() - cpu, time.perf_counter() - start


def run_torch(directory, seq_len, batch_size, max_seconds):
    loader = tud.DataLoader(
        PackedRows(directory, seq_len),
        batch_size=batch_size,
        num_workers=0,
        collate_fn=lambda rows: trl_collate(rows, seq_len, batch_size),
    )
    return count_pass(loader, lambda batch: int((batch["document_ids"] >= 0).sum()), max_seconds)


def run_shardkit(directory, seq_len, batch_size, num_threads):
    loader = bench_util.one_rank_loader(
        os.path.join(directory, "tokens.npy"),
        os.path.join(directory, "offsets.npy"),
        seq_len=seq_len,
        batch_size=batch_size,
        shuffle=False,
        num_threads=num_threads,
        buffer=1024,
    )
    # Real tokens, from the piece list.
    return count_pass(loader, lambda batch: int(batch["lengths"].sum()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=float, default=20e6)
    bench_util.add_job_arguments(parser, "--seq-len", "--batch")
    parser.add_argument(
        "--torch-seconds",
        type=float,
        default=10.0,
        help="stop the (slow) torch side after this long",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        num_tokens, num_docs = make_data(directory, int(args.tokens))
        print(f"machine: {bench_util.machine()}; torch {torch.__version__}")
        print(
            f"data: {num_docs} documents, {num_tokens / 1e6:.1f} M int32 tokens "
            f"(lognormal lengths), memory-mapped .npy; batches [{args.batch}, "
            f"{args.seq_len}] int64, bfd over a 1024-document buffer"
        )
        # warm the page cache for both sides
        np.load(os.path.join(directory, "tokens.npy"), mmap_mode="r").sum()
        runs = [run_shardkit(directory, args.seq_len, args.batch, 0) for _ in range(3)]
        sk_tokens, sk_batches, sk_s, sk_wall = min(runs, key=lambda r: r[2])
        sk_t1_tokens, _, _, sk_t1_wall = run_shardkit(directory, args.seq_len, args.batch, 1)
        th_tokens, th_batches, th_s, th_wall = run_torch(
            directory, args.seq_len, args.batch, args.torch_seconds
        )
        bandwidth, in_cache = bench_util.copy_gbps(args.batch * args.seq_len * 28)
        bandwidth, in_cache = bandwidth * 1e9, in_cache * 1e9
    sk_rate, th_rate = sk_tokens / sk_s, th_tokens / th_s
    # Bytes the loader writes per real token: input_ids, labels, position_ids
    # (int64) and document_ids (int32) = 28 bytes, scaled by the padding.
    slots = sk_batches * args.batch * args.seq_len
    out_bytes = slots * 28 / sk_s
    print(
        f"shardkit TokenLoader, 1 core (num_threads=0): {sk_rate / 1e6:8.1f} M tokens/s "
        f"per CPU second ({sk_batches} batches, {sk_s:.3f} CPU s; wall "
        f"{sk_tokens / sk_wall / 1e6:.1f} M tokens/s)"
    )
    print(
        f"shardkit TokenLoader, 1 prefetch thread:      wall {sk_t1_tokens / sk_t1_wall / 1e6:.1f} "
        f"M tokens/s"
    )
    print(
        f"torch DataLoader + Python TRL-style packing:  {th_rate / 1e6:8.3f} M tokens/s "
        f"per CPU second ({th_batches} batches, {th_s:.2f} CPU s; wall "
        f"{th_tokens / th_wall / 1e6:.2f} M tokens/s)"
    )
    print(f"ratio shardkit / torch per core: {sk_rate / th_rate:.0f}x")
    print(
        f"memcpy (numpy copyto, 1 core, per CPU s): streaming {bandwidth / 1e9:.2f} GB/s = "
        f"{bandwidth / 28 / 1e6:.0f} M slots/s at 28 B; in cache (one "
        f"{args.batch * args.seq_len * 28 / 1e3:.0f} kB batch) {in_cache / 1e9:.2f} GB/s "
        f"({bench_util.load_average()})"
    )
    print(
        f"shardkit batch bytes written: {out_bytes / 1e9:.2f} GB/s = "
        f"{100 * out_bytes / bandwidth:.0f}% of streaming memcpy, "
        f"{100 * out_bytes / in_cache:.0f}% of in-cache memcpy"
    )


if __name__ == "__main__":
    main()
