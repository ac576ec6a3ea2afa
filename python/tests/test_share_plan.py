"""The shared host plan (share_plan=True, shardkit/loader/host_plan.h): ranks
that read the host's one plan deliver exactly what they deliver without it
(the oracle: the same loader without share_plan), under torchrun and in one
process; a corrupt plan file is refused, never trusted."""

import json
import random

import numpy as np
import pytest
import torchrun_launch
from test_loader import make_data

from shardkit import TokenLoader


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


@pytest.fixture
def share_dir(tmp_path, monkeypatch):
    d = tmp_path / "shm"
    d.mkdir()
    monkeypatch.setenv("SHARDKIT_SHARE_PLAN_DIR", str(d))
    monkeypatch.setenv("SHARDKIT_SHARE_PLAN_TIMEOUT", "30")
    return d


def test_local_ranks_deliver_what_they_deliver_without_the_shared_plan(share_dir):
    tokens, offsets = make_data(random.Random(21), 400, 300)
    kw = dict(seq_len=64, batch_size=2, world_size=3, seed=5, buffer=16, num_threads=0)
    for mode in ("pad", "drop", "continuous"):
        # Local rank 0 (here rank 2) first: it writes the host's file.
        order = [2, 0, 1]
        shared = {}
        loaders = {}
        before = {p.name for p in share_dir.iterdir()}  # earlier modes' next-epoch files
        for local, rank in enumerate(order):
            loaders[rank] = TokenLoader(
                tokens, offsets, rank=rank, share_plan=True, local_rank=local, mode=mode, **kw
            )
        files = sorted({p.name for p in share_dir.iterdir()} - before)
        assert len(files) == 1 and files[0].startswith("shardkit-plan-"), files
        for rank in order:
            shared[rank] = pieces_of(loaders[rank])
            plain = pieces_of(TokenLoader(tokens, offsets, rank=rank, mode=mode, **kw))
            assert shared[rank] == plain, (mode, rank)
            assert len(shared[rank]) == len(plain) > 0
        # Local rank 0 read its epoch to the end: its file is gone (the loaders stand
        # in epoch 1 now, local rank 0's with the next epoch's file).
        assert not (share_dir / files[0]).exists()
        del loaders


def test_a_corrupt_plan_file_is_refused_and_the_rank_plans_itself(share_dir):
    tokens, offsets = make_data(random.Random(22), 300, 300)
    kw = dict(seq_len=64, batch_size=2, world_size=2, seed=5, num_threads=0)
    builder = TokenLoader(tokens, offsets, rank=0, share_plan=True, local_rank=0, **kw)
    (path,) = share_dir.iterdir()
    data = bytearray(path.read_bytes())
    data[-9] ^= 0xFF  # in the last rank's rows
    path.write_bytes(bytes(data))
    reader = TokenLoader(tokens, offsets, rank=1, share_plan=True, local_rank=1, **kw)
    plain = TokenLoader(tokens, offsets, rank=1, **kw)
    # Local rank 0 reads its epoch first (at its end it writes epoch 1's file, which
    # the reader maps when its own epoch 0 ends).
    assert len(pieces_of(builder)) > 0
    assert pieces_of(reader) == pieces_of(plain)


def small_shared_loader(seed, **options):
    """A loader with share_plan=True over a small corpus (the refusal tests')."""
    tokens, offsets = make_data(random.Random(seed), 50, 100)
    return TokenLoader(tokens, offsets, seq_len=64, batch_size=2, share_plan=True, **options)


def test_share_plan_needs_equal_steps_and_a_valid_local_rank(share_dir):
    with pytest.raises(ValueError, match="share_plan: needs equal_steps"):
        small_shared_loader(23, equal_steps=False)
    with pytest.raises(ValueError, match="local_rank"):
        small_shared_loader(23, local_rank=-3)


def test_a_rank_without_local_rank_zero_times_out_naming_the_file(share_dir, monkeypatch):
    monkeypatch.setenv("SHARDKIT_SHARE_PLAN_TIMEOUT", "0.2")
    with pytest.raises(ValueError, match=r"share_plan: local rank 1 waited .*shardkit-plan-"):
        small_shared_loader(24, rank=1, world_size=2, local_rank=1)


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf", "1e999"])
def test_a_bad_wait_in_the_environment_is_refused_naming_it(share_dir, monkeypatch, value):
    monkeypatch.setenv("SHARDKIT_SHARE_PLAN_TIMEOUT", value)
    with pytest.raises(ValueError, match=f"^SHARDKIT_SHARE_PLAN_TIMEOUT: .*'{value}'"):
        small_shared_loader(24, local_rank=1)


@pytest.mark.parametrize("value", ["x", "-1", "1.5"])
def test_a_bad_local_rank_in_the_environment_is_refused_naming_it(share_dir, monkeypatch, value):
    monkeypatch.setenv("LOCAL_RANK", value)
    with pytest.raises(ValueError, match=f"^LOCAL_RANK: .*'{value}'"):
        small_shared_loader(24)


@pytest.mark.timeout(420)
def test_torchrun_ranks_share_one_plan_per_host(tmp_path, torch):
    tokens, offsets = make_data(random.Random(25), 500, 200)
    np.save(tmp_path / "tokens.npy", tokens)
    np.save(tmp_path / "offsets.npy", offsets)
    shm = tmp_path / "shm"
    shm.mkdir()
    env = {"SHARDKIT_SHARE_PLAN_DIR": str(shm), "SHARDKIT_SHARE_PLAN_TIMEOUT": "120"}
    proc = torchrun_launch.launch("share_plan_torchrun_worker.py", 3, tmp_path, env=env)
    torchrun_launch.finish(proc, 360)
    for rank in range(3):
        out = json.loads((tmp_path / f"shared-{rank}.json").read_text())
        for workers in ("0", "2"):
            run = out[workers]
            assert run["shared"] == run["plain"], (rank, workers)
            assert all(len(e) > 0 for e in run["plain"])
            # The host's one plan file per epoch (the name bound to the plan; the
            # next epoch's may appear as the last batches are read).
            # (".shardkit-plan-*.tmp.*": the atomic write's temporaries, seen mid-write.)
            files = [f for f in run["files"] if not f.startswith(".shardkit-plan-")]
            assert all(f.startswith("shardkit-plan-") for f in files), run["files"]
            assert 1 <= len(files) <= 3, run["files"]
    # Every epoch read to its end: local rank 0 removed its files; what stays is the
    # file of the epoch after the last (built when the last epoch ended, for a run
    # that resumes there).
    assert len(list(shm.iterdir())) <= 1


def test_a_mixture_loader_through_the_shared_plan_delivers_what_it_delivers_without(share_dir):
    sources = [make_data(random.Random(30 + i), 200, 150) for i in range(3)]

    def loader(rank, **share):
        return TokenLoader.mixture(
            sources,
            [0.5, 0.3, 0.2],
            seq_len=64,
            batch_size=2,
            world_size=2,
            rank=rank,
            num_threads=0,
            samples=300,
            **share,
        )

    builder = loader(0, share_plan=True, local_rank=0)
    reader = loader(1, share_plan=True, local_rank=1)
    assert len(list(share_dir.iterdir())) == 1
    for rank, shared in ((0, builder), (1, reader)):
        got = pieces_of(shared)
        assert got == pieces_of(loader(rank)) and len(got) > 0, rank
