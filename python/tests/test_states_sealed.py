"""Issue 20, part A: every state is sealed (a checksum over its whole content)
and bound to its data (a fingerprint that covers the tokens, not only the
lengths), old versions are refused naming the version, positions and epochs
from outside are bounded before any replay, and None is not a state.

The seal is recomputed here by an independent implementation of the rule in
shardkit/base/json.h and hash.h (``reseal``), which is also what lets these
tests make a well-sealed state with a hostile value: what only the checks
behind the seal can refuse."""

import json
import os
import subprocess
import time

import numpy as np
import pytest
from sealing import reseal

import shardkit


def corpus(shift=0, docs=120):
    lengths = np.array([1 + (29 * d) % 40 for d in range(docs)], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.concatenate([d * 100 + np.arange(n) + shift for d, n in enumerate(lengths)])
    return tokens.astype(np.int32), offsets


OPTS = dict(seq_len=32, batch_size=2, num_threads=0, seed=3)


def pieces(loader):
    return [[b[k].tolist() for k in ("documents", "starts", "lengths")] for b in loader]


def test_the_seal_is_the_documented_rule():
    # The independent implementation agrees with every kind's own checksum.
    tokens, offsets = corpus()
    for equal in (False, True):
        ld = shardkit.TokenLoader(tokens, offsets, equal_steps=equal, **OPTS)
        next(iter(ld))
        state = ld.state_dict()
        assert reseal(state) == state
    mix = shardkit.Mixture([10, 20], [1, 2], seed=1)
    assert reseal(mix.state_dict(7)) == mix.state_dict(7)
    plan = shardkit.TrainPlan([5, 9, 30, 2], seq_len=8, batch_size=1, world_size=1)
    assert reseal(plan.state_dict(1)) == plan.state_dict(1)


@pytest.mark.parametrize("equal", [False, True])
def test_regression_a_state_of_another_data_set_with_equal_lengths_is_refused(equal):
    a_tokens, offsets = corpus()
    b_tokens, _ = corpus(shift=1)  # the same lengths, other tokens
    whole = pieces(shardkit.TokenLoader(a_tokens, offsets, equal_steps=equal, **OPTS))
    first = shardkit.TokenLoader(a_tokens, offsets, equal_steps=equal, **OPTS)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    other = shardkit.TokenLoader(b_tokens, offsets, equal_steps=equal, **OPTS)
    with pytest.raises(ValueError, match="^state: was saved for another data set") as e:
        other.load_state_dict(state)
    assert "the data differs" in str(e.value)
    # On its own data the state delivers exactly the rest of the epoch.
    rest = shardkit.TokenLoader(a_tokens, offsets, equal_steps=equal, **OPTS)
    rest.load_state_dict(json.loads(json.dumps(state)))
    assert pieces(rest) == whole[3:]


def test_regression_edited_and_relabelled_states_are_refused():
    tokens, offsets = corpus()
    ld = shardkit.TokenLoader(tokens, offsets, equal_steps=False, **OPTS)
    it = iter(ld)
    for _ in range(3):
        next(it)
    state = ld.state_dict()
    assert state["version"] == 4
    for version in (1, 2, 3):
        for relabelled in (dict(state, version=version), reseal(dict(state, version=version))):
            with pytest.raises(ValueError, match=f"^state: version: a version {version} loader"):
                shardkit.TokenLoader(tokens, offsets, equal_steps=False, **OPTS).load_state_dict(
                    relabelled
                )
    # The equal-steps state: an edited position, and a duplicate key.
    eq = shardkit.TokenLoader(tokens, offsets, equal_steps=True, **OPTS)
    it = iter(eq)
    next(it)
    train = eq.state_dict()
    assert set(train) == {"version", "kind", "epoch", "position", "stream", "checksum"}
    edited = dict(train, position=train["position"] + 1)
    with pytest.raises(ValueError, match="^state: checksum: does not match"):
        shardkit.TokenLoader(tokens, offsets, equal_steps=True, **OPTS).load_state_dict(edited)


def test_regression_train_plan_state_text_is_read_strictly_and_sealed():
    lengths = [1 + (29 * d) % 40 for d in range(120)]
    plan = shardkit.TrainPlan(lengths, seq_len=32, batch_size=2, world_size=2)
    state = plan.state_dict(2)
    text = json.dumps(state)
    twice = text.replace('"position": ', '"position": 0, "position": ', 1)
    with pytest.raises(ValueError, match="^state: not valid JSON.*appears twice"):
        shardkit.TrainPlan(lengths, seq_len=32, batch_size=2, world_size=2, state=twice)
    edited = dict(state, position=state["position"] + 2)
    with pytest.raises(ValueError, match="^state: checksum"):
        shardkit.TrainPlan(lengths, seq_len=32, batch_size=2, world_size=2, state=edited)
    old = {k: v for k, v in dict(state, version=1).items() if k != "checksum"}
    with pytest.raises(ValueError, match="^state: version: a version 1 train_plan state"):
        shardkit.TrainPlan(lengths, seq_len=32, batch_size=2, world_size=2, state=old)
    # The sealed text continues the plan: the steps of an uninterrupted run.
    rest = shardkit.TrainPlan(lengths, seq_len=32, batch_size=2, world_size=2, state=text)
    assert rest.num_steps == plan.num_steps - 2
    for s in range(rest.num_steps):
        for r in range(2):
            assert rest.step(r, s) == plan.step(r, s + 2)


def test_regression_a_huge_position_is_refused_before_any_replay(tmp_path):
    lengths = [1 + (29 * d) % 40 for d in range(120)]
    for position in (2**62, 10**8):
        start = time.monotonic()
        with pytest.raises(ValueError, match="^position: "):
            shardkit.TrainPlan(lengths, 32, 2, 1, mode="continuous", position=position)
        plan = shardkit.TrainPlan(lengths, 32, 2, 1, mode="continuous")
        hostile = reseal(dict(plan.state_dict(0), position=position))
        with pytest.raises(ValueError, match="^state: position: "):
            shardkit.TrainPlan(lengths, 32, 2, 1, mode="continuous", state=hostile)
        assert time.monotonic() - start < 5
    # The CLI, resuming a continuous loader from such a state.
    tokens, offsets = corpus()
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    eq = shardkit.TokenLoader(tokens, offsets, equal_steps=True, mode="continuous", **OPTS)
    (tmp_path / "s.json").write_text(json.dumps(reseal(dict(eq.state_dict(), position=2**62))))
    cli = os.environ.get("SHARDKIT_CLI", "shardkit")
    start = time.monotonic()
    r = subprocess.run(
        [cli, "loader-stats", "--tokens", str(tmp_path / "t.npy"), "--offsets",
         str(tmp_path / "o.npy"), "--seq-len", "32", "--batch", "2", "--seed", "3",
         "--mode", "continuous", "--resume", str(tmp_path / "s.json"), "--quiet"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert time.monotonic() - start < 30
    assert r.returncode != 0
    assert "position: 4611686018427387904 is more packs than" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_regression_none_is_not_a_state():
    tokens, offsets = corpus()
    for equal in (False, True):
        ld = shardkit.TokenLoader(tokens, offsets, equal_steps=equal, **OPTS)
        with pytest.raises(ValueError, match="^state: None is not a state"):
            ld.load_state_dict(None)
    sources = [corpus(docs=30), corpus(shift=5, docs=40)]
    mixed = shardkit.TokenLoader.mixture(sources, [1, 1], seq_len=8, batch_size=2)
    with pytest.raises(ValueError, match="^state: None is not a state"):
        mixed.load_state_dict(None)
    packer = shardkit.StreamingPacker(16)
    with pytest.raises(ValueError, match="^state: None is not a state"):
        packer.load_state_dict(None)
    with pytest.raises(ValueError, match="^state: None is not a state"):
        shardkit.Mixture.from_state(None)
    torch = pytest.importorskip("torch")
    del torch
    import shardkit.torch as skt

    ds = skt.TokenDataset(tokens, offsets, seq_len=32, batch_size=2, rank=0, world_size=1)
    with pytest.raises(ValueError, match="^state: None is not a state"):
        ds.load_state_dict(None)


def test_regression_an_epoch_without_a_successor_is_refused():
    tokens, offsets = corpus()
    for equal in (False, True):
        with pytest.raises(ValueError, match="^epoch: 18446744073709551615 has no successor"):
            shardkit.TokenLoader(tokens, offsets, equal_steps=equal, epoch=2**64 - 1, **OPTS)
    with pytest.raises(ValueError, match="^epoch: 18446744073709551615 has no successor"):
        shardkit.TrainPlan([5, 6], 8, 1, 1, epoch=2**64 - 1)
    # The last epoch there is ends at an epoch that exists.
    last = shardkit.TrainPlan([5, 6], 8, 1, 1, epoch=2**64 - 2)
    assert last.state_dict()["epoch"] == 2**64 - 1


def test_regression_float_mixture_lengths_are_refused():
    with pytest.raises(ValueError, match=r"^lengths: source 0: .*1\.5 at \[0\]"):
        shardkit.Mixture([3, 3], [1, 1], by="tokens", lengths=[[1.5, 2, 3], [1, 2, 3]])
    mix = shardkit.Mixture([3, 3], [1, 1], by="tokens", lengths=[[1, 2, 3], [1, 2, 3]])
    assert len(mix) > 0


def test_regression_an_edited_mixture_state_is_refused():
    mix = shardkit.Mixture([40, 70], [1, 2], seed=11, block=30)
    state = json.loads(json.dumps(mix.state_dict(100)))
    after = mix.numpy(100, 300)
    for key, value in (("seed", 12), ("block", 60), ("sizes", [41, 70])):
        with pytest.raises(ValueError, match="^state: checksum"):
            shardkit.Mixture.from_state(dict(state, **{key: value}), weights=[1, 1])
    edited = dict(state, consumed=[state["consumed"][0] + 3, state["consumed"][1]])
    with pytest.raises(ValueError, match="^state: checksum"):
        shardkit.Mixture.from_state(edited, weights=[1, 1])
    resumed = shardkit.Mixture.from_state(state)
    got = resumed.numpy(0, 200)
    assert (got[0] == after[0]).all() and (got[1] == after[1]).all()


def test_regression_a_mixture_loader_state_at_an_epoch_boundary_is_sealed_and_bound():
    # At an epoch boundary the mixture loader's resume overwrote the state's
    # stream without checking it: 3 added to start[0] was delivered.
    sources = [corpus(docs=30), corpus(shift=7, docs=40)]
    kw = dict(seq_len=16, batch_size=2, samples=50, seed=2, equal_steps=True, num_threads=0)
    loader = shardkit.TokenLoader.mixture(sources, [1, 1], **kw)
    for _ in loader:
        pass
    state = json.loads(json.dumps(loader.state_dict()))  # the end of epoch 0
    assert (state["loader"]["epoch"], state["loader"]["position"]) == (1, 0)
    expected = pieces(shardkit.TokenLoader.mixture(sources, [1, 1], epoch=1, **kw))
    resumed = shardkit.TokenLoader.mixture(sources, [1, 1], **kw)
    resumed.load_state_dict(state)
    assert pieces(resumed) == expected
    edited = json.loads(json.dumps(state))
    edited["mixture"][0]["start"][0] += 3
    with pytest.raises(ValueError, match="^state: checksum: does not match"):
        shardkit.TokenLoader.mixture(sources, [1, 1], **kw).load_state_dict(edited)
    with pytest.raises(ValueError, match="^state: was saved for another data set or mixture: the"):
        shardkit.TokenLoader.mixture(sources, [1, 1], **kw).load_state_dict(reseal(edited))
