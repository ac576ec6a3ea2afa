"""What the mixture loader's tests and torchrun workers share: the token
sources they write (token k of document d of source s is s * 1e6 + d * 1000 +
k, so every token names its piece) and the pieces a batch delivered, each
checked against those tokens."""

import numpy as np


def make_source(rng, source, docs, lo=5, hi=60):
    """(tokens, offsets) of `docs` documents of lo..hi tokens each."""
    lengths = rng.integers(lo, hi + 1, docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    doc = np.repeat(np.arange(docs), lengths)
    k = np.arange(offsets[-1]) - offsets[doc]
    tokens = (source * 1_000_000 + doc * 1000 + k).astype(np.int32)
    return tokens, offsets


def write_sources(root, sizes, lo, hi, seed):
    """tokens{s}.npy / offsets{s}.npy under root for each source size."""
    rng = np.random.default_rng(seed)
    for s, n in enumerate(sizes):
        tokens, offsets = make_source(rng, s, n, lo, hi)
        np.save(root / f"tokens{s}.npy", tokens)
        np.save(root / f"offsets{s}.npy", offsets)


def batch_pieces(batch):
    """(document, start, length, source, item, ok) of every piece of a mixture
    loader's batch (numpy or torch); ok: the row holds that item's tokens."""
    ids = np.asarray(batch["input_ids"])
    t, row_prev = 0, -1
    for d, st, ln, row, s, it in zip(
        batch["documents"].tolist(),
        batch["starts"].tolist(),
        batch["lengths"].tolist(),
        batch["rows"].tolist(),
        batch["sources"].tolist(),
        batch["items"].tolist(),
    ):
        if row != row_prev:
            t, row_prev = 0, row
        want = s * 1_000_000 + it * 1000 + np.arange(st, st + ln)
        ok = bool(np.array_equal(ids[row, t : t + ln], want))
        t += ln
        yield d, st, ln, s, it, ok
