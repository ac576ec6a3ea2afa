"""TokenLoader with equal steps (the default): every rank the same number of
batches, every document exactly once per epoch, masked filler only in the
last step, resume and elastic resume, and the resume traps of issue 12. The
oracle is the token array itself."""

import json

import numpy as np
import pytest
from tiling import batch_pieces, lognormal_lengths, offsets_of, tiles

import shardkit


def corpus(n, seed=0, median=300, sigma=1.2):
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(rng, median, sigma, n)
    offsets = offsets_of(lengths)
    # token t of document d is d * 100_000 + t: every token names its place
    tokens = np.concatenate(
        [d * 100_000 + np.arange(n_, dtype=np.int64) for d, n_ in enumerate(lengths)]
    ).astype(np.int32)
    return tokens, offsets, lengths


def check_batch(batch, tokens, offsets, ignore_index=-100):
    """Every row holds the tokens its pieces name; filler and padding masked."""
    B, L = batch["input_ids"].shape
    for b in range(B):
        at = 0
        sel = batch["rows"] == b
        for d, start, length in zip(
            batch["documents"][sel], batch["starts"][sel], batch["lengths"][sel]
        ):
            want = tokens[offsets[d] + start : offsets[d] + start + length]
            assert (batch["input_ids"][b, at : at + length] == want).all()
            at += length
        assert batch["row_tokens"][b] == at
        assert (batch["document_ids"][b, at:] == -1).all()
        assert (batch["labels"][b, at:] == ignore_index).all()


def run_epoch(loaders):
    """One epoch on every rank, as a DDP loop would: one batch per rank per step."""
    its = [iter(lo) for lo in loaders]
    steps = []
    while True:
        got = [next(it, None) for it in its]
        done = [g is None for g in got]
        assert all(done) or not any(done), "ranks ran different numbers of steps"
        if all(done):
            return steps
        steps.append([{k: np.copy(v) for k, v in g.items()} for g in got])


def pieces_of(steps):
    out = []
    for step in steps:
        for b in step:
            out += batch_pieces(b)
    return out


def loaders(tokens, offsets, world, **kw):
    return [
        shardkit.TokenLoader(tokens, offsets, rank=r, world_size=world, num_threads=0, **kw)
        for r in range(world)
    ]


def test_the_issue_example_per_rank_is_uneven_equal_steps_is_even():
    tokens, offsets, lengths = corpus(4000, seed=12)
    per_rank = loaders(tokens, offsets, 4, seq_len=1024, batch_size=4, equal_steps=False)
    counts = [sum(1 for _ in lo) for lo in per_rank]
    assert len(set(counts)) > 1  # what hangs a DDP loop
    equal = loaders(tokens, offsets, 4, seq_len=1024, batch_size=4)
    steps = run_epoch(equal)
    assert len(steps) == equal[0].num_steps == shardkit.TrainPlan(lengths, 1024, 4, 4).num_steps
    assert len(steps) <= max(counts)  # one global packing packs at least as tight
    tiles(lengths, pieces_of(steps))
    # every rank stands at the start of epoch 1, with the same state
    states = [lo.state_dict() for lo in equal]
    assert all(s == states[0] for s in states)
    assert states[0]["epoch"] == 1 and states[0]["position"] == 0


@pytest.mark.parametrize("mode", ["pad", "continuous", "drop"])
def test_modes_equal_steps_exactly_once_masked_filler(mode):
    tokens, offsets, lengths = corpus(700, seed=3)
    los = loaders(tokens, offsets, 3, seq_len=512, batch_size=2, mode=mode, seed=4)
    steps = run_epoch(los)
    for s, step in enumerate(steps):
        for b in step:
            check_batch(b, tokens, offsets)
            filler = (b["row_tokens"] == 0).sum()
            if filler:
                assert mode == "pad" and s == len(steps) - 1
    pieces = pieces_of(steps)
    if mode == "drop":
        summary = los[0].plan_summary
        covered = sum(length for _, _, length in pieces)
        assert covered + summary.dropped_tokens == int(lengths.sum())
    elif mode == "pad":
        tiles(lengths, pieces)
    else:  # continuous: this epoch's pieces, plus the first rows of the next
        covered = sum(length for _, _, length in pieces)
        assert covered >= int(lengths.sum())
        assert all((b["row_tokens"] > 0).all() for step in steps for b in step)


def test_continuous_two_passes_follow_the_train_plan():
    tokens, offsets, lengths = corpus(300, seed=5)
    los = loaders(tokens, offsets, 2, seq_len=512, batch_size=2, mode="continuous")
    first, second = run_epoch(los), run_epoch(los)
    assert los[0].state_dict()["epoch"] == 2
    plan = shardkit.TrainPlan(lengths, 512, 2, 2, mode="continuous")
    assert len(first) == plan.num_steps
    for s, step in enumerate(first + second):
        for r, b in enumerate(step):
            rows = [[] for _ in range(2)]
            for d, start, length, row in zip(b["documents"], b["starts"], b["lengths"], b["rows"]):
                rows[row].append((int(d), int(start), int(length)))
            assert rows == plan.step(r, s)


def test_workers_take_every_kth_step():
    tokens, offsets, _ = corpus(400, seed=6)
    rank1 = dict(seq_len=512, batch_size=2, rank=1, world_size=2, num_threads=0)
    one = shardkit.TokenLoader(tokens, offsets, **rank1)
    want = [b["documents"].copy() for b in one]
    got = {}
    for k in range(3):
        w = shardkit.TokenLoader(tokens, offsets, **rank1, worker=k, num_workers=3)
        for b in w:
            got[b["step"]] = b["documents"].copy()
    assert sorted(got) == list(range(len(want)))
    assert all((got[s] == want[s]).all() for s in range(len(want)))


def test_resume_and_elastic_resume_rest_of_the_epoch_exactly_once():
    tokens, offsets, lengths = corpus(900, seed=7)
    los = loaders(tokens, offsets, 4, seq_len=1024, batch_size=2, seed=1)
    its = [iter(lo) for lo in los]
    taken = []
    for _ in range(5):
        taken.append([{k: np.copy(v) for k, v in next(it).items()} for it in its])
    states = [lo.state_dict() for lo in los]
    assert all(s == states[0] for s in states)
    state = json.loads(json.dumps(states[0]))
    # same world: the same batches as the uninterrupted run
    again = loaders(tokens, offsets, 4, seq_len=1024, batch_size=2, seed=1)
    for lo in again:
        lo.load_state_dict(state)
    rest_same = run_epoch(again)
    uninterrupted = run_epoch(loaders(tokens, offsets, 4, seq_len=1024, batch_size=2, seed=1))
    assert len(rest_same) == len(uninterrupted) - 5
    for a, b in zip(rest_same, uninterrupted[5:]):
        assert all((x["input_ids"] == y["input_ids"]).all() for x, y in zip(a, b))
    # another world size and batch size: the rest exactly once
    for world, batch in [(3, 2), (4, 3), (1, 5)]:
        other = loaders(tokens, offsets, world, seq_len=1024, batch_size=batch, seed=1)
        for lo in other:
            lo.load_state_dict(states)  # a list of equal states is fine too
        tiles(lengths, pieces_of(taken) + pieces_of(run_epoch(other)))


def test_regression_set_epoch_after_load_state_dict_keeps_the_resume():
    tokens, offsets, _ = corpus(600, seed=8)
    lo = shardkit.TokenLoader(tokens, offsets, seq_len=512, batch_size=2, num_threads=0)
    total = sum(1 for _ in lo)
    lo.set_epoch(0)
    it = iter(lo)
    for _ in range(4):
        next(it)
    state = lo.state_dict()
    fresh = shardkit.TokenLoader(tokens, offsets, seq_len=512, batch_size=2, num_threads=0)
    fresh.load_state_dict(state)
    fresh.set_epoch(state["epoch"])  # the usual loop: must not restart the epoch
    assert sum(1 for _ in fresh) == total - 4


def test_regression_without_set_epoch_the_next_pass_is_the_next_epoch():
    tokens, offsets, lengths = corpus(300, seed=9)
    lo = shardkit.TokenLoader(tokens, offsets, seq_len=512, batch_size=2, num_threads=0)
    it = iter(lo)
    for _ in range(3):
        next(it)
    resumed = shardkit.TokenLoader(tokens, offsets, seq_len=512, batch_size=2, num_threads=0)
    resumed.load_state_dict(lo.state_dict())
    rest = [b["documents"].copy() for b in resumed]
    assert resumed.epoch == 0 and resumed.state_dict()["epoch"] == 1  # epoch 0 ran out
    second = list(resumed)
    assert len(second) > len(rest)  # a whole epoch, not the same remainder again
    tiles(lengths, pieces_of([[b] for b in second]))


def test_regression_state_after_the_epoch_ran_out_is_usable_on_every_rank():
    tokens, offsets, _ = corpus(500, seed=10)
    los = loaders(tokens, offsets, 4, seq_len=512, batch_size=2)
    run_epoch(los)
    states = [lo.state_dict() for lo in los]
    merged = shardkit.TokenLoader.merge_states(states)
    assert merged == states[0] and merged["epoch"] == 1 and merged["position"] == 0
    again = loaders(tokens, offsets, 2, seq_len=512, batch_size=2)
    for lo in again:
        lo.load_state_dict(merged)
        lo.set_epoch(1)  # already there: kept
    assert again[0].num_steps > 0


def test_block_mask_and_row_tokens_match_document_ids():
    tokens, offsets, _ = corpus(40, seed=11, median=40)
    lo = shardkit.TokenLoader(
        tokens, offsets, seq_len=128, batch_size=2, num_threads=0, block_mask=True
    )
    for b in lo:
        ids = b["document_ids"]
        same = (ids[:, :, None] == ids[:, None, :]) & (ids[:, :, None] >= 0)
        causal = np.tril(np.ones((128, 128), bool))
        assert (b["block_mask"].astype(bool) == (same & causal)).all()
        assert (b["row_tokens"] == (ids >= 0).sum(1)).all()


def test_errors():
    tokens, offsets, _ = corpus(20, seed=1)
    with pytest.raises(ValueError, match="^mode: "):
        shardkit.TokenLoader(tokens, offsets, seq_len=64, batch_size=1, mode="even")
    with pytest.raises(ValueError, match="^cost: "):
        shardkit.TokenLoader(tokens, offsets, seq_len=64, batch_size=1, cost="flops")
    per_rank = shardkit.TokenLoader(tokens, offsets, seq_len=64, batch_size=1, equal_steps=False)
    equal = shardkit.TokenLoader(tokens, offsets, seq_len=64, batch_size=1)
    with pytest.raises(ValueError, match="^state: "):
        equal.load_state_dict(per_rank.state_dict())
    with pytest.raises(ValueError, match="^state: "):
        per_rank.load_state_dict(equal.state_dict())
    other = shardkit.TokenLoader(tokens, offsets, seq_len=32, batch_size=1)
    with pytest.raises(ValueError, match="^state: "):
        other.load_state_dict(equal.state_dict())


# -- torch adapter: the resume traps of issue 12, each a regression test -------


def _ds(tokens, offsets, **kw):
    from shardkit.torch import TokenDataset

    base = dict(seq_len=512, batch_size=2, rank=0, world_size=1)
    base.update(kw)
    return TokenDataset(tokens, offsets, **base)


def _docs(batches):
    return [b["documents"].tolist() for b in batches]


@pytest.mark.parametrize("workers", [0, 2])
def test_torch_workers_yield_the_rank_steps_in_order_and_resume_on_other_worker_counts(
    workers, torch
):
    from shardkit.torch import TokenDataLoader

    tokens, offsets, lengths = corpus(400, seed=20)
    full = _docs(TokenDataLoader(_ds(tokens, offsets, rank=1, world_size=2), num_workers=0))
    dl = TokenDataLoader(_ds(tokens, offsets, rank=1, world_size=2), num_workers=workers)
    assert _docs(dl) == full
    dl = TokenDataLoader(_ds(tokens, offsets, rank=1, world_size=2), num_workers=workers)
    it = iter(dl)
    head = [next(it)["documents"].tolist() for _ in range(5)]
    state = json.loads(json.dumps(dl.state_dict()))
    del it
    assert state["position"] == 5 * 2 * 2
    for other in (0, 3):
        dl2 = TokenDataLoader(_ds(tokens, offsets, rank=1, world_size=2), num_workers=other)
        dl2.load_state_dict(state)
        assert head + _docs(dl2) == full


def test_regression_torch_set_epoch_after_load_state_dict_keeps_the_resume(torch):
    from shardkit.torch import TokenDataLoader

    tokens, offsets, _ = corpus(500, seed=21)
    total = len(list(TokenDataLoader(_ds(tokens, offsets))))
    dl = TokenDataLoader(_ds(tokens, offsets))
    it = iter(dl)
    for _ in range(4):
        next(it)
    state = dl.state_dict()
    dl2 = TokenDataLoader(_ds(tokens, offsets))
    dl2.load_state_dict(state)
    dl2.dataset.set_epoch(state["epoch"])  # the usual loop
    assert len(list(dl2)) == total - 4


def test_regression_torch_load_state_dict_restores_the_epoch(torch):
    from shardkit.torch import TokenDataLoader

    tokens, offsets, _ = corpus(300, seed=22)
    dl = TokenDataLoader(_ds(tokens, offsets, epoch=2))
    it = iter(dl)
    next(it)
    state = dl.state_dict()
    fresh = TokenDataLoader(_ds(tokens, offsets))  # built for epoch 0
    fresh.load_state_dict(state)
    assert fresh.dataset.epoch == 2
    rest = list(fresh)
    # The pass ran out: epoch says the epoch it ran, the state the next one.
    assert fresh.dataset.epoch == 2 and fresh.state_dict()["epoch"] == 3
    fresh.dataset.set_epoch(fresh.dataset.epoch + 1)  # no replay of epoch 2, no skip
    nxt = list(fresh)
    assert len(nxt) > len(rest) and fresh.dataset.epoch == 3


def test_regression_torch_without_set_epoch_every_pass_is_the_next_epoch(torch):
    from shardkit.torch import TokenDataLoader

    tokens, offsets, lengths = corpus(300, seed=23)
    dl = TokenDataLoader(_ds(tokens, offsets))
    it = iter(dl)
    for _ in range(3):
        next(it)
    dl2 = TokenDataLoader(_ds(tokens, offsets))
    dl2.load_state_dict(dl.state_dict())
    first, second, third = list(dl2), list(dl2), list(dl2)
    assert len(second) > len(first)
    assert _docs(second) != _docs(third)  # epochs 1 and 2: different orders
    for passes in (second, third):
        tiles(
            lengths,
            [
                (d, s, n)
                for b in passes
                for d, s, n in zip(
                    b["documents"].tolist(), b["starts"].tolist(), b["lengths"].tolist()
                )
            ],
        )


def test_regression_torch_persistent_workers_are_refused(torch):
    from shardkit.torch import TokenDataLoader

    tokens, offsets, _ = corpus(50, seed=24)
    with pytest.raises(ValueError, match="^persistent_workers: "):
        TokenDataLoader(_ds(tokens, offsets), num_workers=2, persistent_workers=True)


def test_torch_batches_carry_row_tokens_and_the_block_mask(torch):
    from shardkit.torch import TokenDataLoader

    tokens, offsets, _ = corpus(30, seed=25, median=30)
    dl = TokenDataLoader(_ds(tokens, offsets, seq_len=64, block_mask=True))
    for b in dl:
        assert b["block_mask"].dtype == torch.bool and b["block_mask"].shape == (2, 64, 64)
        assert (b["row_tokens"] == (b["document_ids"] >= 0).sum(1)).all()


def test_cli_loader_stats_reports_equal_steps_and_the_step_balance(cli, tmp_path):
    tokens, offsets, lengths = corpus(1500, seed=30)
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    base = ["loader-stats", "--tokens", tmp_path / "t.npy", "--offsets", tmp_path / "o.npy"]
    base += ["--seq-len", 1024, "--batch", 4, "--world", 4, "--quiet"]
    r = cli(*base, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    plan = shardkit.TrainPlan(lengths, 1024, 4, 4)
    assert out["equal_steps"] is True and out["steps"] == plan.num_steps
    assert [rank["batches"] for rank in out["ranks"]] == [plan.num_steps] * 4
    assert out["complete"] is True and out["real_tokens"] == int(lengths.sum())
    assert out["filler_rows"] == plan.summary.filler_rows
    assert out["max_full_step_imbalance"] == pytest.approx(plan.summary.max_full_step_imbalance)
    text = cli(*base)
    assert f"{plan.num_steps} steps on every rank" in text.stdout
    drop = json.loads(cli(*base, "--json", "--mode", "drop", "--workers", 2).stdout)
    assert drop["complete"] is False and drop["dropped_tokens"] > 0
    assert len({rank["batches"] for rank in drop["ranks"]}) == 1
    bad = cli(*base, "--mode", "even")
    assert bad.returncode == 2 and bad.stderr.startswith("shardkit loader-stats: --mode: ")


@pytest.mark.parametrize(
    "flag, names, default",
    [
        ("algorithm", ["next_fit", "ffd", "bfd", "balanced", "histogram"], "bfd"),
        ("oversize", ["drop", "split"], "split"),  # error is refused by the loader
        ("mode", ["pad", "continuous", "drop"], "pad"),
        ("cost", ["tokens", "squared"], "tokens"),
    ],
)
def test_loader_stats_help_lists_the_names_the_loader_takes(cli, tmp_path, flag, names, default):
    line = next(
        x
        for x in cli("loader-stats", "--help").stdout.splitlines()
        if x.strip().startswith(f"--{flag} ")
    )
    listed = line.split("NAME", 1)[1].split(":")[0]
    assert [c.replace("(default)", "").strip() for c in listed.split("|")] == names
    assert f"{default} (default)" in listed
    tokens, offsets, _ = corpus(60, seed=31)
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    base = ["loader-stats", "--tokens", tmp_path / "t.npy", "--offsets", tmp_path / "o.npy"]
    base += ["--seq-len", 512, "--batch", 2, "--world", 2, "--quiet", "--json"]
    for name in names:
        r = cli(*base, f"--{flag}", name)
        assert r.returncode == 0, (name, r.stderr)
    bad = cli(*base, f"--{flag}", "x")
    assert bad.returncode == 2 and f"--{flag}: " in bad.stderr, bad.stderr


def test_demo_shows_equal_steps_beside_per_rank_packing(cli, tmp_path):
    r = cli("demo", "--json", "--out", tmp_path / "demo.html")
    assert r.returncode == 0, r.stderr
    eq = json.loads(r.stdout)["loader"]["equal_steps"]
    assert eq["batches"] == [eq["steps"]] * len(eq["batches"])
    assert len(set(eq["per_rank_batches"])) > 1
    assert eq["exactly_once"] is True and eq["padding"] <= eq["per_rank_padding"]
    assert (
        "Batches per rank: per-rank packing vs equal steps" in (tmp_path / "demo.html").read_text()
    )


def test_constant_length_dataset_equal_steps_on_every_rank_every_sample_once(torch):
    from shardkit.torch import ConstantLengthDataset

    rng = np.random.default_rng(40)
    data = [{"input_ids": list(range(int(n)))} for n in rng.integers(1, 120, 200)]
    counts, seen = [], []
    for rank in range(3):
        ds = ConstantLengthDataset(data, seq_len=128, batch_size=2, rank=rank, world_size=3)
        batches = list(ds)
        counts.append(len(batches))
        for i, b in enumerate(batches):
            assert b["input_ids"].shape == (2, 128)
            if (b["row_tokens"] == 0).any():
                assert i == len(batches) - 1  # filler only in the last step
            seen += b["documents"].tolist()
    assert len(set(counts)) == 1
    assert sorted(seen) == list(range(200))
    per_rank = [
        len(
            list(
                ConstantLengthDataset(
                    data, seq_len=128, batch_size=2, rank=r, world_size=3, equal_steps=False
                )
            )
        )
        for r in range(3)
    ]
    assert sum(per_rank) >= 3 * counts[0] - 3  # the same data, packed per rank
    with pytest.raises(ValueError, match="^mode: "):
        ConstantLengthDataset(data, seq_len=128, mode="continuous")


def test_sharded_iterable_dataset_equal_counts_masks_the_padding(torch):
    from shardkit.torch import ShardedIterableDataset

    for n, world in [(3, 4), (10, 4), (0, 2), (7, 1)]:
        got = [
            list(
                ShardedIterableDataset(list(range(n)), rank=r, world_size=world, equal_counts=True)
            )
            for r in range(world)
        ]
        assert len({len(g) for g in got}) == 1  # the same count on every rank
        real = sorted(i for g in got for i, ok in g if ok)
        assert real == list(range(n))
    with pytest.raises(ValueError, match="^remainder: "):
        ShardedIterableDataset(
            list(range(5)), rank=0, world_size=2, equal_counts=True, remainder="drop"
        )
