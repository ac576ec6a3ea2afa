"""Writes fuzz/corpus/state/: real states saved from the state harness's data set.

The data set is the harness's (fuzz/state_fuzzer.cc, Documents()): 40 documents,
document d has (d * 37 + 11) % 97 tokens, token p of document d is d * 1000 + p.
Each file is one options byte (see the harness) followed by the state's JSON text
(json.dumps of state_dict(), which is the core codec's text). Run from the
repository root with the package on PYTHONPATH:

    PYTHONPATH=python .venv/bin/python fuzz/make_state_corpus.py
"""

import json
import os

import numpy as np

import shardkit

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "state")


def documents():
    lengths = [(d * 37 + 11) % 97 for d in range(40)]
    tokens = np.concatenate(
        [np.arange(d * 1000, d * 1000 + n, dtype=np.int32) for d, n in enumerate(lengths)]
    )
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return tokens, offsets


def write(name, flags, state):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes([flags]) + json.dumps(state).encode())


def per_rank_states(tokens, offsets, steps, **kw):
    """The states of every rank after `steps` batches (per-rank loaders)."""
    world = kw.pop("world_size", 1)
    states = []
    for rank in range(world):
        loader = shardkit.TokenLoader(
            tokens, offsets, rank=rank, world_size=world, equal_steps=False, num_threads=0, **kw
        )
        it = iter(loader)
        for _ in range(steps):
            next(it, None)
        states.append(loader.state_dict())
    return states


def main():
    os.makedirs(OUT, exist_ok=True)
    tokens, offsets = documents()
    # Flags: bits 1-2 algorithm (bfd = 2), bit 3 oversize drop, bits 5-6
    # batch size - 1, bit 7 buffer 8. Loader states have bit 0 clear.
    bfd, b2 = 2 << 1, 1 << 5
    s = per_rank_states(tokens, offsets, 0, seq_len=32, batch_size=2)
    write("loader_start", bfd | b2, s[0])
    s = per_rank_states(tokens, offsets, 3, seq_len=32, batch_size=2, seed=7)
    write("loader_mid", bfd | b2, s[0])
    s = per_rank_states(tokens, offsets, 2, seq_len=16, batch_size=1, shuffle=False)
    write("loader_split_sequential", bfd, s[0])
    s = per_rank_states(
        tokens, offsets, 2, seq_len=32, batch_size=2, algorithm="next_fit", buffer=8
    )
    write("loader_next_fit_buffer8", (0 << 1) | b2 | 128, s[0])
    s = per_rank_states(tokens, offsets, 2, seq_len=64, batch_size=1, oversize="drop", epoch=3)
    write("loader_drop_epoch3", bfd | 8, s[0])
    ranks = per_rank_states(tokens, offsets, 2, seq_len=32, batch_size=2, world_size=3, seed=1)
    write("loader_rank1_of_3", bfd | b2, ranks[1])
    write("loader_all_ranks_of_3", bfd | b2, ranks)
    write("loader_merged", bfd | b2, shardkit.TokenLoader.merge_states(ranks))
    eq = shardkit.TokenLoader(tokens, offsets, seq_len=32, batch_size=2, num_threads=0)
    it = iter(eq)
    next(it)
    write("train_plan", bfd | b2, eq.state_dict())

    # Mixture loader states over three sources that are each the data set
    # (the harness resumes them over the same three); bit 3: resume with
    # weights 1:2:1 instead of the state's.
    sources = [(tokens, offsets)] * 3
    for name, flags, kw, steps in [
        ("mixture_equal_steps", bfd | b2, dict(weights=[3, 1, 1], block=16), 2),
        ("mixture_new_weights", bfd | b2 | 8, dict(weights=[3, 1, 1], block=16), 3),
        (
            "mixture_per_rank_schedule",
            bfd | b2,
            dict(
                weights=[1, 1, 1],
                by="samples",
                equal_steps=False,
                schedule=[(2000, [0, 1, 1])],
                schedule_unit="tokens",
                repeat=[True, False, True],
            ),
            1,
        ),
    ]:
        loader = shardkit.TokenLoader.mixture(
            sources,
            kw.pop("weights"),
            seq_len=32,
            batch_size=2,
            samples=100,
            seed=4,
            num_threads=0,
            **kw,
        )
        it = iter(loader)
        for _ in range(steps):
            next(it, None)
        write(name, flags, loader.state_dict())

    packer = shardkit.StreamingPacker(32, algorithm="bfd", oversize="split", buffer=8)
    for i in range(11):
        packer.push(i, (i * 37 + 11) % 97)
    write("packer_split", 1 | bfd | b2, packer.state_dict())
    packer = shardkit.StreamingPacker(16, algorithm="next_fit", oversize="drop")
    for i in range(7):
        packer.push(i, (i * 13) % 20)
    write("packer_next_fit_drop", 1 | 8, packer.state_dict())


if __name__ == "__main__":
    main()
