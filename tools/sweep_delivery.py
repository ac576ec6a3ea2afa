"""The delivery oracle of tools/sweep.py: what an accepted input delivers.

A state (or a weight set, or a second thread) that shardkit accepts must deliver
what the documented rule says, piece for piece; a refusal must be one line naming
the parameter. Each case draws a configuration and a checkpoint from its own
seed, takes the real state there, mutates it, hands it back, and compares what
the resumed run delivers with the rule, computed from the uninterrupted run and
the data itself (never from the resumed code's own view):

* exact resume (the same consumer, world size and weights; docs/loader.md "State
  and resume"): the remaining batches of the uninterrupted run, piece for piece
  (document, start, length, row), token for token, step number included;
* elastic / merged resume (another world size; a merged state): every piece not
  delivered before the checkpoint exactly once, nothing delivered before again,
  counted token by token over the data set (tokens identify their data set,
  document and position, so a state of another data set of the same lengths
  shows as that data set's tokens delivered and this one's lost);
* a mixture resumed with new weights (docs/mixing.md "State and resume"): every
  source continues its walk, no item repeated or skipped within one of its
  epochs (each full epoch of a source's items is a permutation of them);
* a mixture loader resumed with new weights: the window's documents read before
  the read point kept, every piece of the window exactly once across the change,
  every source's walk unbroken;
* a streaming packer: the packs of the uninterrupted packer;
* one loader iterated by two threads: one epoch, every piece once, no hang.

A case's verdict: ok (accepted and delivered the rule's output), rejected (a
one-line ValueError / IndexError / TypeError naming the state or a parameter),
wrong (accepted, delivered something else: the finding this module exists
for), refused-valid (an unedited state refused), hang, or an unclear error.
`python tools/sweep.py --replay KIND SEED` reruns one case and prints it.
"""

from __future__ import annotations

import copy
import json
import math
import random
import re
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

KINDS = [
    "rank",  # per-rank loader state, exact resume
    "merged",  # the states of every consumer (or their merge), elastic resume
    "train",  # equal-steps loader state, exact or elastic
    "train_plan",  # TrainPlan(state=...), exact or elastic
    "mixture",  # Mixture.from_state, with or without new weights
    "mixture_loader",  # mixture loader state, exact or with new weights
    "packer",  # StreamingPacker state
    "weights",  # mixtures with extreme weights and non-repeating sources
    "threads",  # one loader, two Python threads
]
# How often each kind is drawn (state mutations are the bulk).
KIND_WEIGHTS = [16, 10, 16, 10, 12, 14, 10, 6, 6]


class Wrong(Exception):
    """Accepted, and delivered something the rule does not."""


class Refused(Exception):
    """The input under test was refused (carries the original exception)."""

    def __init__(self, error: BaseException):
        super().__init__(str(error))
        self.error = error


class Hang(Exception):
    pass


# ---- data -------------------------------------------------------------------
# Token p of document d of data set `tag` is tag * 10^6 + d * 1000 + p, so a
# token names its data set, document and position. Data set 1 has the lengths
# of data set 0 and other tokens ("another data set of equal lengths").

_DATA: Dict[Tuple[int, int], Tuple[np.ndarray, np.ndarray]] = {}


def lengths_of(n: int, salt: int = 0) -> List[int]:
    return [(d * 37 + 11 + salt * 13) % 97 for d in range(n)]


def data(n: int, tag: int = 0, salt: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    key = (n, tag, salt)
    if key not in _DATA:
        lengths = lengths_of(n, salt)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        tokens = np.concatenate(
            [np.arange(m, dtype=np.int64) + tag * 10**6 + d * 1000 for d, m in enumerate(lengths)]
            + [np.zeros(0, np.int64)]
        ).astype(np.int32)
        _DATA[key] = (tokens, offsets)
    return _DATA[key]


# ---- batches as pieces --------------------------------------------------------


def pieces_of(batch: dict, tokens: Any, offsets: Any = None) -> list:
    """The batch as a list of (document, start, length, row), after checking that
    every row holds its pieces' own tokens back to back. For a mixture loader
    `tokens` is the list of sources' (tokens, offsets) and a piece is (window
    document, start, length, row, source, item), checked against that item of
    that source."""
    docs = batch["documents"].tolist()
    starts = batch["starts"].tolist()
    lengths = batch["lengths"].tolist()
    rows = batch["rows"].tolist()
    mixed = offsets is None
    if mixed:
        srcs = batch["sources"].tolist()
        items = batch["items"].tolist()
    ids = np.asarray(batch["input_ids"])
    out = []
    fill: Dict[int, int] = {}
    for i, (d, s, n, r) in enumerate(zip(docs, starts, lengths, rows)):
        if mixed:
            src, item = srcs[i], items[i]
            if not (0 <= src < len(tokens)):
                raise Wrong(f"piece ({d}, {s}, {n}) of source {src}: no such source")
            t, o = tokens[src]
            d_at = item
        else:
            t, o, d_at = tokens, offsets, d
        if not (0 <= d_at < len(o) - 1) or s < 0 or n < 0:
            raise Wrong(f"piece ({d}, {s}, {n}) outside the data set")
        lo, hi = o[d_at] + s, o[d_at] + s + n
        if hi > o[d_at + 1]:
            raise Wrong(f"piece ({d}, {s}, {n}) outside its document")
        at = fill.get(r, 0)
        got = ids[r, at : at + n]
        if len(got) != n or not np.array_equal(got, t[lo:hi]):
            raise Wrong(f"row {r} does not hold the tokens of piece ({d}, {s}, {n})")
        fill[r] = at + n
        out.append((d, s, n, r, srcs[i], items[i]) if mixed else (d, s, n, r))
    return out


def token_keys(pieces: list, tokens: np.ndarray, offsets: np.ndarray) -> List[int]:
    keys: List[int] = []
    for d, s, n, _ in pieces:
        keys.extend(tokens[offsets[d] + s : offsets[d] + s + n].tolist())
    return keys


def exactly_once(delivered: List[int], expected: List[int], what: str) -> None:
    """Every expected key delivered exactly once, nothing else."""
    counts: Dict[int, int] = {}
    for k in delivered:
        counts[k] = counts.get(k, 0) + 1
    want = set(expected)
    twice = [k for k, c in counts.items() if c > 1]
    extra = [k for k in counts if k not in want]
    lost = [k for k in want if k not in counts]
    if twice or extra or lost:
        parts = []
        if twice:
            parts.append(f"{len(twice)} tokens delivered twice (e.g. {sorted(twice)[:3]})")
        if extra:
            parts.append(f"{len(extra)} tokens not of this data set (e.g. {sorted(extra)[:3]})")
        if lost:
            parts.append(f"{len(lost)} tokens never delivered (e.g. {sorted(lost)[:3]})")
        raise Wrong(f"{what}: " + ", ".join(parts))


def same_batches(got: list, want: list, what: str) -> None:
    """Exact resume: the remaining batches of the uninterrupted run, piece for
    piece, then step for step (a batch is (step, pieces))."""
    for i, (g, w) in enumerate(zip(got, want)):
        if g[1] != w[1]:
            raise Wrong(
                f"{what}: batch {i} after the resume differs: got {g[1][:3]}..., want {w[1][:3]}..."
            )
    if len(got) != len(want):
        raise Wrong(
            f"{what}: {len(got)} batches after the resume, the uninterrupted run has {len(want)}"
        )
    for i, (g, w) in enumerate(zip(got, want)):
        if g[0] != w[0]:
            raise Wrong(
                f"[step] {what}: batch {i} after the resume is numbered step {g[0]}, "
                f"the uninterrupted run's step {w[0]}"
            )


# ---- mutations --------------------------------------------------------------

BIG = [2**31, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**30]


def nodes(obj: Any, path: tuple = ()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from nodes(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from nodes(v, path + (i,))


def get(obj: Any, path: tuple) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def put(obj: Any, path: tuple, value: Any) -> None:
    get(obj, path[:-1])[path[-1]] = value


def numeric_edit(rng: random.Random, v: Any) -> Any:
    x = int(v) if isinstance(v, (int, float)) and math.isfinite(v) else 0
    return rng.choice(
        [
            x + 1,
            x - 1,
            x + 2,
            x + 3,
            x + 1000,
            x - 1000,
            -1,
            -x - 1,
            0,
            rng.choice(BIG),
            -rng.choice(BIG),
            x + 0.5,
            float(x),
            str(x),
            None,
            True,
            [x],
        ]
    )


def dumps(obj: Any, dup: Optional[tuple] = None, path: tuple = ()) -> str:
    """json.dumps, except that the dict at dup[0] names key dup[1] twice (first
    with its own value, then with dup[2]), as a hand-edited file might."""
    if isinstance(obj, dict):
        items = [f"{json.dumps(k)}: {dumps(v, dup, path + (k,))}" for k, v in obj.items()]
        if dup is not None and dup[0] == path:
            items.append(f"{json.dumps(dup[1])}: {json.dumps(dup[2])}")
        return "{" + ", ".join(items) + "}"
    if isinstance(obj, list):
        return "[" + ", ".join(dumps(v, dup, path + (i,)) for i, v in enumerate(obj)) + "]"
    return json.dumps(obj)


class _Last(threading.local):
    """The last mutation's kind in this thread (for grouping findings, and to
    tell an unedited state, which must be accepted, from an edited one)."""

    op: Optional[str] = None


_LAST = _Last()


class _LastView:
    def __getitem__(self, key: str) -> Any:
        return _LAST.op

    def __setitem__(self, key: str, value: Any) -> None:
        _LAST.op = value


LAST = _LastView()


def mutate(rng: random.Random, state: Any, other: Any = None) -> Tuple[str, Any, Optional[str]]:
    """(description, mutated state, JSON text or None). The text is set when
    the mutation exists only as text (a key named twice); `other` is the state
    taken at the same point of a run over another data set of equal lengths.
    "none" (about 1 in 16) hands the state back unedited: the control."""
    s = copy.deepcopy(state)
    LAST["op"] = op = rng.choices(
        [
            "none",
            "number",
            "string",
            "version",
            "unseal",
            "drop",
            "add",
            "dup",
            "list",
            "limits",
            "other_data",
            "whole",
        ],
        [6, 30, 6, 6, 5, 7, 5, 7, 8, 10, 6, 4],
    )[0]
    all_nodes = list(nodes(s))
    if op == "other_data" and other is None:
        LAST["op"] = op = "number"
    if op == "none":
        return "unedited", s, None
    if op == "other_data":
        return "the state of another data set of equal lengths", copy.deepcopy(other), None
    if op == "whole":
        v = rng.choice([None, {}, [], "x", 0, [s, s], {"state": s}])
        return f"the whole state replaced by {json.dumps(v)[:40]}", v, None
    if op in ("number", "limits"):
        nums = [
            (p, v)
            for p, v in all_nodes
            if p and isinstance(v, (int, float)) and not isinstance(v, bool)
        ]
        if op == "limits":
            named = [(p, v) for p, v in nums if p[-1] in ("epoch", "position", "batches", "read")]
            nums = named or nums
        if nums:
            p, v = rng.choice(nums)
            if op == "limits":
                new = rng.choice([2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 10**8, 2**31, -1])
            else:
                new = numeric_edit(rng, v)
            put(s, p, new)
            return f"{'/'.join(map(str, p))}: {v!r} -> {new!r}", s, None
        op = "drop"
    if op == "string":
        strs = [(p, v) for p, v in all_nodes if p and isinstance(v, str)]
        if strs:
            p, v = rng.choice(strs)
            if v and rng.random() < 0.6:
                last = "0" if v[-1] != "0" else "1"
                new = v[:-1] + last
            else:
                new = rng.choice(["", "0", 0, None, v + v])
            put(s, p, new)
            return f"{'/'.join(map(str, p))}: {v!r} -> {new!r}", s, None
        op = "add"
    if op in ("version", "unseal"):
        dicts = [(p, v) for p, v in all_nodes if isinstance(v, dict) and "version" in v]
        if dicts:
            p, d = rng.choice(dicts)
            old = d["version"]
            new = rng.choice([1, 1, 2, 3, 0, -1, "2", float(old) if isinstance(old, int) else 1])
            d["version"] = new
            what = f"{'/'.join(map(str, p + ('version',)))}: {old!r} -> {new!r}"
            if op == "unseal":
                d["version"] = 1
                dropped = [k for k in ("checksum", "fingerprint") if d.pop(k, None) is not None]
                what = f"{'/'.join(map(str, p))}: relabelled version 1" + (
                    f" without {' and '.join(dropped)}" if dropped else ""
                )
                if rng.random() < 0.5:
                    nums = [
                        (q, v)
                        for q, v in nodes(d)
                        if q
                        and isinstance(v, int)
                        and not isinstance(v, bool)
                        and q[0] != "version"
                    ]
                    if nums:
                        q, v = rng.choice(nums)
                        put(d, q, v + rng.choice([1, -1, 3]))
                        what += f", then {'/'.join(map(str, q))}: {v} -> {get(d, q)}"
            return what, s, None
        op = "drop"
    if op == "drop":
        keyed = [(p, v) for p, v in all_nodes if isinstance(v, dict) and v]
        if keyed:
            p, d = rng.choice(keyed)
            k = rng.choice(list(d))
            del d[k]
            return f"{'/'.join(map(str, p + (k,)))} dropped", s, None
        op = "add"
    if op == "add":
        keyed = [(p, v) for p, v in all_nodes if isinstance(v, dict)]
        if keyed:
            p, d = rng.choice(keyed)
            k, v = rng.choice(
                [
                    ("extra", 0),
                    ("kind", "train_plan"),
                    ("kind", "mixture_loader"),
                    ("checksum", "0000000000000000"),
                    ("fingerprint", "0000000000000000"),
                    ("stream", "0"),
                    ("head", [[0, 0, 1]]),
                    ("done", [0]),
                    ("epoch", 1),
                    ("position", 1),
                ]
            )
            if k in d:
                k = "extra"
            d[k] = v
            return f"{'/'.join(map(str, p + (k,)))} added: {v!r}", s, None
        return "unedited", s, None
    if op == "dup":
        keyed = [(p, v) for p, v in all_nodes if isinstance(v, dict) and v]
        if keyed:
            p, d = rng.choice(keyed)
            k = rng.choice(list(d))
            v = d[k]
            new = (
                numeric_edit(rng, v)
                if isinstance(v, (int, float)) and not isinstance(v, bool) and rng.random() < 0.7
                else v
            )
            text = dumps(s, (p, k, new))
            return f"{'/'.join(map(str, p + (k,)))} named twice (then {new!r})", s, text
        return "unedited", s, None
    # list edits
    lists = [(p, v) for p, v in all_nodes if isinstance(v, list)]
    if not lists:
        return "unedited", s, None
    p, lst = rng.choice(lists)
    name = "/".join(map(str, p)) or "the list"
    if lst and rng.random() < 0.3:
        i = rng.randrange(len(lst))
        del lst[i]
        return f"{name}: element {i} dropped", s, None
    if lst and rng.random() < 0.4:
        i = rng.randrange(len(lst))
        lst.insert(i, copy.deepcopy(lst[i]))
        return f"{name}: element {i} listed twice", s, None
    if len(lst) >= 2 and rng.random() < 0.5:
        i, j = rng.sample(range(len(lst)), 2)
        lst[i], lst[j] = lst[j], lst[i]
        return f"{name}: elements {i} and {j} swapped", s, None
    v = copy.deepcopy(lst[-1]) if lst else 0
    if isinstance(v, list) and v and isinstance(v[0], int):
        v[0] += 1
    elif isinstance(v, int) and not isinstance(v, bool):
        v += 1
    lst.append(v)
    return f"{name}: {json.dumps(v)[:40]} appended", s, None


# ---- the cases -------------------------------------------------------------


def _loader(shardkit, tag: int, n: int, **kw):
    tokens, offsets = data(n, tag)
    return shardkit.TokenLoader(tokens, offsets, **kw)


def _run(loader, tokens, offsets, stop: Optional[int] = None) -> Tuple[list, list]:
    """Batches (as pieces, with step) of one pass, and the states: states[k]
    after k batches (taken inside the loop: k = len(batches) still stands in
    the epoch, with nothing left), and, when the pass ran out, one more: the
    state after it (the next epoch's start)."""
    batches, states = [], [loader.state_dict()]
    for b in loader:
        batches.append((int(b["step"]), pieces_of(b, tokens, offsets)))
        states.append(loader.state_dict())
        if stop is not None and len(batches) >= stop:
            return batches, states
    states.append(loader.state_dict())
    return batches, states


def _next_epoch(state: dict, first: dict) -> bool:
    """Whether `state` (taken after an epoch's last batch) already stands in
    the next epoch (equal steps: the plan knows its last step) rather than in
    that epoch with nothing left (per rank); either is a valid checkpoint."""
    return state.get("epoch") != first.get("epoch")


def _resume(make, state, text):
    """A fresh loader from make(), given the (mutated) state; Refused if it is
    refused, whether at load_state_dict or at the first batch."""
    loader = make()
    try:
        loader.load_state_dict(text if text is not None else state)
    except (ValueError, IndexError, TypeError) as e:
        raise Refused(e)
    return loader


def _batches(loader):
    """The loader's batches of one pass; Refused if the loader raises."""
    it = iter(loader)
    while True:
        try:
            b = next(it)
        except StopIteration:
            return
        except (ValueError, IndexError, TypeError) as e:
            raise Refused(e)
        yield b


def _pass(loader, tokens, offsets=None) -> list:
    out = []
    for b in _batches(loader):
        out.append((int(b["step"]), pieces_of(b, tokens, offsets)))
        if len(out) > 10000:
            raise Wrong("more than 10,000 batches after the resume")
    return out


def case_rank(shardkit, rng: random.Random) -> str:
    n = rng.choice([12, 30, 40])
    cfg = dict(
        seq_len=rng.choice([16, 32, 64]),
        batch_size=rng.choice([1, 2, 3]),
        world_size=rng.choice([1, 2, 3]),
        buffer=rng.choice([2, 4, 8, None]),
        shuffle=rng.random() < 0.7,
        seed=rng.choice([0, 1, 2**63 + 5]),
        algorithm=rng.choice(["bfd", "ffd", "next_fit", "balanced"]),
        num_threads=rng.choice([0, 0, 1]),
        equal_steps=False,
    )
    cfg["rank"] = rng.randrange(cfg["world_size"])
    tokens, offsets = data(n)
    ref, states = _run(_loader(shardkit, 0, n, **cfg), tokens, offsets)
    k = rng.randrange(len(ref) + 2)  # len(ref) + 1: after the pass ran out
    if k == len(ref) and _next_epoch(states[k], states[0]):
        k += 1  # the state after the last batch already is the next epoch's start
    want = (
        ref[k:]
        if k <= len(ref)
        else _run(_loader(shardkit, 0, n, epoch=1, **cfg), tokens, offsets)[0]
    )
    other = _run(_loader(shardkit, 1, n, **cfg), *data(n, 1))[1][k] if k else None
    what, state, text = mutate(rng, states[k], other)
    loader = _resume(lambda: _loader(shardkit, 0, n, **cfg), state, text)
    got = _pass(loader, tokens, offsets)
    if what.startswith("the state of another data set"):
        # Before the checkpoint: the other data set's tokens; after: this one's.
        b1, b2 = data(n, 1)
        before = [
            t
            for _, ps in _run(_loader(shardkit, 1, n, **cfg), b1, b2)[0][:k]
            for t in token_keys(ps, b1, b2)
        ]
        if k > len(ref):
            before = []  # the state stood at the next epoch's start
        after = [t for _, ps in got for t in token_keys(ps, tokens, offsets)]
        mine = [t for _, ps in ref for t in token_keys(ps, tokens, offsets)]
        exactly_once(before + after, mine, f"rank {cfg['rank']} resumed from {what}")
    same_batches(got, want, f"{_cfg(cfg)} k={k}, {what}")
    return what


def _cfg(cfg: dict) -> str:
    return "TokenLoader(" + ", ".join(f"{k}={v!r}" for k, v in cfg.items()) + ")"


def case_merged(shardkit, rng: random.Random) -> str:
    n = rng.choice([20, 40])
    world = rng.choice([2, 3, 4])
    base = dict(
        seq_len=rng.choice([16, 32, 64]),
        batch_size=rng.choice([1, 2]),
        buffer=rng.choice([2, 4, 8]),
        shuffle=rng.random() < 0.7,
        seed=rng.choice([0, 7]),
        num_threads=0,
        equal_steps=False,
    )
    tag = 0
    tokens, offsets = data(n)
    before, states, others = [], [], []
    for r in range(world):
        cfg = dict(base, world_size=world, rank=r)
        full, st = _run(_loader(shardkit, 0, n, **cfg), tokens, offsets)
        k = rng.randrange(len(full) + 1) if rng.random() < 0.9 else len(full)
        k = min(k, len(full) - 1) if full else 0  # inside the epoch
        before += [t for _, ps in full[:k] for t in token_keys(ps, tokens, offsets)]
        states.append(st[k])
        others.append(_run(_loader(shardkit, 1, n, **cfg), *data(n, 1), stop=k)[1][-1])
    merge_first = rng.random() < 0.5
    if merge_first:
        merged = shardkit.TokenLoader.merge_states(states)
        other = shardkit.TokenLoader.merge_states(others)
        what, state, text = mutate(rng, merged, other)
    else:
        i = rng.randrange(world)
        what, one, _ = mutate(rng, states[i], others[i])
        state, text = states[:i] + [one] + states[i + 1 :], None
        what = f"state {i} of {world}: {what}"
    if what.endswith("another data set of equal lengths"):
        tag = 1
    new_world = rng.choice([1, 2, 3, 5])
    after = []
    for r in range(new_world):
        cfg = dict(base, world_size=new_world, rank=r)
        loader = _resume(lambda: _loader(shardkit, 0, n, **cfg), state, text)
        after += [
            t for _, ps in _pass(loader, tokens, offsets) for t in token_keys(ps, tokens, offsets)
        ]
    if tag == 1:
        # The other run delivered the same pieces (its plan reads the lengths
        # only), with its own tokens.
        before = [t + 10**6 for t in before]
    exactly_once(
        before + after,
        tokens.tolist(),
        f"{world} consumers {_cfg(base)} -> {new_world}, {'merged, ' if merge_first else ''}{what}",
    )
    return what


def case_train(shardkit, rng: random.Random) -> str:
    n = rng.choice([20, 40])
    world = rng.choice([1, 2, 3])
    mode = rng.choices(["pad", "drop", "continuous"], [6, 1, 2])[0]
    base = dict(
        seq_len=rng.choice([16, 32, 64]),
        batch_size=rng.choice([1, 2]),
        buffer=rng.choice([2, 4, 8, None]),
        shuffle=rng.random() < 0.7,
        seed=rng.choice([0, 5]),
        mode=mode,
        num_threads=rng.choice([0, 1]),
    )
    tokens, offsets = data(n)
    refs, refs1 = [], []
    for r in range(world):
        cfg = dict(base, world_size=world, rank=r)
        loader = _loader(shardkit, 0, n, **cfg)
        refs.append(_run(loader, tokens, offsets))
        refs1.append(_run(loader, tokens, offsets)[0])  # the next epoch, from the end state
    steps = len(refs[0][0])
    k = rng.randrange(steps + 2)  # steps + 1: after the pass ran out
    if k == steps and _next_epoch(refs[0][1][k], refs[0][1][0]):
        k += 1  # the state after the last batch already is the next epoch's start
    state0 = refs[0][1][k]
    for r in range(1, world):
        if refs[r][1][k] != state0:
            raise Wrong(f"{_cfg(base)}: ranks 0 and {r} have different states after {k} steps")
    other = None
    if k:
        o = _loader(shardkit, 1, n, world_size=world, rank=0, **base)
        other = _run(o, *data(n, 1))[1][k]
    what, state, text = mutate(rng, state0, other)
    new_world = world if (mode != "pad" or rng.random() < 0.5) else rng.choice([1, 2, 4])
    got = []
    for r in range(new_world):
        cfg = dict(base, world_size=new_world, rank=r)
        loader = _resume(lambda: _loader(shardkit, 0, n, **cfg), state, text)
        got.append(_pass(loader, tokens, offsets))
    label = f"{_cfg(dict(base, world_size=world))} k={k} -> world {new_world}, {what}"
    if len({len(g) for g in got}) > 1:
        raise Wrong(f"{label}: ranks deliver {[len(g) for g in got]} batches")
    if what.startswith("the state of another data set") and mode != "pad":
        raise Wrong(f"{label}: a state of another data set accepted ({len(got[0])} batches)")
    if what.startswith("the state of another data set") or new_world != world:
        b1, b2 = data(n, 1)
        tag_tokens = (b1, b2) if what.startswith("the state of another") else (tokens, offsets)
        if what.startswith("the state of another"):
            other_runs = [
                _run(_loader(shardkit, 1, n, world_size=world, rank=r, **base), b1, b2)[0][:k]
                for r in range(world)
            ]
        else:
            other_runs = [ref[0][:k] for ref in refs]
        before = [t for run in other_runs for _, ps in run for t in token_keys(ps, *tag_tokens)]
        after = [t for g in got for _, ps in g for t in token_keys(ps, tokens, offsets)]
        if k > steps:  # the state stood at the next epoch's start
            before = []
        exactly_once(before + after, tokens.tolist(), label)
        return what
    for r in range(world):
        want = refs[r][0][k:] if k <= steps else refs1[r]
        same_batches(got[r], want, f"{label}, rank {r}")
    return what


def case_train_plan(shardkit, rng: random.Random) -> str:
    n = rng.choice([20, 40, 100])
    lengths = lengths_of(n, rng.choice([0, 1]))
    world = rng.choice([1, 2, 3])
    mode = rng.choices(["pad", "drop", "continuous"], [6, 1, 2])[0]
    base = dict(
        seq_len=rng.choice([16, 32, 64]),
        batch_size=rng.choice([1, 2]),
        mode=mode,
        seed=rng.choice([0, 9]),
        buffer=rng.choice([2, 4, None]),
        shuffle=rng.random() < 0.8,
    )
    plan = shardkit.TrainPlan(lengths, world_size=world, **base)
    steps = plan.num_steps
    k = rng.randrange(steps + 1)
    what, state, text = mutate(rng, plan.state_dict(k))
    new_world = world if (mode != "pad" or rng.random() < 0.5) else rng.choice([1, 2, 4])
    try:
        rest = shardkit.TrainPlan(
            lengths, world_size=new_world, state=text if text is not None else state, **base
        )
        got = [[rest.step(r, s) for s in range(rest.num_steps)] for r in range(new_world)]
    except (ValueError, IndexError, TypeError) as e:
        raise Refused(e)
    label = (
        f"TrainPlan({_cfg(dict(base, world_size=world))[11:-1]}) k={k} -> world {new_world}, {what}"
    )
    if k == steps:
        return what  # nothing of the epoch left; the loader kinds check the next epoch
    if new_world == world:
        for r in range(world):
            want = [plan.step(r, s) for s in range(k, steps)]
            if got[r] != want:
                raise Wrong(f"{label}: rank {r}'s steps after the resume differ from the plan's")
        return what
    offs = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    keys = lambda rows: [offs[d] + p for row in rows for d, s, m in row for p in range(s, s + m)]  # noqa: E731
    before = [t for r in range(world) for s in range(k) for t in keys(plan.step(r, s))]
    after = [t for g in got for rows in g for t in keys(rows)]
    exactly_once(before + after, list(range(int(offs[-1]))), label)
    return what


def _walk_check(seq: List[Tuple[int, int]], sizes: List[int], repeat: List[bool], label: str):
    """Each source's items, in order: every full epoch of the source a
    permutation of its items, the last one without repeats; a source that does
    not repeat never past its first epoch."""
    per: Dict[int, List[int]] = {}
    for src, item in seq:
        if not (0 <= src < len(sizes)) or not (0 <= item < sizes[src]):
            raise Wrong(f"{label}: sample ({src}, {item}) outside the sources {sizes}")
        per.setdefault(src, []).append(item)
    for src, items in per.items():
        m = sizes[src]
        if not repeat[src] and len(items) > m:
            raise Wrong(f"{label}: source {src} does not repeat but gave {len(items)} of {m} items")
        for e in range(0, len(items), m):
            chunk = items[e : e + m]
            if len(set(chunk)) != len(chunk):
                dup = sorted({x for x in chunk if chunk.count(x) > 1})[:3]
                raise Wrong(
                    f"{label}: source {src} repeats items {dup} within its epoch {e // m} "
                    f"(samples {e}..{e + len(chunk) - 1} of that source)"
                )


def case_mixture(shardkit, rng: random.Random) -> str:
    k = rng.choice([2, 3])
    sizes = [rng.choice([5, 7, 11, 13]) for _ in range(k)]
    weights = [rng.choice([1.0, 2.0, 3.0, 0.5]) for _ in range(k)]
    repeat = [rng.random() < 0.8 for _ in range(k)]
    kw = dict(seed=rng.choice([0, 3, 2**63 + 1]), repeat=repeat)
    if rng.random() < 0.3:
        kw["block"] = rng.choice([8, 16, 64])
    try:
        mix = shardkit.Mixture(sizes, weights, **kw)
    except ValueError:
        return "configuration refused"
    total = len(mix) if mix.bounded else 400
    position = rng.randrange(min(total, 200) + 1)
    what, state, text = mutate(rng, mix.state_dict(position))
    new = rng.random() < 0.5
    new_weights = [rng.choice([1.0, 4.0, 0.25]) for _ in range(k)] if new else None
    if new and what == "unedited" and "block" in kw:
        # New weights may need a larger block than the one given: a refusal
        # naming block is the documented answer, not a finding.
        LAST["op"] = "none-new-weights"
    try:
        resumed = shardkit.Mixture.from_state(
            text if text is not None else state, **({"weights": new_weights} if new else {})
        )
        count = len(resumed) if resumed.bounded else 300
        count = min(count, 300)
        s_after, i_after = resumed.numpy(0, count)
    except (ValueError, IndexError, TypeError) as e:
        raise Refused(e)
    label = f"Mixture({sizes}, {weights}, {kw}).state_dict({position}), {what}"
    s_before, i_before = mix.numpy(0, position)
    after = list(zip(s_after.tolist(), i_after.tolist()))
    if not new:
        want_count = min((len(mix) - position) if mix.bounded else 300, 300)
        ws, wi = mix.numpy(position, position + want_count)
        want = list(zip(ws.tolist(), wi.tolist()))
        if after != want:
            i = next(
                (j for j, (a, b) in enumerate(zip(after, want)) if a != b),
                min(len(after), len(want)),
            )
            raise Wrong(
                f"{label}: from_state without new weights differs from the unbroken run at sample "
                f"{i} ({after[i] if i < len(after) else 'end'} vs {want[i] if i < len(want) else 'end'})"
            )
        return what
    label += f", from_state(weights={new_weights})"
    _walk_check(list(zip(s_before.tolist(), i_before.tolist())) + after, sizes, repeat, label)
    return what


def case_weights(shardkit, rng: random.Random) -> str:
    k = rng.choice([2, 3, 4])
    sizes = [rng.choice([1, 3, 10, 100, 1000]) for _ in range(k)]
    pool = [1e-12, 1e12, 0.0, 1.0, 3.0, 1e-6, 5e-324, 1e300, 2.0**63, 1e-3, 1e-4, 1e4]
    weights = [rng.choice(pool) for _ in range(k)]
    repeat = [rng.random() < 0.5 for _ in range(k)]
    kw = dict(seed=rng.choice([0, 1]), repeat=repeat)
    label = f"Mixture({sizes}, {weights}, repeat={repeat})"
    try:
        mix = shardkit.Mixture(sizes, weights, **kw)
    except (ValueError, IndexError, TypeError) as e:
        raise Refused(e)
    count = min(len(mix), 4000) if mix.bounded else 4000
    s, i = mix.numpy(0, count)
    seq = list(zip(s.tolist(), i.tolist()))
    for src, w in enumerate(weights):
        if w == 0 and any(x == src for x, _ in seq):
            raise Wrong(f"{label}: source {src} has weight 0 and was drawn")
    _walk_check(seq, sizes, repeat, label)
    if mix.bounded and len(mix) <= 4000:
        # The mixture ends when a source that does not repeat runs out: that
        # source gave every item.
        ran_out = [
            src
            for src in range(k)
            if not repeat[src] and sum(x == src for x, _ in seq) == sizes[src]
        ]
        if not ran_out:
            raise Wrong(
                f"{label}: ends after {len(mix)} samples, no source that does not repeat ran out"
            )
    return "weights"


def _mix_sources(n: int, k: int, tag: int):
    out = []
    for src in range(k):
        t, o = data(n + 3 * src, tag, salt=src)
        out.append((t + np.int32(src * 200000), o))
    return out


def case_mixture_loader(shardkit, rng: random.Random) -> str:
    k = rng.choice([2, 3])
    n = rng.choice([8, 15])
    srcs = _mix_sources(n, k, 0)
    weights = [rng.choice([1, 2, 3]) for _ in range(k)]
    equal = rng.random() < 0.7
    world = rng.choice([1, 2])
    mkw = dict(
        by=rng.choice(["tokens", "samples"]),
        block=rng.choice([None, 16, 32]),
        seed=rng.choice([0, 4]),
        repeat=[rng.random() < 0.8 for _ in range(k)],
        seq_len=rng.choice([32, 64]),
        batch_size=rng.choice([1, 2]),
        buffer=rng.choice([2, 4, 8]),
        num_threads=0,
        equal_steps=equal,
        world_size=world,
    )
    if not equal:
        mkw["world_size"] = 1  # a per-rank state of one consumer resumes exactly
    world = mkw["world_size"]

    def make(ws, sources=srcs, **over):
        return shardkit.TokenLoader.mixture(sources, ws, **dict(mkw, **over))

    def window_of(loader):
        s, it = loader.window_samples()
        return list(zip(s.tolist(), it.tolist()))

    try:
        refs = []
        for r in range(world):
            loader = make(weights, rank=r)
            e0, st = [], [loader.state_dict()]
            for b in loader:
                e0.append((int(b["step"]), pieces_of(b, srcs)))
                st.append(loader.state_dict())
            st.append(loader.state_dict())  # after the pass ran out: the next epoch
            e1 = [(int(b["step"]), pieces_of(b, srcs)) for b in loader]
            refs.append((e0, st, e1))
    except ValueError:
        return "configuration refused"
    steps = len(refs[0][0])
    kk = rng.randrange(steps + 2)
    if kk == steps and _next_epoch(refs[0][1][kk], refs[0][1][0]):
        kk += 1  # the state after the last batch already is the next epoch's start
    other = None
    if kk:
        o = make(weights, sources=_mix_sources(n, k, 1), rank=0)
        for i, _ in enumerate(o):
            if i + 1 == kk:
                break
        other = o.state_dict()  # kk = steps + 1: the loop ran out
    what, state, text = mutate(rng, refs[0][1][kk], other)
    changed = equal and rng.random() < 0.4
    new_weights = [rng.choice([1, 5]) for _ in range(k)] if changed else weights
    label = (
        f"TokenLoader.mixture({k} sources, {weights}, {mkw}) k={kk}"
        + (f" -> weights {new_weights}" if changed else "")
        + f", {what}"
    )
    got, wins = [], []
    for r in range(world):
        loader = make(new_weights, rank=r)
        try:
            loader.load_state_dict(text if text is not None else state)
        except (ValueError, IndexError, TypeError) as e:
            raise Refused(e)
        wins.append((window_of(loader), getattr(loader, "last_resume", None)))
        got.append(_pass(loader, srcs))
    if what.startswith("the state of another data set"):
        raise Wrong(f"{label}: accepted and delivered {sum(len(g) for g in got)} batches")
    if not changed:
        for r in range(world):
            want = refs[r][0][kk:] if kk <= steps else refs[r][2]
            same_batches(got[r], want, f"{label}, rank {r}")
        return what
    if len({len(g) for g in got}) > 1:
        raise Wrong(f"{label}: ranks deliver {[len(g) for g in got]} batches")
    if kk > steps:
        return what  # the next epoch, whole, under the new weights
    samples, resume = wins[0]
    read = resume[1] if resume else 0
    loader0 = make(weights, rank=0)
    old = window_of(loader0)
    if samples[:read] != old[:read]:
        raise Wrong(
            f"{label}: the window's first {read} documents (read before the change) changed"
        )

    # Every piece of the new window exactly once across the two runs.
    def keys(run, smp):
        out = []
        for _, ps in run:
            for d, s0, m, _, src, item in ps:
                if (src, item) != smp[d]:
                    raise Wrong(
                        f"{label}: window document {d} is {smp[d]}, delivered as {(src, item)}"
                    )
                t, o = srcs[src]
                out += [(d, int(x)) for x in t[o[item] + s0 : o[item] + s0 + m]]
        return out

    before = [x for r in range(world) for x in keys(refs[r][0][:kk], old)]
    after = [x for g in got for x in keys(g, samples)]
    expected = []
    for d, (src, item) in enumerate(samples):
        t, o = srcs[src]
        expected += [(d, int(x)) for x in t[o[item] : o[item + 1]]]
    counts: Dict[Any, int] = {}
    for x in before + after:
        counts[x] = counts.get(x, 0) + 1
    want = set(expected)
    bad = [x for x in want | set(counts) if counts.get(x, 0) != 1 or x not in want]
    if bad:
        raise Wrong(
            f"{label}: {len(bad)} window tokens not delivered exactly once (e.g. {sorted(bad)[:2]})"
        )
    sizes = [len(o) - 1 for _, o in srcs]
    _walk_check(samples, sizes, mkw["repeat"], label)
    return what


def case_packer(shardkit, rng: random.Random) -> str:
    cfg = dict(
        capacity=rng.choice([16, 32, 64]),
        algorithm=rng.choice(["bfd", "ffd", "next_fit", "balanced"]),
        oversize=rng.choice(["drop", "split"]),
        buffer=rng.choice([None, 2, 4, 8]),
    )
    if rng.random() < 0.3:
        cfg["max_sequences"] = rng.choice([2, 3])
    items = rng.randint(5, 40)
    lengths = [rng.choice([0, 1, 5, 9, 16, 20, 33, 70]) for _ in range(items)]
    cut = rng.randrange(items + 1)
    pops = [rng.random() < 0.6 for _ in range(items)]

    def run(packer, start, state_at=None):
        out, state = [], None
        for i in range(start, items):
            if state_at == i:
                state = packer.state_dict()
            packer.push(i, lengths[i])
            while pops[i]:
                p = packer.pop()
                if p is None:
                    break
                out.append((i, p))
        if state_at == items:
            state = packer.state_dict()
        packer.finish()
        out += [(items, p) for p in iter(packer.pop, None)]
        return out, state

    ref, state = run(shardkit.StreamingPacker(**cfg), 0, cut)
    what, st, text = mutate(rng, state)
    try:
        packer = shardkit.StreamingPacker(**cfg)
        packer.load_state_dict(text if text is not None else st)
        got, _ = run(packer, cut)
    except (ValueError, IndexError, TypeError) as e:
        raise Refused(e)
    want = [x for x in ref if x[0] >= cut]
    label = f"StreamingPacker({cfg}) over {lengths}, state after {cut} pushes, {what}"
    if [p for _, p in got] != [p for _, p in want]:
        raise Wrong(f"{label}: the packs after the resume differ from the uninterrupted packer's")
    return what


def case_threads(shardkit, rng: random.Random) -> str:
    n = rng.choice([30, 60])
    cfg = dict(
        seq_len=rng.choice([16, 32]),
        batch_size=rng.choice([1, 2]),
        equal_steps=rng.random() < 0.5,
        num_threads=rng.choice([0, 1, 2]),
        buffer=rng.choice([4, None]),
    )
    tokens, offsets = data(n)
    loader = _loader(shardkit, 0, n, **cfg)
    got: List[list] = [[], []]
    errors: List[str] = []

    # Each thread starts its pass and takes one batch before either goes on,
    # so that the two passes run at once (a thread that started after the
    # other's pass ended would rightly get the next epoch).
    both_started = threading.Barrier(2, timeout=4)

    def work(i):
        try:
            for j, b in enumerate(loader):
                got[i].append(pieces_of(b, tokens, offsets))
                if j == 0:
                    both_started.wait()
        except Wrong as e:
            errors.append(f"wrong: {e}")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 4
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    label = f"{_cfg(cfg)} iterated by two threads at once"
    # A broken barrier is the consequence of the other thread's hang or error.
    errors = [e for e in errors if not e.startswith("BrokenBarrierError")]
    if any(t.is_alive() for t in threads):
        raise Hang(
            f"{label}: a thread is still blocked after 4 s ({[len(g) for g in got]} batches)"
        )
    if errors and any(e.startswith("wrong") for e in errors):
        raise Wrong(f"{label}: {errors[0]}")
    keys = [t for g in got for ps in g for t in token_keys(ps, tokens, offsets)]
    if not errors and sorted(keys) == sorted(tokens.tolist() * 2):
        raise Wrong(
            f"{label}: every token twice: when one thread's pass ended, the other went on "
            f"into the next epoch ({[len(g) for g in got]} batches)"
        )
    if errors:
        counts: Dict[int, int] = {}
        for t in keys:
            counts[t] = counts.get(t, 0) + 1
        if any(c > 1 for c in counts.values()):
            raise Wrong(f"{label}: a token delivered twice before {errors[0]}")
        raise Refused(ValueError(errors[0]))
    exactly_once(keys, tokens.tolist(), label)
    return "two threads"


CASES = {
    "rank": case_rank,
    "merged": case_merged,
    "train": case_train,
    "train_plan": case_train_plan,
    "mixture": case_mixture,
    "mixture_loader": case_mixture_loader,
    "packer": case_packer,
    "weights": case_weights,
    "threads": case_threads,
}

# A refusal must name the state, or one of these (the parameter or the field).
NAMES = [
    "state",
    "states",
    "weights",
    "sizes",
    "block",
    "epoch",
    "position",
    "consumed",
    "seed",
    "version",
    "samples",
    "capacity",
    "buffer",
    "world_size",
    "mixture",
    "loader",
    "repeat",
    "schedule",
]
# ... or the state's field it refuses (every key a state kind has).
NAMES += """kind head done read consumers consumer batches packer buffered pending items_seen
dropped split_items packs_closed tokens_closed num_documents num_tokens data_hash seq_len
shuffle shard_files fingerprint checksum stream start origin skip interpolation by tokens
lengths schedule_unit item length images""".split()


def run_case(kind: str, seed: int) -> dict:
    """One case: {"verdict", "what" or "detail", "op"}."""
    r = _run_case(kind, seed)
    r.setdefault("op", LAST["op"])
    return r


def _run_case(kind: str, seed: int) -> dict:
    import shardkit

    rng = random.Random(f"{kind}:{seed}")
    LAST["op"] = None
    try:
        what = CASES[kind](shardkit, rng)
        return {"verdict": "ok", "what": what, "op": LAST["op"]}
    except Wrong as e:
        return {"verdict": "wrong", "detail": str(e)[:600], "op": LAST["op"]}
    except Hang as e:
        return {"verdict": "hang", "detail": str(e)[:600], "op": LAST["op"]}
    except Refused as r:
        e = r.error
        message = str(e)
        if LAST["op"] == "none" and kind != "weights":
            return {"verdict": "refused-valid", "detail": f"{type(e).__name__}: {message[:300]}"}
        if "\n" in message:
            return {"verdict": "not-one-line", "detail": f"{type(e).__name__}: {message[:300]}"}
        if not any(re.search(rf"\b{re.escape(n)}\b", message) for n in NAMES):
            return {"verdict": "no-parameter", "detail": f"{type(e).__name__}: {message[:300]}"}
        return {"verdict": "rejected", "detail": message[:200]}
    except Exception as e:  # noqa: BLE001 - the point is to catch everything else
        return {"verdict": "other-exception", "detail": f"{type(e).__name__}: {str(e)[:300]}"}


# ---- the command line: --resume with a mutated state, kill during save ------

# The loader-stats runs whose states are mutated: (name, flags). Every one over
# the data set of 40 documents written by cli_setup (A; B has the same lengths
# and other tokens).
CLI_CONFIGS = [
    (
        "per-rank",
        ["--per-rank", "--world", "3", "--seq-len", "16", "--batch", "2", "--buffer", "4"],
    ),
    (
        "per-rank-1",
        ["--per-rank", "--seq-len", "32", "--batch", "1", "--buffer", "8", "--no-shuffle"],
    ),
    ("equal-steps", ["--world", "2", "--seq-len", "32", "--batch", "2", "--buffer", "4"]),
    ("continuous", ["--world", "2", "--seq-len", "16", "--batch", "1", "--mode", "continuous"]),
    (
        "mixture",
        ["--world", "2", "--seq-len", "32", "--batch", "1", "--buffer", "4", "--block", "16"],
    ),
]


def _cli_json(cli: str, args: list, timeout: float = 20.0) -> dict:
    import subprocess

    p = subprocess.run([cli, *args], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if p.returncode != 0:
        raise RuntimeError(f"{args}: exit {p.returncode}: {p.stderr.decode()[-300:]}")
    return json.loads(p.stdout)


def cli_setup(cli: str, root) -> dict:
    """Writes the data sets and, per configuration, the uninterrupted run's
    figures and the states saved after a few batches (of A and of B)."""
    from pathlib import Path

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    out: dict = {"configs": {}}
    paths = {}
    for tag in (0, 1):
        t, o = data(40, tag)
        paths[tag] = (str(root / f"d{tag}.tokens.npy"), str(root / f"d{tag}.offsets.npy"))
        np.save(paths[tag][0], t)
        np.save(paths[tag][1], o)
        mt, mo = _mix_sources(12, 2, tag)[1]
        paths[("m", tag)] = (str(root / f"m{tag}.tokens.npy"), str(root / f"m{tag}.offsets.npy"))
        np.save(paths[("m", tag)][0], mt)
        np.save(paths[("m", tag)][1], mo)
    for name, flags in CLI_CONFIGS:
        for tag in (0, 1):
            if name == "mixture":
                mix = ",".join(f"{a}:{b}" for a, b in (paths[tag], paths[("m", tag)]))
                data_flags = ["--mixture", mix, "--weights", "1,2"]
            else:
                data_flags = ["--tokens", paths[tag][0], "--offsets", paths[tag][1]]
            base = ["loader-stats"] + data_flags + flags + ["--quiet", "--json", "--threads", "0"]
            full = _cli_json(cli, base)
            k = 2
            state = str(root / f"{name}.{tag}.json")
            part = _cli_json(cli, base + ["--max-batches", str(k), "--save-state", state])
            out["configs"][(name, tag)] = {
                "base": base,
                "full": full,
                "part": part,
                "state": json.loads(Path(state).read_text()),
            }
    out["root"] = str(root)
    return out


def _per_rank(report: dict) -> Dict[int, Tuple[int, int, int]]:
    return {r["rank"]: (r["batches"], r["tokens"], r["pieces"]) for r in report["ranks"]}


def cli_state_case(cli: str, setup: dict, seed: int, timeout: float) -> dict:
    r = _cli_state_case(cli, setup, seed, timeout)
    r.setdefault("op", LAST["op"])
    return r


def _cli_state_case(cli: str, setup: dict, seed: int, timeout: float) -> dict:
    """`loader-stats ... --resume S` with S a mutated state: refused (exit 2,
    one stderr line naming a flag), or the rest of the run: per rank, the
    uninterrupted run's batches, tokens and pieces minus those of the run that
    saved the state (another world size: the tokens of every rank together)."""
    import os
    import subprocess

    rng = random.Random(f"cli:{seed}")
    LAST["op"] = None
    name = rng.choice([c[0] for c in CLI_CONFIGS])
    cfg = setup["configs"][(name, 0)]
    what, state, text = mutate(rng, cfg["state"], setup["configs"][(name, 1)]["state"])
    path = os.path.join(setup["root"], f"resume.{seed}.json")
    with open(path, "w") as f:
        f.write(text if text is not None else json.dumps(state))
    args = list(cfg["base"])
    world = int(args[args.index("--world") + 1]) if "--world" in args else 1
    new_world = world
    if name in ("per-rank", "equal-steps") and rng.random() < 0.3:
        new_world = rng.choice([1, 2, 4])
        if "--world" in args:
            args[args.index("--world") + 1] = str(new_world)
        else:
            args += ["--world", str(new_world)]
    args += ["--resume", path]
    label = f"loader-stats [{name}] --world {new_world} --resume <state: {what}>"
    try:
        p = subprocess.run(
            [cli, *args], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return {"verdict": "hang", "detail": f"{label}: over {timeout} s", "op": LAST["op"]}
    finally:
        os.unlink(path)
    err = [ln for ln in p.stderr.decode(errors="replace").splitlines() if ln.strip()]
    if p.returncode < 0:
        return {"verdict": "crash", "detail": f"{label}: signal {-p.returncode}", "op": LAST["op"]}
    if p.returncode != 0:
        if p.returncode != 2 or len(err) != 1:
            return {
                "verdict": "not-one-line",
                "detail": f"{label}: exit {p.returncode}: {err[-3:]}",
            }
        if "--" not in err[0]:
            return {"verdict": "no-flag", "detail": f"{label}: {err[0][:300]}"}
        if LAST["op"] == "none":
            return {"verdict": "refused-valid", "detail": f"{label}: {err[0][:300]}"}
        return {"verdict": "rejected", "detail": err[0][:200]}
    got = json.loads(p.stdout)
    full, part = cfg["full"], cfg["part"]
    if what.startswith("the state of another data set"):
        return {
            "verdict": "wrong",
            "detail": f"{label}: a state of another data set of equal lengths accepted "
            f"({got['real_tokens']} tokens delivered)",
            "op": LAST["op"],
        }
    if new_world == world:
        want = {
            r: tuple(a - b for a, b in zip(f, _per_rank(part)[r]))
            for r, f in _per_rank(full).items()
        }
        if name == "continuous":
            # the rest of a continuous epoch ends where the uninterrupted one did
            want = {r: w[:2] for r, w in want.items()}
            have = {r: v[:2] for r, v in _per_rank(got).items()}
        else:
            have = _per_rank(got)
        if have != want:
            return {
                "verdict": "wrong",
                "detail": f"{label}: per rank (batches, tokens, pieces) {have}, the rule says {want}",
                "op": LAST["op"],
            }
    else:
        want_tokens = full["real_tokens"] - part["real_tokens"]
        if got["real_tokens"] != want_tokens:
            return {
                "verdict": "wrong",
                "detail": f"{label}: {got['real_tokens']} tokens delivered after the resume, "
                f"the rest of the epoch is {want_tokens}",
                "op": LAST["op"],
            }
    return {"verdict": "ok", "op": LAST["op"]}


def kill_during_save_case(cli: str, setup: dict, seed: int, timeout: float) -> dict:
    """`loader-stats ... --resume ck.json --save-state ck.json` (the natural
    use) stopped during the run by SIGKILL at a random time, or by a file-size
    limit (SIGXFSZ, as a full disk would stop the write): the checkpoint there
    before must still load (or the new one, when the run finished)."""
    import os
    import resource
    import signal
    import subprocess

    rng = random.Random(f"kill:{seed}")
    name = rng.choice(["per-rank", "equal-steps", "mixture"])
    cfg = setup["configs"][(name, 0)]
    ck = os.path.join(setup["root"], f"ck.{seed}.json")
    with open(ck, "w") as f:
        json.dump(cfg["state"], f)
    size = os.path.getsize(ck)
    args = cfg["base"] + ["--resume", ck, "--max-batches", "3", "--save-state", ck]
    how = rng.choice(["kill", "kill", "fsize"])
    limit = rng.randrange(1, size)

    def limit_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    label = f"loader-stats [{name}] --resume ck.json --max-batches 3 --save-state ck.json"
    if how == "kill":
        delay = rng.uniform(0, 0.03)
        p = subprocess.Popen([cli, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        label += f", SIGKILL after {delay * 1000:.1f} ms"
    else:
        p = subprocess.run(
            [cli, *args], capture_output=True, timeout=timeout, preexec_fn=limit_size
        )
        label += f", file-size limit {limit} bytes (the checkpoint has {size})"
    check = cfg["base"] + ["--resume", ck, "--max-batches", "1"]
    q = subprocess.run([cli, *check], capture_output=True, timeout=timeout)
    bad = None
    if q.returncode != 0:
        bad = f"{label}: the checkpoint no longer loads ({q.stderr.decode(errors='replace').strip()[:200]})"
    os.unlink(ck)
    if bad:
        return {"verdict": "wrong", "detail": bad, "op": how}
    return {"verdict": "ok", "op": how}
