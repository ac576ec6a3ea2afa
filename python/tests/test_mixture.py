"""shardkit.Mixture against a brute-force reference written here from the spec
(cumulative rounding over exact fractions, per block; the block's order a
rotation that spreads every source), and its state rules."""

import json
import math
import random
from fractions import Fraction

import numpy as np
import pytest

import shardkit


def reference_cumulative(tau, shares, base):
    """Cumulative rounding over exact fractions: sources [0, k) together get
    round(tau * (s_0 + ... + s_{k-1})) samples, halves up; added to base."""
    out, before, running = [], 0, Fraction(0)
    for b, s in zip(base, shares):
        running += s
        upto = math.floor(tau * running + Fraction(1, 2))
        out.append(b + upto - before)
        before = upto
    return out


def exact_shares(weights):
    total = sum(Fraction(w) for w in weights)
    return [Fraction(w) / total for w in weights]


def random_config(rng, max_sources=8):
    k = rng.randint(1, max_sources)
    sizes = [rng.randint(1, 60) for _ in range(k)]
    weights = [rng.choice([0, 1, 2, 3, 7, 10, 100]) for _ in range(k)]
    if not any(weights):
        weights[rng.randrange(k)] = 1
    return sizes, weights


def test_block_counts_match_the_reference_and_the_error_stays_below_one():
    rng = random.Random(1)
    for trial in range(150):
        sizes, weights = random_config(rng, 30 if trial < 10 else 8)
        mix = shardkit.Mixture(sizes, weights, seed=trial)
        shares = exact_shares(weights)
        zero = [0] * len(sizes)
        for b in range(0, 30):
            tau = b * mix.block
            want = reference_cumulative(tau, shares, zero)
            assert mix.consumed(tau) == want, (trial, b)
            assert all(abs(c - tau * s) < 1 for c, s in zip(want, shares))
            nxt = reference_cumulative(tau + mix.block, shares, zero)
            assert mix.block_counts(b) == [y - x for x, y in zip(want, nxt)]


def test_numpy_equals_source_of_and_each_source_walks_each_epoch_once():
    rng = random.Random(2)
    for trial in range(25):
        sizes, weights = random_config(rng)
        mix = shardkit.Mixture(sizes, weights, seed=rng.randrange(2**63))
        n = 5000
        sources, items = mix.numpy(0, n)
        assert sources.dtype == np.int64 and items.dtype == np.int64
        for i in range(0, n, 37):
            assert mix.source_of(i) == (sources[i], items[i])
        start = rng.randrange(n)
        s2, i2 = mix.numpy(start, n)
        assert (s2 == sources[start:]).all() and (i2 == items[start:]).all()
        for k, size in enumerate(sizes):
            walk = items[sources == k]
            for e in range(0, len(walk) - size + 1, size):
                assert sorted(walk[e : e + size].tolist()) == list(range(size)), (trial, k)
        counts = np.bincount(sources, minlength=len(sizes)).tolist()
        assert mix.consumed(n) == counts


def test_numpy_into_out_arrays_equals_source_of_chunk_by_chunk():
    # Reused chunk buffers (and views of one big array) are filled in place:
    # every sample against source_of (closed forms, not the fill).
    rng = random.Random(9)
    for trial in range(8):
        sizes, weights = random_config(rng)
        mix = shardkit.Mixture(sizes, weights, seed=trial)
        n, chunk = 30 * mix.block + 17, 4 * mix.block - 5
        whole_s, whole_i = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        buf_s, buf_i = np.empty(chunk, np.int64), np.empty(chunk, np.int64)
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            out = (buf_s[: stop - start], buf_i[: stop - start])
            assert mix.numpy(start, stop, out=out) is out
            got = mix.numpy(start, stop, out=(whole_s[start:stop], whole_i[start:stop]))
            assert got[0].base is whole_s
            for j in range(0, stop - start, 13):
                assert mix.source_of(start + j) == (out[0][j], out[1][j]), (trial, start + j)
            assert (whole_s[start:stop] == out[0]).all() and (whole_i[start:stop] == out[1]).all()
        assert np.bincount(whole_s, minlength=len(sizes)).tolist() == mix.consumed(n)
    mix = shardkit.Mixture([5, 7], [1, 2])
    a, b = np.zeros(8, np.int64), np.zeros(8, np.int64)
    ro = np.zeros(8, np.int64)
    ro.flags.writeable = False
    want = "out: expected .sources, items.: two writable C-contiguous int64 arrays of 8 elements"
    for bad, got in [
        ((a,), "tuple of length 1"),
        ([a, b], "list of length 2"),
        ((a, b.astype(np.int32)), "items: int32 array of shape .8,."),
        ((np.zeros(16, np.int64)[::2], b), "sources: int64 array of shape .8,., not C-contiguous"),
        ((ro, b), "sources: int64 array of shape .8,., read-only"),
        ((a, np.zeros(9, np.int64)), "items: int64 array of shape .9,.$"),
    ]:
        with pytest.raises(ValueError, match=f"^{want}, got {got}"):
            mix.numpy(0, 8, out=bad)
    with pytest.raises(ValueError, match="^out: sources and items overlap"):
        mix.numpy(0, 8, out=(a, a))
    assert (a == 0).all() and (b == 0).all()  # nothing written on refusal


def test_take_equals_numpy_at_scattered_positions():
    rng = random.Random(5)
    for trial in range(20):
        sizes, weights = random_config(rng, 40)
        mix = shardkit.Mixture(sizes, weights, seed=trial)
        n = 20 * mix.block
        sources, items = mix.numpy(0, n)
        positions = np.array([rng.randrange(n) for _ in range(300)], dtype=np.int64)
        got_s, got_i = mix.take(positions)
        assert (got_s == sources[positions]).all() and (got_i == items[positions]).all()
    with pytest.raises(IndexError, match="position: -1 .entry 1."):
        mix.take(np.array([0, -1], dtype=np.int64))
    empty_s, empty_i = mix.take(np.zeros(0, dtype=np.int64))
    assert len(empty_s) == 0 and len(empty_i) == 0


def test_non_repeating_source_is_delivered_exactly_once_and_stops_the_mixture():
    mix = shardkit.Mixture([137, 40, 10], [5, 3, 2], repeat=[False, True, True], seed=3)
    assert mix.bounded
    sources, items = mix.numpy()
    got = sorted(items[sources == 0].tolist())
    assert got == list(range(137))
    with pytest.raises(IndexError, match="position"):
        mix.source_of(len(mix))


def test_resume_with_changed_weights_neither_repeats_nor_skips():
    rng = random.Random(4)
    for trial in range(20):
        sizes, weights = random_config(rng)
        mix = shardkit.Mixture(sizes, weights, seed=trial)
        cut = rng.randrange(4000)
        state = json.loads(json.dumps(mix.state_dict(cut)))  # JSON round trip
        head_s, head_i = mix.numpy(0, cut)
        same = shardkit.Mixture.from_state(state)
        s_same, i_same = same.numpy(0, 2000)
        s_all, i_all = mix.numpy(0, cut + 2000)
        assert (s_same == s_all[cut:]).all() and (i_same == i_all[cut:]).all()
        new_weights = [rng.choice([0, 1, 5]) for _ in sizes]
        if not any(new_weights):
            new_weights[0] = 1
        changed = shardkit.Mixture.from_state(state, weights=new_weights)
        tail_s, tail_i = changed.numpy(0, 4000)
        sources = np.concatenate([head_s, tail_s])
        items = np.concatenate([head_i, tail_i])
        for k, size in enumerate(sizes):
            walk = items[sources == k]
            for e in range(0, len(walk) - size + 1, size):
                assert sorted(walk[e : e + size].tolist()) == list(range(size)), (trial, k)
        assert changed.consumed(0) == mix.consumed(cut)
        assert changed.state_dict(0)["position"] == cut


def test_schedule_step_and_linear():
    step = shardkit.Mixture([50, 50], [1, 0], block=10, schedule=[(95, [1, 3])])
    assert [b for b, _ in step.segments] == [0, 100]
    assert step.block_counts(9) == [10, 0]
    assert step.block_counts(10) == [3, 7] or step.block_counts(10) == [2, 8]
    lin = shardkit.Mixture(
        [50, 50], [1, 0], block=100, schedule=[(16000, [0, 1])], interpolation="linear"
    )
    shares = [s[1] for _, s in lin.segments]
    assert shares == sorted(shares) and shares[-1] == 1.0
    assert len(shares) == 17


def test_schedule_in_tokens_lands_where_the_nominal_tokens_reach_each_point():
    rng = random.Random(9)
    for trial in range(40):
        k = rng.randint(1, 4)
        sizes = [rng.randint(1, 300) for _ in range(k)]
        lengths = [np.array([rng.randint(1, 900) for _ in range(n)]) for n in sizes]
        means = [Fraction(int(x.sum()), len(x)) for x in lengths]
        points, t = [], 0
        for _ in range(3):
            t += rng.randint(600_000, 2_000_000)  # more than a block's tokens apart
            points.append((t, [rng.randint(1, 5) for _ in range(k)]))
        mix = shardkit.Mixture(
            sizes,
            [1] * k,
            lengths=lengths,
            schedule=points,
            schedule_unit="tokens",
            block=512,
            seed=trial,
        )

        def nominal(position):
            return sum(c * m for c, m in zip(mix.consumed(position), means))

        begins = [b for b, _ in mix.segments]
        assert len(begins) == 4, trial
        for (target, _), b in zip(points, begins[1:]):
            assert nominal(b) >= target > nominal(b - 512), (trial, b)
        # the same numbers through the mixture: nominal_tokens, and
        # position_of_tokens answers where a point at T lands
        for p in [0, 1, 511, 512, begins[-1] + 77]:
            assert mix.nominal_tokens(p) == pytest.approx(float(nominal(p)), rel=1e-12)
        no_schedule = shardkit.Mixture(sizes, [1] * k, lengths=lengths, block=512, seed=trial)
        for target, _ in points[:1]:
            assert no_schedule.position_of_tokens(target) == begins[1], trial
        # the state carries the unit; resuming unchanged gives the same samples
        state = mix.state_dict(begins[1] - 7)
        assert state["schedule_unit"] == "tokens"
        again = shardkit.Mixture.from_state(state)
        want = mix.numpy(begins[1] - 7, begins[1] + 50)
        got = again.numpy(0, 57)
        assert (want[0] == got[0]).all() and (want[1] == got[1]).all()
    with pytest.raises(ValueError, match="lengths: a schedule in tokens"):
        shardkit.Mixture([3, 4], [1, 1], schedule=[(9, [1, 0])], schedule_unit="tokens")
    with pytest.raises(ValueError, match="lengths: nominal tokens need the lengths"):
        shardkit.Mixture([3, 4], [1, 1]).nominal_tokens(5)
    lens = [np.full(3, 10), np.full(4, 20)]
    with pytest.raises(ValueError, match="tokens: must be >= 0"):
        shardkit.Mixture([3, 4], [1, 1], lengths=lens).position_of_tokens(-1.0)
    ends = shardkit.Mixture([3, 4], [1, 1], lengths=lens, repeat=[False, True])
    assert ends.position_of_tokens(1e12) == len(ends)
    with pytest.raises(ValueError, match="schedule_unit: unknown value 'bytes'"):
        shardkit.Mixture([3, 4], [1, 1], schedule_unit="bytes")


def test_token_weights_give_token_proportions():
    rng = np.random.default_rng(5)
    lengths = [rng.integers(1, 2000, 400), rng.integers(1, 50, 3000), rng.integers(1, 500, 900)]
    weights = [0.5, 0.3, 0.2]
    mix = shardkit.Mixture([len(x) for x in lengths], weights, by="tokens", lengths=lengths)
    # Over whole epochs of every source the token shares are exact; over a
    # run of many epochs they approach the weights.
    sources, items = mix.numpy(0, 400_000)
    tokens = np.array([lengths[s][i] for s, i in zip(sources[:200_000], items[:200_000])])
    per = np.bincount(sources[:200_000], weights=tokens, minlength=3)
    np.testing.assert_allclose(per / per.sum(), weights, atol=0.01)


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="^sizes:"):
        shardkit.Mixture([], [])
    with pytest.raises(ValueError, match="^weights:"):
        shardkit.Mixture([3, 3], [1])
    with pytest.raises(ValueError, match="^weights:"):
        shardkit.Mixture([3, 3], [0, 0])
    with pytest.raises(ValueError, match="^sizes:"):
        shardkit.Mixture([3, 0], [1, 1])
    with pytest.raises(ValueError, match="^block: 2 is too small"):
        shardkit.Mixture([3, 3], [1, 100], block=2)
    with pytest.raises(ValueError, match="^by:"):
        shardkit.Mixture([3], [1], by="bytes")
    with pytest.raises(ValueError, match="^lengths:"):
        shardkit.Mixture([3], [1], by="tokens")
    with pytest.raises(ValueError, match="^schedule:"):
        shardkit.Mixture([3, 3], [1, 1], schedule=[(5, [1, 1]), (5, [1, 2])])
    with pytest.raises(ValueError, match="^state:"):
        shardkit.Mixture.from_state({"version": 2})
    with pytest.raises(IndexError, match="^stop:"):
        shardkit.Mixture([3], [1], repeat=False).numpy(0, 4)


def test_cli_mix_json_and_errors(cli):
    r = cli(
        "mix",
        "--sizes",
        "10,1000",
        "--weights",
        "1,1",
        "--block",
        "2",
        "--no-repeat",
        "0",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["samples"] == 20 and out["consumed"] == [10, 10] and out["bounded"]
    assert out["realised"] == [0.5, 0.5]
    r = cli("mix", "--sizes", "3,3", "--weights", "1,100", "--block", "2")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--block: 2" in r.stderr
    r = cli("mix", "--sizes", "3,3", "--weights", "1,x")
    assert r.returncode == 2 and "--weights" in r.stderr


def test_cli_mix_schedule_in_tokens(cli, tmp_path):
    # source 0: 100 items of 10 tokens, source 1: 100 of 1000; 1e6 nominal
    # tokens at 505 per sample is sample 1980.2, so the change begins at the
    # first boundary of 100 past it: 2000.
    np.save(tmp_path / "a.npy", np.full(100, 10, dtype=np.int64))
    np.save(tmp_path / "b.npy", np.full(100, 1000, dtype=np.int64))
    lengths = f"{tmp_path / 'a.npy'},{tmp_path / 'b.npy'}"
    args = ["mix", "--sizes", "100,100", "--weights", "1,1", "--block", "100"]
    args += ["--schedule", "1000000:0,1", "--schedule-unit", "tokens", "--json"]
    r = cli(*args, "--lengths", lengths)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["schedule_unit"] == "tokens"
    assert [s["begin"] for s in out["segments"]] == [0, 2000]
    # each window's start in nominal tokens: 505 per sample before the change
    assert out["windows"][1]["tokens"] == out["windows"][1]["begin"] * 505
    r = cli(*args)
    assert r.returncode != 0 and r.stderr.count("\n") == 1
    assert "lengths: a schedule in tokens needs" in r.stderr
    r = cli("mix", "--sizes", "3,3", "--weights", "1,1", "--schedule-unit", "bytes")
    assert r.returncode != 0 and "--schedule-unit: unknown value 'bytes'" in r.stderr


def test_states_of_the_earlier_orders_are_refused_naming_the_version():
    mix = shardkit.Mixture([10, 20], [1, 2], seed=1)
    state = mix.state_dict(7)
    assert state["version"] == 3
    state["version"] = 1
    with pytest.raises(
        ValueError, match="state: version: a version 1 mixture state; this shardkit"
    ):
        shardkit.Mixture.from_state(state)
    sources = [
        (np.arange(40, dtype=np.int32), np.arange(0, 41, 4, dtype=np.int64)),
        (np.arange(60, dtype=np.int32), np.arange(0, 61, 6, dtype=np.int64)),
    ]
    loader = shardkit.TokenLoader.mixture(sources, [1, 1], seq_len=8, batch_size=2)
    next(iter(loader))
    old = loader.state_dict()
    assert old["version"] == 3
    old["version"] = 1
    with pytest.raises(ValueError, match="a version 1 mixture loader state"):
        shardkit.TokenLoader.mixture(sources, [1, 1], seq_len=8, batch_size=2).load_state_dict(old)
