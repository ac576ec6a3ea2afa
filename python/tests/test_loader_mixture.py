"""TokenLoader.mixture: a TokenLoader whose order stage is a shardkit.Mixture
over several token sources. The oracle is written here: each source's own
arrays, the mixture's per-block counts recomputed from the delivered pieces,
and the sources' walks (every item once per epoch of its source)."""

import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from mixture_common import batch_pieces, make_source, write_sources
from torchrun_launch import finish, kill_after_checkpoint, launch

import shardkit

HERE = Path(__file__).resolve().parent


def corpus(seed, sizes):
    rng = np.random.default_rng(seed)
    return [make_source(rng, s, n) for s, n in enumerate(sizes)]


def run(loader):
    """Every piece of one epoch: (document, start, length, source, item), the
    tokens checked against the source's own arrays."""
    out = []
    loader.batches = 0
    for batch in loader:
        loader.batches += 1
        for d, st, ln, s, it, ok in batch_pieces(batch):
            assert ok, (d, st, ln, s, it)
            out.append((d, st, ln, s, it))
    return out


def whole(pieces, lengths_of):
    """Pieces -> {document: tokens}; every document tiled exactly once."""
    by = defaultdict(list)
    for d, st, ln, s, it in pieces:
        by[d].append((st, ln, s, it))
    for d, ps in by.items():
        ps.sort()
        at = 0
        for st, ln, s, it in ps:
            assert st == at, f"document {d}: gap or overlap"
            at += ln
        assert at == lengths_of(ps[0][2], ps[0][3]), f"document {d} incomplete"
    return by


@pytest.mark.parametrize("equal_steps", [True, False])
def test_ranks_deliver_the_mixture_window_exactly_once_with_exact_block_counts(equal_steps):
    sources = corpus(1, [60, 400, 9])
    sizes = [len(o) - 1 for _, o in sources]

    def length(s, it):
        return int(sources[s][1][it + 1] - sources[s][1][it])

    world, samples = 3, 700
    for epoch in (0, 1):
        pieces, steps = [], []
        for rank in range(world):
            loader = shardkit.TokenLoader.mixture(
                sources,
                [2, 5, 1],
                by="samples",
                block=64,
                seed=11,
                samples=samples,
                seq_len=64,
                batch_size=2,
                rank=rank,
                world_size=world,
                epoch=epoch,
                equal_steps=equal_steps,
                num_threads=rank % 2,
            )
            assert loader.num_documents == samples
            pieces += run(loader)
            steps.append(loader.batches)
        if equal_steps:
            assert len(set(steps)) == 1, steps
        by = whole(pieces, length)
        assert sorted(by) == list(range(samples))  # every sample of the window once
        mix = shardkit.Mixture(sizes, [2, 5, 1], block=64, seed=11)
        first = epoch * samples
        src = np.array([by[d][0][2] for d in range(samples)])
        itm = np.array([by[d][0][3] for d in range(samples)])
        want_s, want_i = mix.numpy(first, first + samples)
        assert (src == want_s).all() and (itm == want_i).all()
        # exact counts in every whole block (the cumulative rounding of 2:5:1)
        for b in range(first // 64 + 1, (first + samples) // 64):
            block = src[b * 64 - first : (b + 1) * 64 - first]
            assert np.bincount(block, minlength=3).tolist() == mix.block_counts(b)
        # every source walks its items once per epoch of that source
        walked = mix.consumed(first)
        for s in range(3):
            got = itm[src == s]
            c0 = walked[s]
            for e0 in range(-(c0 % sizes[s]), len(got), sizes[s]):
                chunk = got[max(e0, 0) : e0 + sizes[s]]
                assert len(set(chunk.tolist())) == len(chunk), (s, e0)


def test_token_weights_are_what_the_model_sees():
    sources = corpus(2, [3000, 300, 3000])
    # source 1 has few documents, so it repeats; tokens follow 1:2:1
    sources[1] = make_source(np.random.default_rng(5), 1, 300, 200, 400)
    loader = shardkit.TokenLoader.mixture(
        sources, [1, 2, 1], by="tokens", seed=3, samples=4000, seq_len=128, batch_size=4
    )
    tokens = Counter()
    for batch in loader:
        for s, ln in zip(batch["sources"].tolist(), batch["lengths"].tolist()):
            tokens[s] += ln
    total = sum(tokens.values())
    shares = [tokens[s] / total for s in range(3)]
    # counts are exact per block; tokens vary with the lengths drawn (about 1%)
    assert abs(shares[0] - 0.25) < 0.02 and abs(shares[1] - 0.5) < 0.02, shares


def test_schedule_in_tokens_switches_where_the_nominal_tokens_reach_the_point():
    """schedule_unit="tokens": source 0 alone until the nominal tokens drawn
    (documents x mean length) reach the point, then source 1 alone; the
    switch is the first block boundary at or past it (recomputed here from the
    sources' own lengths)."""
    sources = corpus(6, [2000, 2000])
    mean0 = (sources[0][1][-1]) / 2000
    point, block = 30_000, 64
    loader = shardkit.TokenLoader.mixture(
        sources,
        [1, 0],
        by="samples",
        schedule=[(point, [0, 1])],
        schedule_unit="tokens",
        block=block,
        samples=1500,
        seq_len=64,
        batch_size=4,
        equal_steps=False,
    )
    order = sorted({(d, s) for d, st, ln, s, it in run(loader)})
    kinds = [s for _, s in order]
    switch = kinds.index(1)
    assert set(kinds[:switch]) == {0} and set(kinds[switch:]) == {1}
    assert switch % block == 0
    assert switch * mean0 >= point > (switch - block) * mean0
    # the same through a Mixture: the segment begins there
    mix = loader.mixture
    assert [b for b, _ in mix.segments] == [0, switch]


def test_resume_equals_uninterrupted_and_another_mixture_is_refused():
    sources = corpus(3, [50, 200])
    kw = dict(seed=5, samples=500, seq_len=48, batch_size=2, world_size=2, rank=1)
    full = [b["input_ids"].copy() for b in shardkit.TokenLoader.mixture(sources, [1, 3], **kw)]
    first = shardkit.TokenLoader.mixture(sources, [1, 3], **kw)
    it = iter(first)
    head = [next(it)["input_ids"].copy() for _ in range(4)]
    state = json.loads(json.dumps(first.state_dict()))
    rest = shardkit.TokenLoader.mixture(sources, [1, 3], **kw)
    rest.load_state_dict(state)
    tail = [b["input_ids"].copy() for b in rest]
    assert len(head) + len(tail) == len(full)
    for a, b in zip(head + tail, full):
        assert (a == b).all()
    # per rank: states of every consumer, merged, continue on another world size
    per = dict(kw, equal_steps=False, world_size=2)
    loaders = [shardkit.TokenLoader.mixture(sources, [1, 3], **dict(per, rank=r)) for r in range(2)]
    seen = []
    for ld in loaders:
        it = iter(ld)
        for _ in range(3):
            b = next(it)
            seen += list(zip(b["documents"].tolist(), b["starts"].tolist(), b["lengths"].tolist()))
    states = [ld.state_dict() for ld in loaders]
    for r in range(3):
        ld = shardkit.TokenLoader.mixture(sources, [1, 3], **dict(per, rank=r, world_size=3))
        ld.load_state_dict(states)
        for b in ld:
            seen += list(zip(b["documents"].tolist(), b["starts"].tolist(), b["lengths"].tolist()))
    docs = defaultdict(int)
    for d, st, ln in seen:
        docs[d] += ln
    assert sorted(docs) == list(range(500))
    # another seed: another run, refused naming it; a bare loader state (no
    # order) of other weights: another window, refused by its fingerprint.
    # (Other weights with a whole state change the run's weights: see
    # test_resume_with_new_weights_keeps_what_was_read_and_continues_every_source.)
    ld = shardkit.TokenLoader.mixture(sources, [1, 3], **dict(kw, seed=6))
    with pytest.raises(ValueError, match="^seed: "):
        ld.load_state_dict(state)
    ld = shardkit.TokenLoader.mixture(sources, [3, 1], **kw)
    with pytest.raises(ValueError, match="^state: "):
        ld.load_state_dict(state["loader"])


def test_epochs_continue_every_source_and_a_bounded_mixture_ends():
    sources = corpus(4, [20, 30])
    loader = shardkit.TokenLoader.mixture(
        sources,
        [1, 1],
        by="samples",
        repeat=[False, True],
        block=2,
        seq_len=32,
        batch_size=2,
        seed=1,
    )
    assert loader.mixture.bounded
    assert loader.samples_per_epoch == len(loader.mixture)
    pieces = run(loader)
    items0 = sorted({(s, it) for _, _, _, s, it in pieces if s == 0})
    assert items0 == [(0, i) for i in range(20)]  # the non-repeating source once, whole
    assert loader.window(1) == (len(loader.mixture), 0)  # nothing after its end
    assert list(loader) == []


def test_bad_input_names_the_parameter():
    sources = corpus(5, [10, 10])
    kw = dict(seq_len=16, batch_size=2)
    cases = [
        (dict(sources=[], weights=[]), "sources"),
        (dict(sources=sources, weights=[1]), "weights"),
        (dict(sources=sources, weights=[1, 1], shuffle=True), "shuffle"),
        (dict(sources=sources, weights=[1, 1], mode="continuous"), "mode"),
        (dict(sources=sources, weights=[1, 1], samples=0), "samples"),
        (dict(sources=[(sources[0][0],)], weights=[1]), "sources"),
        (dict(sources=sources, weights=[1, 1], by="bytes"), "by"),
    ]
    for args, name in cases:
        with pytest.raises(ValueError, match=name):
            loader = shardkit.TokenLoader.mixture(**args, **kw)
            next(iter(loader))


def test_regression_corrupt_offsets_deep_in_a_source_are_one_line_before_any_batch(cli, tmp_path):
    """A source whose offsets go down at entry 2,500,001 of 3 Mi (past the pages the
    open pass releases, issue 25): TokenLoader.mixture raises one ValueError naming
    offsets, the file and the entry before any batch; the CLI exits 2 with that line."""
    n = 3 << 20
    offsets = np.arange(n + 1, dtype=np.int64)
    offsets[2_500_001] = 2_499_999
    np.save(tmp_path / "t0.npy", np.ones(n, dtype=np.uint16))
    np.save(tmp_path / "o0.npy", offsets)
    np.save(tmp_path / "t1.npy", np.ones(40, dtype=np.uint16))
    np.save(tmp_path / "o1.npy", np.arange(0, 41, 4, dtype=np.int64))
    sources = [(str(tmp_path / f"t{s}.npy"), str(tmp_path / f"o{s}.npy")) for s in range(2)]
    want = f"offsets: {tmp_path / 'o0.npy'}: offsets[2500001] = 2499999 < offsets[2500000]"
    for equal_steps in (True, False):
        with pytest.raises(ValueError) as error:
            loader = shardkit.TokenLoader.mixture(
                sources, [1, 1], seq_len=64, batch_size=2, equal_steps=equal_steps
            )
            next(iter(loader))
        assert str(error.value).startswith(want), error.value
    out = cli(
        "loader-stats", "--mixture", ",".join(f"{t}:{o}" for t, o in sources),
        "--weights", "1,1", "--seq-len", 64, "--batch", 2, "--quiet",
    )  # fmt: skip
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "offsets[2500001] = 2499999 < offsets[2500000]" in lines[0], lines


def test_shuffle_false_and_shard_files_false_are_accepted_and_deliver_the_default_run():
    # The core refuses shuffle=True and shard_files=True by name and accepts
    # False ("give false"): what is then delivered is the run without them.
    sources = corpus(7, [40, 60])
    kw = dict(weights=[2, 1], seq_len=32, batch_size=2, world_size=2, rank=1, seed=3)
    plain = run(shardkit.TokenLoader.mixture(sources, **kw))
    assert plain
    for extra in (dict(shuffle=False), dict(shard_files=False)):
        assert run(shardkit.TokenLoader.mixture(sources, **kw, **extra)) == plain, extra


def test_torchrun_four_ranks_equal_steps_over_three_sources(tmp_path):
    pytest.importorskip("torch")
    sizes = [300, 500, 80]
    write_sources(tmp_path, sizes, 50, 150, seed=8)
    finish(launch("mixture_torchrun_worker.py", 4, tmp_path), 240)
    runs = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(4)]
    assert len({r["steps"] for r in runs}) == 1 and runs[0]["steps"] > 0  # equal steps
    pieces = [tuple(p) for r in runs for p in r["pieces"]]
    offsets = [np.load(tmp_path / f"offsets{s}.npy") for s in range(3)]
    by = whole(pieces, lambda s, it: int(offsets[s][it + 1] - offsets[s][it]))
    samples = runs[0]["samples"]
    assert sorted(by) == list(range(samples))
    # the non-repeating source 0: every document exactly once
    zero = sorted(ps[0][3] for ps in by.values() if ps[0][2] == 0)
    assert zero == list(range(sizes[0]))
    tokens = Counter()
    for d, st, ln, s, it in pieces:
        tokens[s] += ln
    total = sum(tokens.values())
    weights = [0.2, 0.5, 0.3]
    for s in range(3):  # exact counts per block; lengths in [50, 150] vary the tokens
        assert abs(tokens[s] / total - weights[s]) < 0.03, (s, tokens)


def tiled_window(pieces, src, itm, sources):
    """Every document of a window (document d is item itm[d] of source src[d])
    tiled exactly once by the pieces, each piece naming its document's item."""
    for d, st, ln, s, it in pieces:
        assert (s, it) == (src[d], itm[d]), (d, s, it)
    by = whole(pieces, lambda s, it: int(sources[s][1][it + 1] - sources[s][1][it]))
    assert sorted(by) == list(range(len(src)))


def walk(sizes, seed, source, count):
    """The first `count` items of `source`'s walk, read off a mixture of equal
    weights with the same seed (a source's walk depends on the seed and its
    size only, never on the weights)."""
    ref = shardkit.Mixture(sizes, [1] * len(sizes), by="samples", seed=seed)
    got = np.zeros(0, dtype=np.int64)
    stop = 256
    while len(got) < count:
        src, itm = ref.numpy(0, stop)
        got = itm[src == source]
        stop *= 2
    return got[:count]


def pieces_of(loader, n=None):
    """(document, start, length, source, item) of up to n batches (tokens checked)."""
    out = []
    for i, batch in enumerate(loader):
        for d, st, ln, s, itm, ok in batch_pieces(batch):
            assert ok, (d, st, ln, s, itm)
            out.append((d, st, ln, s, itm))
        if n is not None and i + 1 >= n:
            break
    return out


def test_resume_with_new_weights_keeps_what_was_read_and_continues_every_source():
    """Random corpora, weights, loader shapes and resume points; the weights
    change on resume (also on another world size): what was read stays, every
    piece is delivered once across the change, every source continues its walk,
    the rest follows the new weights, unchanged weights give the same bytes."""
    rng = np.random.default_rng(11)
    changed_seen = checked = 0
    for trial in range(16):
        k = int(rng.integers(1, 4))
        sizes = [int(rng.integers(5, 120)) for _ in range(k)]
        sources = corpus(100 + trial, sizes)
        seed = int(rng.integers(0, 2**63))
        w0 = [int(x) for x in rng.integers(1, 9, k)]
        same = trial % 4 == 3
        w1 = list(w0) if same else [int(x) for x in rng.integers(0, 9, k)]
        if sum(w1) == 0:
            w1[0] = 1
        same = w1 == w0
        equal = trial % 2 == 0
        world0, world1 = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        epoch = int(rng.integers(0, 2))
        kw = dict(
            by="samples",
            block=64,
            seed=seed,
            samples=int(rng.integers(60, 400)),
            seq_len=int(rng.integers(24, 96)),
            batch_size=int(rng.integers(1, 4)),
            buffer=int(rng.integers(1, 12)),
            equal_steps=equal,
            epoch=epoch,
        )
        steps = int(rng.integers(0, 5))
        old = [
            shardkit.TokenLoader.mixture(sources, w0, **kw, rank=r, world_size=world0)
            for r in range(world0)
        ]
        first, _ = old[0].window()
        before = pieces_of(old[0], steps) if steps else []
        for ld in old[1:]:
            before += pieces_of(ld, steps) if steps else []
        states = [json.loads(json.dumps(ld.state_dict())) for ld in old]
        state = states[0] if equal else states
        new = []
        for r in range(world1):
            ld = shardkit.TokenLoader.mixture(sources, w1, **kw, rank=r, world_size=world1)
            ld.load_state_dict(state)
            new.append(ld)
        changed, read, at = new[0].last_resume
        assert changed == (not same)
        changed_seen += changed
        if new[0].epoch != epoch:  # the epoch ran out before the state
            continue
        checked += changed
        src, itm = new[0].window_samples()
        old_src, old_itm = old[0].window_samples(epoch)
        if changed:
            assert at == first + read
            # what was read stays; nothing delivered past the read point
            assert (src[:read] == old_src[:read]).all() and (itm[:read] == old_itm[:read]).all()
            assert all(d < read for d, *_ in before)
        after = []
        counts = []
        for ld in new:
            got = pieces_of(ld)
            counts.append(len({(d, s) for d, *_, s, _ in got}) if got else 0)
            after += got
            if equal:
                assert ld.num_steps == new[0].num_steps
        # every document of the window tiled exactly once across the change
        tiled_window(before + after, src, itm, sources)
        # every source continues its walk from its count before the window
        c0 = shardkit.Mixture(sizes, w0, by="samples", block=64, seed=seed).consumed(first)
        for s in range(k):
            mine = itm[src == s]
            assert (mine == walk(sizes, seed, s, c0[s] + len(mine))[c0[s] :]).all(), (trial, s)
        # the new weights from the change on: within one sample at every block
        if changed:
            block = new[0].mixture.block
            total = sum(w1)
            rest = src[read:]
            for tau in range(0, len(rest) + 1, block):
                seen = np.bincount(rest[:tau], minlength=k)
                target = np.array(w1) * tau / total
                assert (np.abs(seen - target) < 1).all(), (trial, tau)
    assert changed_seen >= 8 and checked >= 6, (changed_seen, checked)


def test_unchanged_weights_resume_byte_for_byte_and_a_change_is_deterministic():
    sources = corpus(21, [60, 150, 30])
    kw = dict(seed=4, samples=600, seq_len=64, batch_size=2, world_size=2, rank=0, block=64)
    full = [b["input_ids"].copy() for b in shardkit.TokenLoader.mixture(sources, [1, 2, 3], **kw)]
    first = shardkit.TokenLoader.mixture(sources, [1, 2, 3], **kw)
    it = iter(first)
    head = [next(it)["input_ids"].copy() for _ in range(3)]
    state = json.loads(json.dumps(first.state_dict()))
    assert state["kind"] == "mixture_loader" and state["loader"]["kind"] == "train_plan"
    same = shardkit.TokenLoader.mixture(sources, [1, 2, 3], **kw)
    same.load_state_dict(state)
    assert same.last_resume == (False, 0, 0)
    tail = [b["input_ids"].copy() for b in same]
    assert len(head) + len(tail) == len(full)
    assert all((a == b).all() for a, b in zip(head + tail, full))
    # a change: both ranks compute the same thing, and a state taken after the
    # change resumes the changed run exactly (its order travels with it)
    runs = []
    for _ in range(2):
        ld = shardkit.TokenLoader.mixture(sources, [5, 0, 1], **kw)
        ld.load_state_dict(state)
        assert ld.last_resume[0] and ld.changes == [ld.last_resume[2]]
        it = iter(ld)
        a = [next(it)["input_ids"].copy() for _ in range(2)]
        later = json.loads(json.dumps(ld.state_dict()))
        b = [x["input_ids"].copy() for x in it]
        runs.append((a, b, later))
    assert all((x == y).all() for x, y in zip(runs[0][0] + runs[0][1], runs[1][0] + runs[1][1]))
    again = shardkit.TokenLoader.mixture(sources, [5, 0, 1], **kw)
    again.load_state_dict(runs[0][2])
    assert again.last_resume[0] is False
    rest = [x["input_ids"].copy() for x in again]
    assert len(rest) == len(runs[0][1])
    assert all((x == y).all() for x, y in zip(rest, runs[0][1]))
    # the next epoch follows the new weights: source 1 (weight 0) is absent
    nxt = [b["sources"] for b in again]
    assert nxt and all((s != 1).all() for s in nxt)


def test_resume_with_new_weights_refuses_one_consumer_of_several_and_another_run():
    sources = corpus(22, [40, 40])
    kw = dict(seed=4, samples=200, seq_len=32, batch_size=2, equal_steps=False, world_size=2)
    a = shardkit.TokenLoader.mixture(sources, [1, 1], **kw, rank=0)
    next(iter(a))
    ld = shardkit.TokenLoader.mixture(sources, [1, 3], **kw, rank=0)
    with pytest.raises(ValueError, match="^state: is consumer 0's of 2"):
        ld.load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="^samples: "):
        shardkit.TokenLoader.mixture(
            sources, [1, 3], **dict(kw, samples=201), rank=0
        ).load_state_dict(a.state_dict())
    with pytest.raises(ValueError, match="^by: "):
        shardkit.TokenLoader.mixture(sources, [1, 3], **kw, rank=0, by="samples").load_state_dict(
            a.state_dict()
        )
    bad = a.state_dict()
    bad["mixture"][0]["weights"] = ["x", "1"]
    with pytest.raises(ValueError, match="^state: "):
        ld.load_state_dict(bad)


def test_torch_dataset_over_a_mixture_equal_steps_with_workers_and_new_weights():
    """shardkit.torch.TokenDataset.mixture with TokenDataLoader workers: every
    rank the same number of batches, every piece once; stopped after 3 steps,
    resumed with new weights on another world size and worker count: every
    piece of the epoch once across the change, equal steps again."""
    pytest.importorskip("torch")
    from shardkit.torch import TokenDataLoader, TokenDataset

    sources = corpus(31, [80, 200, 40])
    kw = dict(seed=3, samples=400, seq_len=64, batch_size=2, block=64, by="samples")

    def run(weights, world, workers, state=None, stop=None):
        batches, pieces, states = [], [], []
        for r in range(world):
            ds = TokenDataset.mixture(sources, weights, rank=r, world_size=world, **kw)
            if state is not None:
                ds.load_state_dict(state)
            dl = TokenDataLoader(ds, num_workers=workers)
            n = 0
            for batch in dl:
                n += 1
                pieces += zip(
                    batch["documents"].tolist(),
                    batch["starts"].tolist(),
                    batch["lengths"].tolist(),
                    batch["sources"].tolist(),
                    batch["items"].tolist(),
                )
                if n == stop:
                    break
            batches.append(n)
            states.append(json.loads(json.dumps(dl.state_dict())))
        return batches, pieces, states

    full, pieces, _ = run([1, 2, 1], world=2, workers=2)
    assert len(set(full)) == 1 and full[0] > 3
    ref = shardkit.TokenLoader.mixture(sources, [1, 2, 1], **kw)
    tiled_window(pieces, *ref.window_samples(), sources)

    head, before, states = run([1, 2, 1], world=2, workers=2, stop=3)
    assert head == [3, 3] and states[0] == states[1]  # one state, the same on every rank
    after_batches, after, _ = run([3, 0, 1], world=3, workers=1, state=states[0])
    assert len(set(after_batches)) == 1
    new = shardkit.TokenLoader.mixture(sources, [3, 0, 1], **kw)
    new.load_state_dict(states[0])
    changed, read, at = new.last_resume
    assert changed and read > 0
    src, itm = new.window_samples()
    tiled_window(before + after, src, itm, sources)
    assert all(s != 1 for d, *_, s, _ in after if d >= read)  # weight 0 after the change
    # epochs through the DataLoader: a pass ends at the next epoch's start
    ds = TokenDataset.mixture(sources, [1, 2, 1], rank=0, world_size=1, **kw)
    dl = TokenDataLoader(ds, num_workers=2)
    firsts = []
    for _ in range(2):
        docs = [d for b in dl for d in b["documents"].tolist()]
        assert sorted(set(docs)) == list(range(400))
        firsts.append((ds.epoch, dl.state_dict()["epoch"]))  # the pass's, the next
    assert firsts == [(0, 1), (1, 2)]


def test_cli_loader_stats_over_a_mixture_and_resume_with_new_weights(cli, tmp_path):
    """shardkit loader-stats --mixture: realised against target shares, every
    token of the window once; --save-state / --resume with other --weights on
    another world size: the rest of the window, the change at the read point."""
    rng = np.random.default_rng(9)
    paths = []
    for s, n in enumerate([120, 300, 60]):
        tokens, offsets = make_source(rng, s, n, 20, 200)
        np.save(tmp_path / f"t{s}.npy", tokens)
        np.save(tmp_path / f"o{s}.npy", offsets)
        paths.append(f"{tmp_path / f't{s}.npy'}:{tmp_path / f'o{s}.npy'}")
    common = ["--mixture", ",".join(paths), "--seq-len", 256, "--batch", 2, "--quiet"]
    common += ["--samples", 900, "--seed", 5, "--buffer", 16]
    out = cli("loader-stats", *common, "--weights", "6,3,1", "--world", 2, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["complete"] is True and doc["equal_steps"] is True
    mix = doc["mixture"]
    assert mix["by"] == "tokens" and (mix["first"], mix["count"]) == (0, 900)
    assert [round(s["target"], 3) for s in mix["sources"]] == [0.6, 0.3, 0.1]
    # the realised token shares, recomputed here from the sources' own lengths
    sources = [(np.load(tmp_path / f"t{s}.npy"), np.load(tmp_path / f"o{s}.npy")) for s in range(3)]
    same = dict(samples=900, seed=5, seq_len=256, batch_size=2)  # the CLI runs' --samples ...
    ref = shardkit.TokenLoader.mixture(sources, [6, 3, 1], **same)
    src, itm = ref.window_samples()
    lengths = [np.diff(np.load(tmp_path / f"o{s}.npy")) for s in range(3)]
    want = np.zeros(3, dtype=np.int64)
    for s, it in zip(src.tolist(), itm.tolist()):
        want[s] += lengths[s][it]
    assert [s["tokens"] for s in mix["sources"]] == want.tolist()
    assert all(abs(s["realised"] - t) < 0.05 for s, t in zip(mix["sources"], [0.6, 0.3, 0.1]))
    text = cli("loader-stats", *common, "--weights", "6,3,1", "--world", 2)
    assert "realised" in text.stdout and "mixture of 3 sources by tokens" in text.stdout

    # stop after 3 steps, resume on 3 ranks with 1:1:8
    state = tmp_path / "state.json"
    head = cli(
        "loader-stats",
        *common,
        "--weights",
        "6,3,1",
        "--world",
        2,
        "--max-batches",
        3,
        "--save-state",
        state,
        "--json",
    )
    assert head.returncode == 0, head.stderr
    rest = cli(
        "loader-stats", *common, "--weights", "1,1,8", "--world", 3, "--resume", state, "--json"
    )
    assert rest.returncode == 0, rest.stderr
    after = json.loads(rest.stdout)["mixture"]
    # a packer reads ahead (its buffer: 16 documents here), so the change lands
    # after what it had read, not at the last piece delivered
    assert after["changed"] is True and 0 < after["at"] == after["read"] < 100
    # what was read stays: together the two runs deliver every token of the new window
    # the packing decides the read point: the CLI run's buffer
    new = shardkit.TokenLoader.mixture(sources, [1, 1, 8], **same, buffer=16)
    new.load_state_dict(json.loads(state.read_text())[0])
    src, itm = new.window_samples()
    total = sum(lengths[s][it] for s, it in zip(src.tolist(), itm.tolist()))
    first = json.loads(head.stdout)["real_tokens"]
    assert first + json.loads(rest.stdout)["real_tokens"] == total
    # one-line errors naming the flag
    for args, flag in [
        (["--weights", "1,x,1"], "--weights"),
        (["--weights", "1,1"], "weights"),
        (["--weights", "1,1,1", "--dir", tmp_path], "--dir"),
        (["--weights", "1,1,1", "--no-repeat", 7], "--no-repeat"),
        (["--weights", "1,1,1", "--by", "bytes"], "--by"),
        (["--weights", "1,1,1", "--mode", "continuous"], "--mode"),
    ]:
        bad = cli("loader-stats", *common, *args)
        assert bad.returncode == 2 and flag in bad.stderr and bad.stderr.count("\n") == 1, (
            args,
            bad.stderr,
        )
    bad = cli(
        "loader-stats",
        "--tokens",
        "t",
        "--offsets",
        "o",
        "--seq-len",
        8,
        "--batch",
        1,
        "--weights",
        "1",
    )
    assert bad.returncode == 2 and "--weights: needs --mixture" in bad.stderr


def _torchrun_mixture_resume(root, nproc, mode, weights):
    """torchrun of mixture_resume_torchrun_worker.py (torchrun_launch.launch)."""
    return launch(
        "mixture_resume_torchrun_worker.py", nproc, root, mode, ",".join(map(str, weights))
    )


def test_torchrun_four_ranks_killed_then_three_resume_with_new_weights(tmp_path):
    """A real run changes weights on resume: 4 gloo processes (equal steps,
    2 DataLoader workers each, an all_reduce every step) with token weights
    0.2:0.5:0.3 checkpoint after step 6 and are killed (SIGKILL) while training
    on; 3 processes load that state with 0.6:0.2:0.2 and finish the epoch (it
    ends when the non-repeating source 0 runs out). Checked here, from the
    pieces the ranks delivered and the sources' own arrays: equal steps, every
    piece of the window once across the two runs, every item of source 0 once,
    no item of a repeating source twice within one of its epochs, and the token
    shares after the change follow the new weights."""
    pytest.importorskip("torch")
    sizes = [300, 500, 80]
    write_sources(tmp_path, sizes, 50, 150, seed=8)
    offsets = [np.load(tmp_path / f"offsets{s}.npy") for s in range(3)]
    old_weights, new_weights = [0.2, 0.5, 0.3], [0.6, 0.2, 0.2]
    buffer = block = 64  # the worker's BUFFER and BLOCK

    # Phase 1: 4 processes, killed after their checkpoint. Generous timeouts
    # (a loaded machine); each wait ends as soon as its event happens.
    marker = tmp_path / "checkpoint.json"
    kill_after_checkpoint(
        lambda: _torchrun_mixture_resume(tmp_path, 4, "first", old_weights), marker, retry=True
    )
    checkpoint = json.loads(marker.read_text())
    assert checkpoint["world"] == 4 and checkpoint["state"]["kind"] == "mixture_loader"

    # Phase 2: 3 processes, the new weights, to the end of the epoch.
    def second():
        return _torchrun_mixture_resume(tmp_path, 3, "resume", new_weights)

    finish(second(), 400, second)
    runs = [json.loads((tmp_path / f"resumed-{r}.json").read_text()) for r in range(3)]

    # equal steps: phase 1 checkpointed one state for all 4 ranks after 6
    # steps of collectives (checked in the worker); phase 2, every rank's count
    steps = [r["steps"] for r in runs]
    assert len(set(steps)) == 1 and steps[0] > 0, steps
    before = [tuple(p) for rank in checkpoint["delivered"] for p in rank["pieces"]]
    after = [tuple(p) for r in runs for p in r["pieces"]]
    assert before and after
    # every piece's tokens are its source item's (counted by the ranks)
    assert sum(rank["bad"] for rank in checkpoint["delivered"]) == 0
    assert sum(r["bad"] for r in runs) == 0
    changed, read, at = runs[0]["last_resume"]
    first_pos, count = runs[0]["window"]
    assert changed and first_pos == 0

    # every piece of every window document exactly once across the two runs,
    # each document one item of one source wherever its pieces came from
    by = whole(before + after, lambda s, it: int(offsets[s][it + 1] - offsets[s][it]))
    assert sorted(by) == list(range(count))
    for d, ps in by.items():
        assert len({(s, it) for _, _, s, it in ps}) == 1, (d, ps)
    src = np.array([by[d][0][2] for d in range(count)])
    itm = np.array([by[d][0][3] for d in range(count)])
    length = np.array([sum(p[1] for p in by[d]) for d in range(count)])

    # the change lands after what was delivered and within one packer buffer
    # and one mixture block of it
    last = max(p[0] for p in before)
    assert last < at <= last + 1 + buffer + block, (last, read, at)

    # the non-repeating source 0 ran out: every item exactly once; the others
    # (epoch 0's window starts at 0, so each source's walk starts at its item
    # 0): no item twice within one epoch of that source, i.e. within each run
    # of sizes[s] consecutive samples of that source in window order
    assert sorted(itm[src == 0].tolist()) == list(range(sizes[0]))
    assert (src == 2).sum() > sizes[2]  # source 2 starts a second epoch
    for s in (1, 2):
        walk_s = itm[src == s].tolist()
        for e0 in range(0, len(walk_s), sizes[s]):
            chunk = walk_s[e0 : e0 + sizes[s]]
            assert len(set(chunk)) == len(chunk), (s, e0)

    # token shares after the change. New weights hold from the change on; as
    # the change may land up to one buffer and one block past the last piece
    # delivered before it, the shares are taken from last + 1 + buffer + block
    # on, and without the last `block` samples (a non-repeating source that
    # runs out cuts the last block: its remaining items plus the others' full
    # counts, docs/mixing.md). Bound 0.05: per-block counts are exact up to
    # about one sample per source (under 0.01 of ~290 samples), and by tokens
    # a source's sample share is its weight over its mean document length, so
    # the tokens of the ~290 documents drawn (lengths 50..150) spread the
    # shares by about 0.01 (the largest of 300 mixture seeds with this corpus:
    # 0.021 with the cumulative rounding, 0.026 with the largest remainder
    # before it).
    lo, hi = last + 1 + buffer + block, count - block
    assert hi - lo > 200, (lo, hi)
    tokens = np.bincount(src[lo:hi], weights=length[lo:hi], minlength=3)
    shares = tokens / tokens.sum()
    assert np.abs(shares - new_weights).max() < 0.05, shares
    # and before the change the old ones held (a sanity check of the setup:
    # source 0 at 0.2, far from its 0.6 after)
    early = np.bincount(src[: last + 1], weights=length[: last + 1], minlength=3)
    assert abs(early[0] / early.sum() - old_weights[0]) < 0.1, early
