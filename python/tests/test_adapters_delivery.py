"""What the Python loader objects and the torch adapter deliver (issue 20, part B):
step numbers and step counts that survive a resume, epochs that follow the
documented idioms each once, concurrent use from two threads, and the errors of
TokenDataLoader and of a plan mismatch. The oracles are an uninterrupted run, a
fresh loader built for the epoch, and TrainPlan over the lengths."""

import threading

import numpy as np
import pytest
from thread_engines import ThreadEngines
from tiling import batch_pieces, lognormal_lengths, offsets_of

import shardkit


def corpus(n, seed=0, median=60):
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(rng, median, 1.0, n)
    offsets = offsets_of(lengths)
    tokens = np.arange(offsets[-1], dtype=np.int32)
    return tokens, offsets, lengths


def pieces(batches):
    return [piece for b in batches for piece in batch_pieces(b)]


def tiles(lengths, delivered):
    """Every token of every document in exactly one delivered piece."""
    seen = {}
    for d, s, n in delivered:
        for t in range(s, s + n):
            assert (d, t) not in seen, (d, t)
            seen[(d, t)] = True
    assert len(seen) == int(np.sum(lengths))


OPTS = dict(seq_len=128, batch_size=2, num_threads=0, seed=3)


# -- 2: the step and num_steps survive a resume -----------------------------------------


@pytest.mark.parametrize("mode", ["pad", "drop", "continuous"])
def test_regression_resumed_loader_keeps_the_epochs_step_numbers_and_num_steps(mode, tmp_path):
    arrays = corpus(300, seed=1)
    np.save(tmp_path / "c.tokens.npy", arrays[0])
    np.save(tmp_path / "c.offsets.npy", arrays[1])
    # A source, so that the oracle plans (TrainPlan.from_source) are bound to the
    # same data as the loaders' states (the data fingerprint covers the tokens).
    source = shardkit.open_source(str(tmp_path))
    tokens, offsets, lengths = (
        str(tmp_path / "c.tokens.npy"),
        str(tmp_path / "c.offsets.npy"),
        arrays[2],
    )
    whole = shardkit.TokenLoader(tokens, offsets, rank=1, world_size=2, mode=mode, **OPTS)
    steps = [int(b["step"]) for b in whole]
    plan = shardkit.TrainPlan(lengths, 128, 2, 2, mode=mode, seed=3)
    assert steps == list(range(plan.num_steps))
    run = shardkit.TokenLoader(tokens, offsets, rank=1, world_size=2, mode=mode, **OPTS)
    assert run.num_steps == plan.num_steps and run.first_step == 0
    it = iter(run)
    for _ in range(5):
        next(it)
    resumed = shardkit.TokenLoader(tokens, offsets, rank=1, world_size=2, mode=mode, **OPTS)
    resumed.load_state_dict(run.state_dict())
    # Was: num_steps counted only the rest and the steps restarted at 0.
    assert resumed.num_steps == plan.num_steps
    assert resumed.first_step == 5
    assert [int(b["step"]) for b in resumed] == list(range(5, plan.num_steps))
    # The next epoch numbers from 0 again, over the whole epoch.
    assert resumed.first_step == 0
    # Elastic: 3 ranks x 1 row; the packs before the state count as whole steps.
    state = run.state_dict()
    elastic = shardkit.TokenLoader(
        tokens, offsets, rank=0, world_size=3, mode=mode, **dict(OPTS, batch_size=1)
    )
    elastic.load_state_dict(state)
    rest = shardkit.TrainPlan.from_source(source, 128, 1, 3, mode=mode, seed=3, state=state)
    assert elastic.first_step == state["position"] // 3 == rest.first_step
    assert elastic.num_steps == rest.first_step + rest.num_steps == rest.epoch_steps
    first, count = elastic.first_step, elastic.num_steps
    assert [int(b["step"]) for b in elastic] == list(range(first, count))


def test_per_rank_loader_step_continues_after_a_resume():
    tokens, offsets, _ = corpus(200, seed=2)
    opts = dict(OPTS, equal_steps=False, rank=0, world_size=2)
    whole = [int(b["step"]) for b in shardkit.TokenLoader(tokens, offsets, **opts)]
    run = shardkit.TokenLoader(tokens, offsets, **opts)
    it = iter(run)
    for _ in range(4):
        next(it)
    resumed = shardkit.TokenLoader(tokens, offsets, **opts)
    resumed.load_state_dict(run.state_dict())
    assert [int(b["step"]) for b in resumed] == whole[4:]


@pytest.mark.parametrize("workers", [0, 2])
def test_regression_torch_resume_keeps_steps_num_steps_and_len(workers):
    from shardkit.torch import TokenDataLoader, TokenDataset

    tokens, offsets, lengths = corpus(300, seed=4)
    plan = shardkit.TrainPlan(lengths, 128, 2, 1, seed=3)

    def make():
        return TokenDataLoader(
            TokenDataset(tokens, offsets, rank=0, world_size=1, **OPTS), num_workers=workers
        )

    dl = make()
    assert dl.num_steps == plan.num_steps == len(dl) == len(dl.dataset)
    assert [int(b["step"]) for b in dl] == list(range(plan.num_steps))
    dl = make()
    it = iter(dl)
    for _ in range(3):
        next(it)
    state = dl.state_dict()
    del it
    again = make()
    again.load_state_dict(state)
    again.dataset.set_epoch(state["epoch"])  # the usual loop
    assert again.num_steps == plan.num_steps  # was: the rest only
    assert len(again) == plan.num_steps - 3  # the batches this pass yields
    assert [int(b["step"]) for b in again] == list(range(3, plan.num_steps))


# -- 5: epochs each once, len, num_steps, batch_size ---------------------------------


def _epoch_of(tokens, offsets, docs):
    """The epoch whose fresh loader delivers exactly `docs` (the oracle)."""
    for e in range(8):
        fresh = shardkit.TokenLoader(tokens, offsets, epoch=e, **OPTS)
        if [b["documents"].tolist() for b in fresh] == docs:
            return e
    return None


@pytest.mark.parametrize("workers", [None, 0, 2])
@pytest.mark.parametrize("idiom", ["plain", "set_epoch_plus_one_after", "set_epoch_counter"])
def test_regression_torch_epochs_follow_each_idiom_once(workers, idiom):
    """Was: ds.set_epoch(ds.epoch + 1) skipped every other epoch (iteration had
    already moved to the next one) and re-iterating the bare dataset replayed
    epoch 0."""
    from shardkit.torch import TokenDataLoader, TokenDataset

    tokens, offsets, _ = corpus(80, seed=5)
    ds = TokenDataset(tokens, offsets, rank=0, world_size=1, **OPTS)
    source = ds if workers is None else TokenDataLoader(ds, num_workers=workers)
    got = []
    for epoch in range(3):
        if idiom == "set_epoch_counter":
            ds.set_epoch(epoch)
        got.append(_epoch_of(tokens, offsets, [b["documents"].tolist() for b in source]))
        assert ds.epoch == epoch
        if idiom == "set_epoch_plus_one_after":
            ds.set_epoch(ds.epoch + 1)
            assert ds.epoch == epoch + 1
    assert got == [0, 1, 2]


def test_regression_token_loader_set_epoch_plus_one_after_a_pass_is_the_next_epoch():
    tokens, offsets, _ = corpus(80, seed=6)
    lo = shardkit.TokenLoader(tokens, offsets, **OPTS)
    got = []
    for epoch in range(3):
        got.append(_epoch_of(tokens, offsets, [b["documents"].tolist() for b in lo]))
        assert lo.epoch == epoch and lo.state_dict()["epoch"] == epoch + 1
        lo.set_epoch(lo.epoch + 1)
    assert got == [0, 1, 2]


def test_per_rank_torch_dataset_has_no_len_but_says_why():
    from shardkit.torch import TokenDataset

    tokens, offsets, _ = corpus(40, seed=7)
    ds = TokenDataset(tokens, offsets, rank=0, world_size=1, equal_steps=False, **OPTS)
    with pytest.raises(TypeError, match="^len\\(\\): a per-rank TokenDataset"):
        len(ds)
    with pytest.raises(ValueError, match="^equal_steps: "):
        ds.num_steps


def test_regression_token_data_loader_batch_size_is_a_clear_error():
    from shardkit.torch import TokenDataLoader, TokenDataset

    tokens, offsets, _ = corpus(40, seed=8)
    ds = TokenDataset(tokens, offsets, rank=0, world_size=1, **OPTS)
    with pytest.raises(ValueError, match="^batch_size: 8 given to TokenDataLoader"):
        TokenDataLoader(ds, batch_size=8)
    with pytest.raises(ValueError, match="^shuffle: "):
        TokenDataLoader(ds, shuffle=True)
    assert len(list(TokenDataLoader(ds, batch_size=None))) == len(ds)


def test_regression_plan_mismatch_names_the_plan_kind_and_the_parameter():
    """Was: "... every rank must build the EvalPlan ..." for a training plan, and only
    fingerprints: the ranks now exchange their plans' parameters on a mismatch."""
    from shardkit.eval import PlanMismatchError, check_plan

    tokens, offsets, _ = corpus(60, seed=9)
    engines = ThreadEngines(3)
    loaders = [
        shardkit.TokenLoader(
            tokens, offsets, rank=r, world_size=3, **dict(OPTS, seed=7 if r == 2 else 3)
        )
        for r in range(3)
    ]

    def check(r):
        with pytest.raises(PlanMismatchError) as e:
            check_plan(loaders[r], engines.engine(r))
        return str(e.value)

    messages = engines.run(check)
    for m in messages:
        assert m.startswith("plan fingerprint mismatch: 1 of 3 ranks"), m
        assert "TrainPlan mismatch: rank 2 has seed=7, stream=" in m, m
        assert "where rank 0 has seed=3, stream=" in m, m
        assert "EvalPlan" not in m


# -- 4: two threads, one loader -------------------------------------------------------


def _two_threads(make_pass, timeout=20):
    """Runs make_pass() in two threads that both start their pass before either
    takes a second batch; returns every batch's pieces (and asserts no hang)."""
    got, errors = [], []
    started = threading.Barrier(2, timeout=timeout)

    def run():
        try:
            first = True
            for b in make_pass():
                got.append(pieces([b]))
                if first:
                    first = False
                    started.wait()
        except threading.BrokenBarrierError:
            pass  # the other thread got no batch: the epoch was already out
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread is blocked in next()"
    assert not errors, errors
    return [p for batch in got for p in batch]


@pytest.mark.parametrize("num_threads", [0, 1, 2])
@pytest.mark.parametrize("equal_steps", [True, False])
def test_regression_two_threads_iterating_one_loader_share_one_epoch_and_never_hang(
    num_threads, equal_steps
):
    tokens, offsets, lengths = corpus(400, seed=10)
    lo = shardkit.TokenLoader(
        tokens, offsets, equal_steps=equal_steps, **dict(OPTS, num_threads=num_threads)
    )
    for epoch in range(2):  # every batch of the epoch to one of the threads, once
        tiles(lengths, _two_threads(lambda: iter(lo)))
        assert lo.epoch == epoch and lo.state_dict()["epoch"] == epoch + 1


def test_two_threads_over_one_torch_dataset_never_hang():
    from shardkit.torch import TokenDataLoader, TokenDataset

    tokens, offsets, lengths = corpus(300, seed=11)
    ds = TokenDataset(tokens, offsets, rank=0, world_size=1, **dict(OPTS, num_threads=1))
    # Each pass over a dataset is its own iterator (as over a list): two whole epochs.
    delivered = _two_threads(lambda: iter(ds))
    assert sorted(delivered) == sorted(pieces(shardkit.TokenLoader(tokens, offsets, **OPTS)) * 2)
    dl = TokenDataLoader(TokenDataset(tokens, offsets, rank=0, world_size=1, **OPTS))
    assert len(_two_threads(lambda: iter(dl))) > 0
