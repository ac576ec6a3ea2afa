"""shardkit.grain: the TokenLoader as a Grain IterDataset (grain==0.2.18).

The oracle of delivery is TokenLoader itself (the adapter must hand Grain
exactly its batches) and the documented rules: equal steps on every rank,
every document of an epoch once, get_state/set_state (and Grain's own
CheckpointHandler) continue exactly as the uninterrupted run, and the state is
the loader's: sealed, bound to its data."""

import json
import pickle

import numpy as np
import pytest
from tiling import batch_pieces, lognormal_lengths, save_corpus, tiles

grain = pytest.importorskip("grain")

from shardkit.grain import TokenDataset  # noqa: E402

import shardkit  # noqa: E402

SEQ_LEN = 128
OPTIONS = dict(seq_len=SEQ_LEN, batch_size=2, seed=3)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("grain")
    rng = np.random.default_rng(22)
    lengths = lognormal_lengths(rng, 60, 1.0, 300)
    tokens = rng.integers(0, 5000, lengths.sum()).astype(np.int32)
    return save_corpus(root, "c.", lengths, tokens), lengths


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])), k


def test_batches_equal_the_token_loaders_on_every_rank_for_two_epochs(corpus):
    path, lengths = corpus
    for rank in range(3):
        ds = TokenDataset(path, rank=rank, world_size=3, num_epochs=2, **OPTIONS)
        ours = list(ds)
        loader = shardkit.TokenLoader(path, rank=rank, world_size=3, **OPTIONS)
        theirs = list(loader) + list(loader)  # two passes: epochs 0 and 1
        assert len(ours) == len(theirs) == 2 * ds.num_steps
        for a, b in zip(ours, theirs):
            same(a, b)


def test_equal_steps_and_every_document_once_per_epoch_through_a_grain_map(corpus):
    path, lengths = corpus
    runs = []
    for rank in range(4):
        ds = TokenDataset(path, rank=rank, world_size=4, **OPTIONS)
        runs.append(list(ds.map(batch_pieces)))  # a Grain transformation over our batches
    assert len({len(r) for r in runs}) == 1
    tiles(lengths, [p for run in runs for step in run for p in step])


def test_shard_options_are_rank_and_world_size(corpus):
    path, _ = corpus
    options = grain.sharding.ShardOptions(shard_index=2, shard_count=3)
    a = list(TokenDataset(path, shard_options=options, **OPTIONS))
    b = list(TokenDataset(path, rank=2, world_size=3, **OPTIONS))
    for x, y in zip(a, b, strict=True):
        same(x, y)
    with pytest.raises(ValueError, match="^rank: give shard_options"):
        TokenDataset(path, shard_options=options, rank=0, **OPTIONS)


@pytest.mark.parametrize("seed", range(4))
def test_set_state_at_random_points_continues_as_the_uninterrupted_run(corpus, seed):
    path, _ = corpus
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(0, 3))
    ds = TokenDataset(path, rank=rank, world_size=3, num_epochs=2, **OPTIONS)
    whole = list(ds)
    for k in sorted(rng.choice(len(whole) + 1, 3, replace=False)):
        it = iter(ds.map(dict))
        for _ in range(k):
            next(it)
        state = json.loads(json.dumps(it.get_state()))  # as a checkpoint stores it
        fresh = iter(TokenDataset(path, rank=rank, world_size=3, num_epochs=2, **OPTIONS))
        fresh.set_state(state)
        rest = list(fresh)
        assert len(rest) == len(whole) - k, k
        for a, b in zip(rest, whole[k:]):
            same(a, b)
        # The same iterator, moved on and set back (a rewind): the same rest.
        for _ in range(2):
            next(it, None)
        it.set_state(state)
        for a, b in zip(it, whole[k:], strict=True):
            same(a, b)


def test_grain_checkpoint_handler_saves_and_restores_mid_epoch(corpus, tmp_path):
    from etils import epath

    path, _ = corpus
    ds = TokenDataset(path, rank=1, world_size=2, **OPTIONS)
    whole = list(ds)
    it = iter(ds)
    for _ in range(5):
        next(it)
    handler = grain.checkpoint.CheckpointHandler()
    directory = epath.Path(tmp_path / "ckpt")
    directory.mkdir()
    handler.save(directory, it)
    restored = handler.restore(directory, iter(TokenDataset(path, rank=1, world_size=2, **OPTIONS)))
    rest = list(restored)
    assert len(rest) == len(whole) - 5
    for a, b in zip(rest, whole[5:]):
        same(a, b)


def test_state_resumes_on_another_world_size_every_document_once(corpus):
    path, lengths = corpus
    before, state = [], None
    for rank in range(3):
        it = iter(TokenDataset(path, rank=rank, world_size=3, **OPTIONS))
        for _ in range(7):
            before += batch_pieces(next(it))
        state = state or it.get_state()
        assert it.get_state() == state  # the same on every rank
    after = []
    for rank in range(2):
        it = iter(TokenDataset(path, rank=rank, world_size=2, **OPTIONS))
        it.set_state(state)
        after += [p for b in it for p in batch_pieces(b)]
    tiles(lengths, before + after)


def test_state_is_sealed_and_bound_to_its_data(corpus, tmp_path):
    path, _ = corpus
    it = iter(TokenDataset(path, **OPTIONS))
    next(it)
    state = it.get_state()
    tampered = dict(state, position=state["position"] + 1)
    with pytest.raises(ValueError, match="checksum"):
        iter(TokenDataset(path, **OPTIONS)).set_state(tampered)
    with pytest.raises(ValueError, match="^state: None"):
        iter(TokenDataset(path, **OPTIONS)).set_state(None)
    # Another corpus: the same tokens, one document boundary moved.
    offsets = np.load(str(path).replace("tokens", "offsets"))
    offsets[1] += 1
    other = iter(TokenDataset(np.load(path), offsets, **OPTIONS))
    with pytest.raises(ValueError, match="fingerprint"):
        other.set_state(state)


def test_bad_arguments_name_the_parameter(corpus):
    path, _ = corpus
    with pytest.raises(ValueError, match="^num_epochs: "):
        TokenDataset(path, num_epochs=0, **OPTIONS)
    with pytest.raises(ValueError, match="seq_len"):
        TokenDataset(path, seq_len=-1, batch_size=2)


def test_pickles_as_its_recipe(corpus):
    path, _ = corpus
    ds = TokenDataset(path, rank=0, world_size=2, **OPTIONS)
    copy = pickle.loads(pickle.dumps(ds))
    for a, b in zip(copy, ds, strict=True):
        same(a, b)


def test_mixture_batches_equal_the_token_loader_mixtures(corpus):
    path, _ = corpus
    tokens, offsets = np.load(path), np.load(str(path).replace("tokens", "offsets"))
    sources = [path, (tokens[: offsets[100]], offsets[:101])]
    ours = list(TokenDataset.mixture(sources, [0.7, 0.3], rank=1, world_size=2, **OPTIONS))
    loader = shardkit.TokenLoader.mixture(sources, [0.7, 0.3], rank=1, world_size=2, **OPTIONS)
    theirs = list(loader)
    assert len(ours) == len(theirs) > 0
    for a, b in zip(ours, theirs):
        same(a, b)
