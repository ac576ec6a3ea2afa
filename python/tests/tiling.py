"""What the delivery tests share: their lognormal corpora, and the
exactly-once rule they check against (an oracle written apart from the
library): the pieces (document, start, length, ...) delivered for a run tile
every document's [0, length) with no gap and no overlap."""

import numpy as np


def lognormal_lengths(rng, median, sigma, n):
    """n document lengths drawn by `rng` (a numpy Generator), lognormal around
    `median`, at least 1 token each."""
    return np.maximum(1, rng.lognormal(np.log(median), sigma, n)).astype(np.int64)


def offsets_of(lengths):
    """The int64 offsets [0, l0, l0 + l1, ...] of documents of `lengths`."""
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def save_corpus(root, prefix, lengths, tokens):
    """Saves `tokens` and the offsets of documents of `lengths` as
    root/{prefix}tokens.npy and root/{prefix}offsets.npy; returns the first."""
    np.save(root / f"{prefix}tokens.npy", tokens)
    np.save(root / f"{prefix}offsets.npy", offsets_of(lengths))
    return root / f"{prefix}tokens.npy"


def batch_fields(batch, *keys):
    """The tuple (batch[key] for key in keys) of every piece of a loader batch
    (numpy, torch or JAX arrays), in the batch's piece order."""
    return list(zip(*(np.asarray(batch[key]).tolist() for key in keys)))


def batch_pieces(batch):
    """(document, start, length) of every piece of a loader batch."""
    return batch_fields(batch, "documents", "starts", "lengths")


def tiles(lengths, pieces, dropped=()):
    """Every document d of `lengths` but the `dropped` ones covered exactly
    once by its pieces; a dropped or unknown document delivered fails. Fields
    after (document, start, length) are ignored."""
    by = {}
    for d, start, length, *_ in pieces:
        by.setdefault(d, []).append((start, length))
    for d in dropped:
        assert d not in by, f"dropped document {d} delivered"
    want = [d for d in range(len(lengths)) if d not in dropped]
    assert sorted(by) == want, "a document is missing or unknown"
    for d in want:
        at = 0
        for start, length in sorted(by[d]):
            assert start == at, f"document {d}: gap or overlap at {start}"
            at += length
        assert at == lengths[d], f"document {d}: {at} of {lengths[d]} tokens"
