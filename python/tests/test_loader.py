"""TokenLoader and the torch adapter against plain-Python references.

The oracle of a batch is a reference collation written here (the convention of
Hugging Face's DataCollatorWithFlattening, which TRL's padding-free packing
uses: labels = input_ids with -100 on each sequence's first token, position
ids restarting per sequence) applied to the pieces the batch lists and the
tokens of the data set itself. Coverage is checked against the document list.
"""

import json
import random

import numpy as np
import pytest
import torchrun_launch
from tiling import batch_fields, batch_pieces, tiles

from shardkit import TokenLoader


def make_data(rng, docs, max_len, dtype=np.int32):
    lengths = [0 if rng.random() < 0.1 else rng.randrange(0, max_len + 1) for _ in range(docs)]
    offsets = np.zeros(docs + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(lengths)
    tokens = (np.arange(offsets[-1]) * 7 + 3) % 30000
    return tokens.astype(dtype), offsets


def reference_batch(batch, tokens, offsets, seq_len, batch_size):
    """Rebuilds every array of a batch from its piece list (HF flattening rules)."""
    ids = np.zeros((batch_size, seq_len), np.int64)
    labels = np.full((batch_size, seq_len), -100, np.int64)
    pos = np.zeros((batch_size, seq_len), np.int64)
    seg = np.full((batch_size, seq_len), -1, np.int32)
    cu = [0]
    fill = [0] * batch_size
    nseq = [0] * batch_size
    pieces = batch_fields(batch, "documents", "starts", "lengths", "rows")
    for row in range(batch_size):
        for d, start, length, r in pieces:
            if r != row:
                continue
            t = fill[row]
            src = tokens[offsets[d] + start : offsets[d] + start + length]
            ids[row, t : t + length] = src
            labels[row, t : t + length] = src
            if length:
                labels[row, t] = -100
                pos[row, t : t + length] = np.arange(length)
                seg[row, t : t + length] = nseq[row]
                nseq[row] += 1
                cu.append(cu[-1] + length)
            fill[row] += length
        if fill[row] < seq_len:
            cu.append(cu[-1] + seq_len - fill[row])
    return dict(
        input_ids=ids,
        labels=labels,
        position_ids=pos,
        document_ids=seg,
        cu_seqlens=np.array(cu, np.int32),
    )


def check_batch(batch, tokens, offsets, seq_len, batch_size):
    expected = reference_batch(batch, tokens, offsets, seq_len, batch_size)
    for key, value in expected.items():
        np.testing.assert_array_equal(batch[key], value, err_msg=key)
    rows = batch["rows"].tolist()
    assert rows == sorted(rows)


def test_every_document_once_across_ranks_and_workers_with_reference_batches():
    rng = random.Random(0)
    for trial in range(25):
        seq_len = rng.randrange(8, 80)
        batch_size = rng.randrange(1, 5)
        world, workers = rng.randrange(1, 5), rng.randrange(1, 3)
        tokens, offsets = make_data(
            rng, rng.randrange(0, 150), 3 * seq_len, rng.choice([np.int32, np.uint16, np.uint32])
        )
        algorithm = rng.choice(["next_fit", "ffd", "bfd", "balanced"])
        pieces = []
        for rank in range(world):
            for worker in range(workers):
                loader = TokenLoader(
                    tokens,
                    offsets,
                    seq_len=seq_len,
                    batch_size=batch_size,
                    rank=rank,
                    world_size=world,
                    worker=worker,
                    num_workers=workers,
                    seed=trial,
                    algorithm=algorithm,
                    buffer=rng.randrange(1, 30),
                    equal_steps=False,  # per-rank packing (each loader its own buffer)
                    num_threads=rng.randrange(0, 3),
                )
                for batch in loader:
                    check_batch(batch, tokens, offsets, seq_len, batch_size)
                    pieces += batch_pieces(batch)
        tiles(np.diff(offsets), pieces)


def test_identical_for_any_thread_count_and_prefetch_depth():
    tokens, offsets = make_data(random.Random(1), 400, 300)

    def run(threads, prefetch):
        loader = TokenLoader(
            tokens,
            offsets,
            seq_len=128,
            batch_size=4,
            rank=1,
            world_size=2,
            num_threads=threads,
            prefetch=prefetch,
            buffer=32,
        )
        return [{k: np.array(v) for k, v in b.items()} for b in loader]

    reference = run(0, 1)
    assert len(reference) > 10
    for threads, prefetch in [(1, 1), (2, 2), (4, 8), (8, 3)]:
        got = run(threads, prefetch)
        assert len(got) == len(reference)
        for a, b in zip(got, reference):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_resume_at_random_points_equals_the_uninterrupted_run():
    rng = random.Random(2)
    tokens, offsets = make_data(rng, 300, 200)
    kw = dict(seq_len=96, batch_size=3, rank=2, world_size=3, seed=5, buffer=20)
    full = [batch_pieces(b) for b in TokenLoader(tokens, offsets, **kw)]
    for _ in range(8):
        cut = rng.randrange(0, len(full) + 1)
        loader = TokenLoader(tokens, offsets, num_threads=rng.randrange(0, 3), **kw)
        it = iter(loader)
        head = [batch_pieces(next(it)) for _ in range(cut)]
        state = json.loads(json.dumps(loader.state_dict()))  # JSON round trip
        del it, loader
        resumed = TokenLoader(tokens, offsets, num_threads=rng.randrange(0, 3), **kw)
        resumed.load_state_dict(state)
        assert head + [batch_pieces(b) for b in resumed] == full


def test_elastic_resume_four_ranks_to_three_delivers_the_rest_exactly_once():
    rng = random.Random(3)
    for trial in range(10):
        tokens, offsets = make_data(rng, rng.randrange(0, 300), 150)
        kw = dict(
            seq_len=64, batch_size=2, seed=trial, buffer=rng.randrange(1, 40), equal_steps=False
        )
        delivered, states = [], []
        for rank in range(4):
            loader = TokenLoader(tokens, offsets, rank=rank, world_size=4, **kw)
            it = iter(loader)
            for _ in range(rng.randrange(0, 8)):
                batch = next(it, None)
                if batch is None:
                    break
                delivered += batch_pieces(batch)
            states.append(json.loads(json.dumps(loader.state_dict())))
        for rank in range(3):
            loader = TokenLoader(tokens, offsets, rank=rank, world_size=3, **kw)
            loader.load_state_dict(states)  # all four states: merged on load
            for batch in loader:
                check_batch(batch, tokens, offsets, 64, 2)
                delivered += batch_pieces(batch)
        tiles(np.diff(offsets), delivered)


def test_iteration_is_one_epoch_then_the_next_epoch():
    tokens, offsets = make_data(random.Random(4), 50, 40)
    loader = TokenLoader(tokens, offsets, seq_len=64, batch_size=2, rank=0, world_size=1)
    first = [batch_pieces(b) for b in loader]
    # epoch: the pass that ran out; the state (and the next pass): epoch 1
    assert loader.epoch == 0 and loader.state_dict()["epoch"] == 1
    second = [batch_pieces(b) for b in loader]
    tiles(np.diff(offsets), sum(first, []))
    tiles(np.diff(offsets), sum(second, []))
    assert first != second  # another shuffle
    loader.set_epoch(0)
    assert [batch_pieces(b) for b in loader] == first


def test_files_directories_and_memory_give_the_same_batches(tmp_path):
    tokens, offsets = make_data(random.Random(5), 120, 90, np.uint16)
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    tokens.tofile(tmp_path / "t.bin")
    kw = dict(seq_len=64, batch_size=2, rank=0, world_size=1, seed=3)
    mem = [batch_pieces(b) for b in TokenLoader(tokens, offsets, **kw)]
    npy = [batch_pieces(b) for b in TokenLoader(tmp_path / "t.npy", tmp_path / "o.npy", **kw)]
    raw = [
        batch_pieces(b)
        for b in TokenLoader(
            str(tmp_path / "t.bin"), str(tmp_path / "o.npy"), token_dtype="uint16", **kw
        )
    ]
    assert mem == npy == raw
    # The same documents split over three files of a directory.
    parts = tmp_path / "parts"
    parts.mkdir()
    bounds = [0, 40, 41, 120]
    for i in range(3):
        lo, hi = bounds[i], bounds[i + 1]
        np.save(parts / f"p{i}.tokens.npy", tokens[offsets[lo] : offsets[hi]])
        np.save(parts / f"p{i}.offsets.npy", offsets[lo : hi + 1] - offsets[lo])
    directory = TokenLoader(parts, **kw)
    assert directory.num_documents == 120
    assert [batch_pieces(b) for b in directory] == mem


def test_corrupt_and_truncated_files_are_clear_errors(tmp_path):
    tokens, offsets = make_data(random.Random(6), 10, 20)
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    data = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "short.npy").write_bytes(data[:-5])
    (tmp_path / "header.npy").write_bytes(data[:30])
    (tmp_path / "junk.npy").write_bytes(b"\x00junk" * 20)
    np.save(tmp_path / "down.npy", offsets[::-1].copy())
    np.save(tmp_path / "f.npy", tokens.astype(np.float32))
    kw = dict(seq_len=8, batch_size=1, rank=0, world_size=1)
    cases = [
        ("short.npy", "o.npy", r"tokens: .*short\.npy: truncated data"),
        ("header.npy", "o.npy", r"tokens: .*header\.npy: truncated header"),
        ("junk.npy", "o.npy", r"tokens: .*junk\.npy: not a \.npy file"),
        ("f.npy", "o.npy", r"tokens: .*f\.npy: dtype '<f4' is not a token type"),
        ("t.npy", "down.npy", r"offsets: .*down\.npy: offsets\[1\]"),
        ("t.npy", "missing.npy", r"offsets: cannot open .*missing\.npy"),
    ]
    for t, o, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            TokenLoader(tmp_path / t, tmp_path / o, **kw)
    with pytest.raises(ValueError, match=r"offsets: offsets\[2\] = 99 is outside"):
        TokenLoader(np.arange(10, dtype=np.int32), np.array([0, 5, 99]), **kw)
    with pytest.raises(ValueError, match=r"tokens: dtype float64 is not an integer type"):
        TokenLoader(np.zeros(4), np.array([0, 4]), **kw)


def test_bad_options_and_states_name_the_parameter():
    tokens, offsets = make_data(random.Random(7), 20, 20)

    def err(**kw):
        base = dict(seq_len=8, batch_size=2, rank=0, world_size=1)
        base.update(kw)
        return base

    for kw, pattern in [
        (err(seq_len=0), "seq_len: "),
        (err(batch_size=0), "batch_size: "),
        (err(rank=2, world_size=2), "rank: 2 is outside"),
        (err(algorithm="magic"), "algorithm: "),
        (err(oversize="error"), "oversize: "),
        (err(prefetch=0), "prefetch: "),
        (err(buffer=0), "buffer: "),
    ]:
        with pytest.raises(ValueError, match=pattern):
            TokenLoader(tokens, offsets, **kw)
    per_rank = dict(seq_len=8, batch_size=2, world_size=2, equal_steps=False)
    loader = TokenLoader(tokens, offsets, rank=0, **per_rank)
    state = loader.state_dict()
    other = TokenLoader(tokens, offsets, rank=1, **per_rank)
    with pytest.raises(ValueError, match="state: was saved by consumer 0 of 2"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="state: missing key 'done'"):
        other.load_state_dict({k: v for k, v in state.items() if k != "done"})
    with pytest.raises(ValueError, match="state: got 1 states"):
        other.load_state_dict([state])


def test_zero_copy_views_and_buffer_reuse():
    tokens, offsets = make_data(random.Random(8), 200, 60)
    loader = TokenLoader(
        tokens, offsets, seq_len=64, batch_size=2, rank=0, world_size=1, num_threads=2
    )
    it = iter(loader)
    a = next(it)
    kept = a["input_ids"].copy()
    b = next(it)
    assert not np.shares_memory(a["input_ids"], b["input_ids"])  # a is still held
    np.testing.assert_array_equal(a["input_ids"], kept)  # and was not overwritten
    assert a["input_ids"].flags.writeable and a["input_ids"].base is not None


def test_rank_and_world_default_to_the_launcher(monkeypatch):
    tokens, offsets = make_data(random.Random(14), 10, 10)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = TokenLoader(tokens, offsets, seq_len=8, batch_size=1)
    assert (loader.rank, loader.world_size) == (2, 3)
    assert (TokenLoader(tokens, offsets, seq_len=8, batch_size=1, rank=0).rank) == 0
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(ValueError, match="rank"):
        TokenLoader(tokens, offsets, seq_len=8, batch_size=1)


def test_torch_dataloader_workers_cover_the_epoch_once_and_resume_exactly(torch):
    from shardkit.torch import TokenDataLoader, TokenDataset

    tokens, offsets = make_data(random.Random(9), 120, 100)
    pieces = []
    for rank in range(2):
        ds = TokenDataset(
            tokens, offsets, seq_len=64, batch_size=2, rank=rank, world_size=2, equal_steps=False
        )
        for batch in TokenDataLoader(ds, num_workers=2):
            assert isinstance(batch["input_ids"], torch.Tensor)
            assert batch["input_ids"].shape == (2, 64)
            pieces += list(
                zip(
                    batch["documents"].tolist(), batch["starts"].tolist(), batch["lengths"].tolist()
                )
            )
    tiles(np.diff(offsets), pieces)

    ds = TokenDataset(
        tokens, offsets, seq_len=64, batch_size=2, rank=0, world_size=1, equal_steps=False
    )
    full = [b["documents"].tolist() for b in TokenDataLoader(ds, num_workers=2)]
    ds.set_epoch(0)  # the pass ran out: the dataset stands at the start of epoch 1
    dl = TokenDataLoader(ds, num_workers=2)
    it = iter(dl)
    head = [next(it)["documents"].tolist() for _ in range(3)]
    state = json.loads(json.dumps(dl.state_dict()))
    del it
    ds2 = TokenDataset(
        tokens, offsets, seq_len=64, batch_size=2, rank=0, world_size=1, equal_steps=False
    )
    dl2 = TokenDataLoader(ds2, num_workers=2)
    dl2.load_state_dict(state)
    assert head + [b["documents"].tolist() for b in dl2] == full


def test_torch_tensors_share_memory_with_the_batch(torch):
    from shardkit.torch import to_torch

    tokens, offsets = make_data(random.Random(10), 30, 30)
    batch = next(iter(TokenLoader(tokens, offsets, seq_len=32, batch_size=2, rank=0, world_size=1)))
    tensors = to_torch(batch)
    assert tensors["input_ids"].data_ptr() == batch["input_ids"].ctypes.data


@pytest.mark.timeout(120)
def test_torchrun_killed_mid_epoch_restarted_on_three_processes(tmp_path, torch):
    """4 gloo processes checkpoint after step 3 and are killed (SIGKILL) while
    still running; 3 processes resume from the checkpoint and finish the epoch.
    The batches up to the checkpoint plus the resumed ones cover the epoch once."""
    tokens, offsets = make_data(random.Random(11), 600, 120)
    np.save(tmp_path / "tokens.npy", tokens)
    np.save(tmp_path / "offsets.npy", offsets)
    marker = tmp_path / "checkpoint.json"

    def launch(nproc, mode):
        return torchrun_launch.launch("loader_torchrun_worker.py", nproc, tmp_path, mode)

    # Generous: 4 processes importing torch on a loaded 2-core machine can take
    # minutes; the wait ends as soon as the checkpoint is there.
    torchrun_launch.kill_after_checkpoint(lambda: launch(4, "first"), marker, timeout=240)
    checkpoint = json.loads(marker.read_text())
    assert len(checkpoint["states"]) == 4

    torchrun_launch.finish(launch(3, "resume"), 300)
    delivered = [tuple(p) for p in checkpoint["delivered"]]
    for rank in range(3):
        delivered += [tuple(p) for p in json.loads((tmp_path / f"resumed-{rank}.json").read_text())]
    tiles(np.diff(offsets), delivered)


def test_cli_loader_stats_reports_every_token_once(cli, tmp_path):
    tokens, offsets = make_data(random.Random(12), 300, 500)
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    stats = ["loader-stats", "--tokens", tmp_path / "t.npy", "--offsets", tmp_path / "o.npy"]
    stats += ["--seq-len", 256, "--batch", 4]
    r = cli(*stats, "--world", 3, "--per-rank", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["real_tokens"] == int(offsets[-1]) and out["complete"] is True
    assert sum(rank["tokens"] for rank in out["ranks"]) == int(offsets[-1])
    assert [rank["rank"] for rank in out["ranks"]] == [0, 1, 2]
    # The same figures as the Python loader, rank by rank.
    for rank in out["ranks"]:
        batches = list(
            TokenLoader(
                tokens,
                offsets,
                seq_len=256,
                batch_size=4,
                rank=rank["rank"],
                world_size=3,
                equal_steps=False,  # loader-stats without --equal-steps packs per rank
            )
        )
        assert rank["batches"] == len(batches)
        assert rank["tokens"] == sum(int((b["document_ids"] >= 0).sum()) for b in batches)
    assert "100.0%" in r.stderr  # the progress bar
    quiet = cli(*stats, "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == "" and "every token delivered" in quiet.stdout


def test_cli_loader_stats_bad_input_exits_2_with_one_line(cli, tmp_path):
    tokens, offsets = make_data(random.Random(13), 10, 20)
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    (tmp_path / "cut.npy").write_bytes((tmp_path / "t.npy").read_bytes()[:-3])
    t, o = tmp_path / "t.npy", tmp_path / "o.npy"
    for args, message in [
        (["--tokens", t, "--offsets", o, "--seq-len", 0, "--batch", 2], "--seq-len: must be"),
        (
            ["--tokens", t, "--offsets", o, "--seq-len", 8, "--batch", 2, "--rank", 5],
            "--rank: 5 is outside",
        ),
        (
            ["--tokens", tmp_path / "cut.npy", "--offsets", o, "--seq-len", 8, "--batch", 2],
            "--tokens: " + str(tmp_path / "cut.npy") + ": truncated data",
        ),
        (["--tokens", t, "--seq-len", 8, "--batch", 2], "--offsets: required"),
        (
            ["--tokens", t, "--offsets", o, "--seq-len", 8, "--batch", 2, "--algorithm", "x"],
            "--algorithm: ",
        ),
    ]:
        r = cli("loader-stats", *args, "--quiet")
        assert r.returncode == 2, (args, r.stdout)
        assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_demo_has_a_loader_section(cli, tmp_path):
    r = cli("demo", "--json", "--out", tmp_path / "demo.html")
    assert r.returncode == 0, r.stderr
    loader = json.loads(r.stdout)["loader"]
    assert loader["exactly_once"] and loader["resume_exact"] and loader["elastic_exactly_once"]
    assert {a["algorithm"] for a in loader["algorithms"]} == {"next_fit", "ffd", "bfd", "balanced"}
    assert "Loader: packed batches" in (tmp_path / "demo.html").read_text()
