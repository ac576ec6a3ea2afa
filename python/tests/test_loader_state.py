"""The loader and packer states go through the core codec (loader_state.h):
state_dict() is exactly the C++ JSON, old (version 1) states still load, and a
state that does not prove itself is refused with a ValueError naming the field
(issue 13's reproductions)."""

import copy
import json
import os

import numpy as np
import pytest
from sealing import reseal

import shardkit

TESTDATA = os.path.join(os.path.dirname(__file__), "..", "..", "shardkit", "loader", "testdata")


def sample_data(docs=200, bump=None):
    # testdata/make_v1_states.py's data set.
    lengths = np.array([1 + (37 * d) % 50 for d in range(docs)], dtype=np.int64)
    if bump is not None:
        lengths[bump] += 1
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.concatenate(
        [(1000 * d + np.arange(n)) % 30011 for d, n in enumerate(lengths)]
    ).astype(np.int32)
    return tokens, offsets


# The per-rank loader's state format (equal steps' state is the train plan's).
OPTS = dict(
    seq_len=32,
    batch_size=2,
    shuffle=True,
    seed=2**64 - 5,
    buffer=8,
    num_threads=0,
    equal_steps=False,
)


def pieces(loader):
    return [{k: b[k].tolist() for k in ("documents", "starts", "lengths", "rows")} for b in loader]


def started(n=3):
    tokens, offsets = sample_data()
    ld = shardkit.TokenLoader(tokens, offsets, **dict(OPTS, rank=1, world_size=3))
    it = iter(ld)
    for _ in range(n):
        next(it)
    return ld


def test_state_dict_is_the_core_json_byte_for_byte():
    for n in (0, 1, 3, 7):
        ld = started(n)
        assert json.dumps(ld.state_dict()) == ld._loader.state_json()
        assert ld.state_dict()["seed"] == 2**64 - 5  # uint64 exactly
        assert ld.state_dict()["version"] == 4
    merged = shardkit.TokenLoader.merge_states([_rank_state(r) for r in range(3)])
    assert json.loads(json.dumps(merged)) == merged
    sp = shardkit.StreamingPacker(16, oversize="split", buffer=6)
    for i in range(30):
        sp.push(i, 1 + (37 * i) % 50)
    assert json.dumps(sp.state_dict()) == sp._packer.state_json()


def _rank_state(rank):
    tokens, offsets = sample_data()
    ld = shardkit.TokenLoader(tokens, offsets, **dict(OPTS, rank=rank, world_size=3))
    it = iter(ld)
    next(it)
    return ld.state_dict()


def test_resume_from_json_text_equals_the_uninterrupted_run():
    tokens, offsets = sample_data()
    whole = pieces(shardkit.TokenLoader(tokens, offsets, **dict(OPTS, rank=0, world_size=2)))
    ld = shardkit.TokenLoader(tokens, offsets, **dict(OPTS, rank=0, world_size=2))
    it = iter(ld)
    for _ in range(4):
        next(it)
    text = json.dumps(ld.state_dict())
    resumed = shardkit.TokenLoader(tokens, offsets, **dict(OPTS, rank=0, world_size=2))
    resumed.load_state_dict(json.loads(text))
    assert pieces(resumed) == whole[4:]


def test_version_one_states_from_main_are_refused_naming_the_version():
    # Issue 20: version 1 had no checksum and another piece layout; it is
    # refused naming the version, never read with this layout.
    with open(os.path.join(TESTDATA, "loader_state_v1.json")) as f:
        sample = json.load(f)
    assert sample["state"]["version"] == 1
    tokens, offsets = sample_data()
    for state in (sample["state"], sample["merged"]):
        ld = shardkit.TokenLoader(tokens, offsets, **dict(OPTS, rank=1, world_size=3))
        with pytest.raises(ValueError, match="^state: version: a version 1 loader state"):
            ld.load_state_dict(state)
    with open(os.path.join(TESTDATA, "packer_state_v1.json")) as f:
        packer = json.load(f)["state"]
    with pytest.raises(ValueError, match='^state: a packer state without "version"'):
        shardkit.StreamingPacker(16, algorithm="bfd", oversize="split", buffer=6, state=packer)


# ---- issue 13: states must prove themselves ----------------------------------


def refused(state, match, **kw):
    tokens, offsets = kw.pop("data", sample_data())
    ld = shardkit.TokenLoader(tokens, offsets, **dict(OPTS, rank=1, world_size=3))
    with pytest.raises(ValueError, match=match):
        ld.load_state_dict(state)


@pytest.mark.parametrize("bad", [{"a": 1}, 5, "abc", None, {}])
def test_a_head_or_packer_that_is_not_a_list_is_refused_not_a_crash(bad):
    s = started().state_dict()
    for path in (("head",), ("packer", "buffered"), ("packer", "pending")):
        t = copy.deepcopy(s)
        node = t
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = bad
        refused(t, "state: ")


def test_a_tuple_head_is_read_as_a_list_and_checked():
    s = started().state_dict()
    t = dict(s, head=tuple(s["head"]))
    ld = started(0)
    ld.load_state_dict(t)  # same content: accepted, checksum holds


def test_overflowing_and_edited_states_are_refused_naming_the_field():
    s = started().state_dict()
    t = copy.deepcopy(s)
    t["head"] = [[4, 2**63 - 2, 1 << 20]]
    refused(t, "state: head\\[0\\]: start 9223372036854775806 \\+ length|state: checksum")
    t = copy.deepcopy(s)
    t["epoch"] = 1
    refused(t, "state: checksum")
    t = copy.deepcopy(s)
    t["head"] = [[0, 0, 5]] * 100
    refused(t, "state: checksum")
    t = copy.deepcopy(s)
    t["consumers"] = 0
    refused(t, "state: checksum")
    t = copy.deepcopy(s)
    t["batches"] = 2**63 - 1
    refused(t, "state: checksum")
    t = copy.deepcopy(s)
    t["batches"] = 2**64
    refused(t, "state: batches: 18446744073709551616 does not fit in int64")
    t = copy.deepcopy(s)
    t["read"] = True
    refused(t, "state: read: expected an integer, got a boolean")
    t = copy.deepcopy(s)
    t["position"] = float("nan")
    refused(t, "state: not valid JSON")
    t = copy.deepcopy(s)
    t["extra"] = object()
    refused(t, "state: is not JSON-serialisable")


def test_a_state_of_a_retokenised_corpus_is_refused():
    s = started().state_dict()
    refused(s, "state: was saved for another data set", data=sample_data(bump=17))


def test_a_packer_state_over_capacity_or_negative_is_refused():
    sp = shardkit.StreamingPacker(16, oversize="split", buffer=6)
    for i in range(30):
        sp.push(i, 1 + (37 * i) % 50)
    s = json.loads(sp._packer.state_json())
    # Sealed again (an edit alone breaks the checksum): the checks behind it.
    s["pending"] = [[[0, 0, 10, 0], [1, 0, 10, 0]]]
    with pytest.raises(ValueError, match=r"state: pending\[0\]: holds 20 tokens, more than"):
        shardkit.StreamingPacker(16, oversize="split", buffer=6, state=reseal(s))
    with pytest.raises(ValueError, match="state: checksum"):
        shardkit.StreamingPacker(16, oversize="split", buffer=6, state=s)
    s["pending"] = [[[0, 0, -1, 0]]]
    with pytest.raises(ValueError, match="must not be negative"):
        shardkit.StreamingPacker(16, oversize="split", buffer=6, state=reseal(s))
    s["pending"] = [[[0, 2**63 - 1, 5, 0]]]
    with pytest.raises(ValueError, match="overflows"):
        shardkit.StreamingPacker(16, oversize="split", buffer=6, state=reseal(s))


# ---- the CLI saves and resumes through the same codec ---------------------------


def test_cli_loader_stats_saves_and_resumes_the_remaining_batches(cli, tmp_path):
    tokens, offsets = sample_data()
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    base = ["loader-stats", "--tokens", tmp_path / "t.npy", "--offsets", tmp_path / "o.npy"]
    base += ["--seq-len", 32, "--batch", 2, "--buffer", 8, "--seed", 2**64 - 5, "--quiet", "--json"]
    base += ["--per-rank"]  # per-rank states (equal steps: one state, tested elsewhere)
    common = base + ["--world", 2, "--workers", 2]
    whole = cli(*common)
    assert whole.returncode == 0, whole.stderr
    whole = json.loads(whole.stdout)
    state = tmp_path / "state.json"
    first = cli(*common, "--max-batches", 3, "--save-state", state)
    assert first.returncode == 0, first.stderr
    first = json.loads(first.stdout)
    rest = cli(*common, "--resume", state)
    assert rest.returncode == 0, rest.stderr
    rest = json.loads(rest.stdout)
    assert rest["resumed"] is True and rest["complete"] is False
    for w, f, r in zip(whole["ranks"], first["ranks"], rest["ranks"]):
        for key in ("batches", "tokens", "pieces"):
            assert f[key] + r[key] == w[key], (key, w, f, r)
    # The saved states are Python's too: the loader of rank 1, worker 1 (consumer 3)
    # continues with exactly the batches of the uninterrupted run.
    states = json.loads(state.read_text())
    assert [s["consumer"] for s in states] == [0, 2, 1, 3]
    opts = dict(OPTS, rank=1, world_size=2, worker=1, num_workers=2)
    uninterrupted = pieces(shardkit.TokenLoader(tokens, offsets, **opts))
    resumed = shardkit.TokenLoader(tokens, offsets, **opts)
    resumed.load_state_dict(states[3])
    assert pieces(resumed) == uninterrupted[3:]
    # Elastic: three ranks of one worker finish what four loaders started,
    # every remaining token once.
    elastic = cli(*base, "--world", 3, "--resume", state)
    assert elastic.returncode == 0, elastic.stderr
    assert json.loads(elastic.stdout)["real_tokens"] == whole["real_tokens"] - first["real_tokens"]
    # A damaged file is one line naming the flag.
    state.write_text(state.read_text().replace('"epoch": 0', '"epoch": 1', 1))
    bad = cli(*common, "--resume", state)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "--resume: " in bad.stderr and "checksum" in bad.stderr
