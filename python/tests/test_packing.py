"""shardkit.pack and friends against plain-Python references of the textbook
definitions, the collators against a direct reconstruction, and the torch
dataset across dataloader worker counts."""

import json
import os
import random

import numpy as np
import pytest

import shardkit
from shardkit.packing import StreamingPacker, pack_stream

# ---------------------------------------------------------------------------
# Plain references (O(n * packs), no tricks).


def ref_next_fit(lengths, cap):
    packs, load = [], None
    for i, n in enumerate(lengths):
        if load is None or load + n > cap:
            packs.append([])
            load = 0
        packs[-1].append(i)
        load += n
    return packs


def _decreasing(lengths):
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))


def ref_ffd(lengths, cap):
    packs, loads = [], []
    for i in _decreasing(lengths):
        for b, load in enumerate(loads):
            if load + lengths[i] <= cap:
                packs[b].append(i)
                loads[b] += lengths[i]
                break
        else:
            packs.append([i])
            loads.append(lengths[i])
    return packs


def ref_bfd(lengths, cap):
    # least room that fits; ties: the most recently filled pack
    packs, loads, stamps = [], [], []
    for t, i in enumerate(_decreasing(lengths)):
        best = None
        for b, load in enumerate(loads):
            if load + lengths[i] <= cap:
                key = (cap - load, -stamps[b])
                if best is None or key < best[0]:
                    best = (key, b)
        if best is None:
            packs.append([])
            loads.append(0)
            stamps.append(0)
            b = len(packs) - 1
        else:
            b = best[1]
        packs[b].append(i)
        loads[b] += lengths[i]
        stamps[b] = t
    return packs


def random_lengths(rng, n, cap):
    shape = rng.randrange(4)
    if shape == 0:
        return [rng.randint(0, cap) for _ in range(n)]
    if shape == 1:
        return [min(cap, int(rng.lognormvariate(np.log(cap / 6 + 1), 1.0))) for _ in range(n)]
    if shape == 2:
        return [cap // 3 + 1] * n
    return [cap if rng.random() < 0.2 else rng.randint(1, cap // 4 + 1) for _ in range(n)]


def test_ffd_bfd_next_fit_equal_the_textbook_definitions():
    rng = random.Random(0)
    for trial in range(150):
        cap = rng.randint(1, 120)
        lengths = random_lengths(rng, rng.randint(0, 150), cap)
        assert shardkit.pack(lengths, cap, algorithm="ffd").packs == ref_ffd(lengths, cap)
        assert shardkit.pack(lengths, cap, algorithm="bfd").packs == ref_bfd(lengths, cap)
        assert shardkit.pack(lengths, cap, algorithm="next_fit").packs == ref_next_fit(lengths, cap)


@pytest.mark.parametrize("algorithm", ["next_fit", "ffd", "bfd", "balanced"])
def test_every_item_once_and_no_budget_exceeded(algorithm):
    rng = random.Random(hash(algorithm) % 1000)
    for trial in range(60):
        cap = rng.randint(5, 300)
        n = rng.randint(0, 300)
        lengths = [rng.randint(0, 2 * cap) for _ in range(n)]
        images = [rng.choice([0, 0, 1, 2, 5]) for _ in range(n)]
        max_images = rng.randint(1, 6)
        max_sequences = rng.choice([None, 1, 3, 10])
        buffer = rng.choice([None, None, 7, 64])
        p = shardkit.pack(
            lengths,
            cap,
            algorithm=algorithm,
            images=images,
            max_images=max_images,
            max_sequences=max_sequences,
            buffer=buffer,
        )
        seen = [item for pack in p.packs for item in pack]
        dropped = set(p.dropped_items.tolist())
        assert p.dropped == len(dropped)
        assert sorted(seen + sorted(dropped)) == list(range(n))
        for d in dropped:
            assert lengths[d] > cap or images[d] > max_images
        for pack in p.packs:
            assert sum(lengths[i] for i in pack) <= cap
            assert sum(images[i] for i in pack) <= max_images
            if max_sequences:
                assert len(pack) <= max_sequences
        assert p.lower_bound <= p.num_packs
        assert p.num_packs == len(p.packs)


@pytest.mark.parametrize("algorithm", ["histogram", "balanced"])
def test_histogram_every_item_once_budgets_hold_and_beats_bfd_under_a_count_budget(algorithm):
    rng = random.Random(14)
    for trial in range(60):
        cap = rng.randint(1, 300)
        n = rng.randint(0, 300)
        lengths = [rng.randint(0, cap) for _ in range(n)]
        max_sequences = rng.choice([None, 1, 2, 3, 12])
        p = shardkit.pack(lengths, cap, algorithm=algorithm, max_sequences=max_sequences)
        assert sorted(item for pack in p.packs for item in pack) == list(range(n))
        for pack in p.packs:
            assert sum(lengths[i] for i in pack) <= cap
            assert max_sequences is None or len(pack) <= max_sequences
        again = shardkit.pack(lengths, cap, algorithm=algorithm, max_sequences=max_sequences)
        assert again.packs == p.packs
    # Three lengths that fill 10 exactly in threes: bfd pairs the 5s first.
    lengths = [5, 5, 5, 3, 3, 3, 2, 2, 2]
    assert shardkit.pack(lengths, 10, algorithm=algorithm, max_sequences=3).num_packs == 3
    assert shardkit.pack(lengths, 10, algorithm="bfd", max_sequences=3).num_packs == 4
    with pytest.raises(ValueError, match="^algorithm: histogram"):
        shardkit.pack([1, 2], 10, algorithm="histogram", images=[0, 1], max_images=2)


def test_compat_trl_reproduces_rows_made_by_the_real_trl():
    # The fixture holds rows of trl.data_utils.pack_dataset made by the real
    # TRL (the command is in its "source"); bench/trl_compat.py runs the full
    # differential test (500 random cases) in the bench venv.
    path = os.path.join(os.path.dirname(__file__), "data", "trl_pack_dataset.json")
    with open(path) as f:
        fixture = json.load(f)
    assert "trl.data_utils.pack_dataset" in fixture["source"]
    assert len(fixture["cases"]) >= 20
    for case in fixture["cases"]:
        p = shardkit.pack(
            case["lengths"],
            case["seq_length"],
            compat="trl",
            oversize="split" if case["strategy"] == "bfd_split" else "drop",
            buffer=case["batch_size"],
        )
        rows = [[[i, s, n] for i, s, n, _ in p.pieces(b)] for b in range(p.num_packs)]
        assert rows == case["trl_rows"], case
    with pytest.raises(ValueError, match="^compat: trl reproduces TRL's bfd"):
        shardkit.pack([1, 2], 10, algorithm="ffd", compat="trl")
    with pytest.raises(ValueError, match="^compat: unknown compat 'hf'"):
        shardkit.pack([1, 2], 10, compat="hf")


def test_flat_arrays_are_read_only_views_consistent_with_packs():
    lengths = np.array([5, 3, 4, 2, 6, 9, 1], dtype=np.int64)
    p = shardkit.pack(lengths, 10)
    assert p.offsets[0] == 0 and p.offsets[-1] == len(p.items)
    rebuilt = [p.items[p.offsets[b] : p.offsets[b + 1]].tolist() for b in range(p.num_packs)]
    assert rebuilt == p.packs
    assert not p.items.flags.writeable
    assert (p.lengths == lengths[p.items]).all()
    assert p.pack_tokens().tolist() == [sum(int(lengths[i]) for i in pk) for pk in p.packs]
    del p  # the views keep the packing alive
    q = shardkit.pack(lengths, 10).items
    assert q.tolist() == shardkit.pack(lengths, 10).items.tolist()


def test_oversize_policies():
    p = shardkit.pack([25, 4, 30], 10, oversize="split", images=[0, 1, 1], max_images=2)
    assert p.dropped_items.tolist() == [2]  # has an image: never split
    assert p.split_items == 1
    assert sorted(p.pieces(0) + p.pieces(1) + p.pieces(2)) == [
        (0, 0, 10, 0),
        (0, 10, 10, 0),
        (0, 20, 5, 0),
        (1, 0, 4, 1),
    ]
    with pytest.raises(ValueError, match=r"lengths: item 1 has 30 tokens, more than capacity 10"):
        shardkit.pack([3, 30], 10, oversize="error")
    d = shardkit.pack([3, 30, 11], 10)
    assert d.dropped == 2 and d.packs == [[0]]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: shardkit.pack([1, 2], 0), "capacity: must be at least 1, got 0"),
        (lambda: shardkit.pack([1, -2], 5), "lengths: item 1 has negative length -2"),
        (lambda: shardkit.pack([1, 2.5], 5), "lengths: item 1 is 2.5, not a whole number"),
        (lambda: shardkit.pack([[1, 2]], 5), "lengths: expected a 1-D array"),
        (lambda: shardkit.pack(["a"], 5), "lengths: expected numbers"),
        (lambda: shardkit.pack([1], 5, algorithm="best"), "algorithm: unknown algorithm 'best'"),
        (lambda: shardkit.pack([1], 5, oversize="cut"), "oversize: unknown policy 'cut'"),
        (
            lambda: shardkit.pack([1, 2], 5, images=[1], max_images=1),
            "images: has 1 entries but lengths has 2",
        ),
        (lambda: shardkit.pack([1], 5, max_images=2), "max_images: is set"),
        (lambda: shardkit.pack([1], 5, buffer=0), "buffer: must be at least 1, got 0"),
    ],
)
def test_bad_input_raises_value_error_naming_the_value(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_same_input_same_packs_and_int64_input_is_not_copied():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 4096, size=20000)
    for algorithm in ("next_fit", "ffd", "bfd", "balanced"):
        a = shardkit.pack(lengths, 4096, algorithm=algorithm)
        b = shardkit.pack(lengths.copy(), 4096, algorithm=algorithm)
        assert (a.items == b.items).all() and (a.offsets == b.offsets).all()
    from shardkit.packing import _int64

    assert _int64(lengths, "lengths") is lengths  # used in place
    assert a.efficiency > 0.99


def test_streaming_state_survives_json_and_continues_exactly():
    rng = random.Random(3)
    lengths = [rng.randint(1, 300) for _ in range(400)]
    for algorithm in ("next_fit", "bfd", "balanced"):
        full = list(pack_stream(lengths, 256, algorithm=algorithm, buffer=16, oversize="split"))
        first = StreamingPacker(256, algorithm=algorithm, buffer=16, oversize="split")
        got = []
        for i, n in enumerate(lengths[:150]):
            first.push(i, n)
            got.extend(iter(first.pop, None))
        state = json.loads(json.dumps(first.state_dict()))
        second = StreamingPacker(256, algorithm=algorithm, buffer=16, oversize="split", state=state)
        # load_state_dict on a packer that has seen other items resumes the same way
        third = StreamingPacker(256, algorithm=algorithm, buffer=16, oversize="split")
        third.push(0, 7)
        third.load_state_dict(state)
        rest = []
        for packer in (second, third):
            for i, n in enumerate(lengths[150:], start=150):
                packer.push(i, n)
            packer.finish()
            rest.append(list(iter(packer.pop, None)))
        assert rest[0] == rest[1]
        got.extend(rest[0])
        assert [[tuple(x) for x in p] for p in got] == [[tuple(x) for x in p] for p in full]
        whole = shardkit.pack(lengths, 256, algorithm=algorithm, buffer=16, oversize="split")
        assert len(full) == whole.num_packs


def test_balance_ranks_equal_packs_per_step_every_pack_once():
    rng = np.random.default_rng(5)
    p = shardkit.pack(rng.integers(1, 2048, 3000), 4096)
    for world, per_rank in [(1, 1), (8, 1), (7, 3)]:
        for cost in ("tokens", "squared"):
            s = shardkit.balance_ranks(p, world, packs_per_rank=per_rank, cost=cost)
            a = s.assignment
            assert a.shape == (s.num_steps, world, per_rank)
            assert (s.world_size, s.packs_per_rank) == (world, per_rank)
            real = a[a >= 0]
            assert sorted(real.tolist()) == list(range(p.num_packs))
            assert (a < 0).sum() == s.padding_packs < world * per_rank
            assert len(s.dropped_packs) == 0
            # rank_costs is the sum of the costs of each rank's packs at each step
            costs = np.array(shardkit.packing._core._pack_costs(p, cost))
            dealt = np.where(a >= 0, costs[np.maximum(a, 0)], 0.0).sum(axis=2)
            np.testing.assert_allclose(s.rank_costs, dealt)
            if cost == "tokens":
                assert s.max_full_step_imbalance < 0.05
            # never worse than dealing the packs in their own order, step by step
            naive = 0.0
            for step in range(len(costs) // (world * per_rank)):
                chunk = costs[step * world * per_rank : (step + 1) * world * per_rank]
                ranks = chunk.reshape(per_rank, world).sum(axis=0)
                naive = max(naive, ranks.max() / ranks.mean() - 1)
            assert s.max_full_step_imbalance <= naive + 1e-12
    with pytest.raises(ValueError, match="world_size"):
        shardkit.balance_ranks([1.0], 0)


# ---------------------------------------------------------------------------
# Collation


def reference_row(samples, seq_len, side, pad=0):
    ids, labels, pos, doc = [], [], [], []
    for k, s in enumerate(x for x in samples if len(x)):
        for t, v in enumerate(s):
            ids.append(v)
            labels.append(-100 if t == 0 else v)
            pos.append(t)
            doc.append(k)
    n = seq_len - len(ids)

    def padded(v, fill):
        return [fill] * n + v if side == "left" else v + [fill] * n

    return padded(ids, pad), padded(labels, -100), padded(pos, 0), padded(doc, -1)


def test_collator_matches_the_definition_and_torch_matches_numpy():
    torch = pytest.importorskip("torch")
    from shardkit.torch import PackedCollator as TorchCollator

    rng = random.Random(7)
    for trial in range(40):
        seq_len = rng.randint(1, 40)
        side = rng.choice(["right", "left"])
        packs = []
        for _ in range(rng.randint(0, 5)):
            pack, used = [], 0
            while True:
                n = rng.randint(0, 12)
                if used + n > seq_len or rng.random() < 0.2:
                    break
                pack.append([rng.randint(1, 1000) for _ in range(n)])
                used += n
            packs.append(pack)
        out = shardkit.PackedCollator(seq_len, padding_side=side, block_mask=True)(packs)
        assert out["input_ids"].shape == (len(packs), seq_len)
        for r, pack in enumerate(packs):
            ids, labels, pos, doc = reference_row(pack, seq_len, side)
            assert out["input_ids"][r].tolist() == ids
            assert out["labels"][r].tolist() == labels
            assert out["position_ids"][r].tolist() == pos
            assert out["document_ids"][r].tolist() == doc
            d = np.array(doc)
            causal = np.tril(np.ones((seq_len, seq_len), dtype=bool))
            expected = (d[:, None] == d[None, :]) & (d[:, None] >= 0) & causal
            assert (out["block_mask"][r].astype(bool) == expected).all()
        # cu_seqlens: boundaries of the real documents and padding runs, flattened
        bounds = [0]
        for r, pack in enumerate(packs):
            real = [len(s) for s in pack if len(s)]
            pad = seq_len - sum(real)
            runs = (
                ([pad] if pad and side == "left" else [])
                + real
                + ([pad] if pad and side == "right" else [])
            )
            for n in runs:
                bounds.append(bounds[-1] + n)
        assert out["cu_seqlens"].tolist() == bounds
        assert out["cu_seqlens"].dtype == np.int32
        t = TorchCollator(seq_len, padding_side=side)(packs)
        assert torch.equal(t["input_ids"], torch.from_numpy(out["input_ids"]))
        assert t["attention_mask"].dtype == torch.bool


def test_collator_never_truncates_and_maps_images():
    c = shardkit.PackedCollator(4)
    with pytest.raises(ValueError, match="seq_len: pack 0 holds 5 tokens, more than seq_len 4"):
        c([[[1, 2, 3], [4, 5]]])
    out = shardkit.PackedCollator(8)(
        [
            [{"input_ids": [1, 2], "images": ["a", "b"]}, {"input_ids": [3]}],
            [{"input_ids": [4, 5, 6], "images": ["c"]}],
        ]
    )
    # (row, document in row, sample index in the batch)
    assert out["image_sample"].tolist() == [[0, 0, 0], [0, 0, 0], [1, 0, 2]]


def test_collate_packing_takes_split_pieces_from_the_token_array():
    lengths = [25, 4]
    tokens = np.arange(29)
    offsets = np.array([0, 25, 29])
    p = shardkit.pack(lengths, 10, oversize="split")
    out = shardkit.collate_packing(p, tokens, offsets)
    rows = {tuple(r[r != 0].tolist()) if r[0] != 0 else tuple(r.tolist()) for r in out["input_ids"]}
    assert tuple(range(0, 10)) in rows and tuple(range(10, 20)) in rows
    last = [r for r in out["input_ids"].tolist() if 20 in r][0]
    assert last[:9] == [20, 21, 22, 23, 24, 25, 26, 27, 28]


# ---------------------------------------------------------------------------
# The torch dataset


def _samples(n, seed=0):
    rng = random.Random(seed)
    return [
        {"input_ids": [rng.randint(1, 999) for _ in range(rng.choice([0, 3, 9, 40, 70]))]}
        for _ in range(n)
    ]


def _collect(ds, workers):
    import torch.utils.data as tud

    loader = tud.DataLoader(ds, batch_size=None, num_workers=workers, timeout=60 if workers else 0)
    return [{k: v.clone() if hasattr(v, "clone") else v for k, v in b.items()} for b in loader]


def test_constant_length_dataset_identical_batches_for_any_number_of_workers():
    torch = pytest.importorskip("torch")
    from shardkit.torch import ConstantLengthDataset

    data = _samples(300)
    ds = ConstantLengthDataset(
        data,
        seq_len=64,
        batch_size=3,
        buffer=32,
        queue_size=4,
        rank=0,
        world_size=1,
        shuffle=True,
        seed=3,
    )
    reference = _collect(ds, 0)
    documents = torch.cat([b["documents"] for b in reference]).tolist()
    long = [i for i, s in enumerate(data) if len(s["input_ids"]) > 64]
    assert sorted(documents) == sorted(set(range(300)) - set(long))  # each once, long dropped
    for workers in (1, 3):
        ds.set_epoch(0)  # the in-process pass ran out: the dataset stood at epoch 1
        batches = _collect(ds, workers)
        assert len(batches) == len(reference)
        for a, b in zip(batches, reference):
            for key in ("input_ids", "labels", "position_ids", "cu_seqlens", "documents"):
                assert torch.equal(a[key], b[key]), (workers, key)
    ds.set_epoch(1)
    assert not torch.equal(_collect(ds, 0)[0]["documents"], reference[0]["documents"])


def test_constant_length_dataset_shards_ranks_exactly_once():
    pytest.importorskip("torch")
    from shardkit.torch import ConstantLengthDataset

    data = _samples(100, seed=1)
    seen = []
    for rank in range(3):
        ds = ConstantLengthDataset(
            data,
            seq_len=128,
            batch_size=2,
            rank=rank,
            world_size=3,
            lengths=[len(s["input_ids"]) for s in data],
        )
        for b in ds:
            seen.extend(b["documents"].tolist())
            labels, ids = b["labels"], b["input_ids"]
            assert ((labels == ids) | (labels == -100)).all()
    assert sorted(seen) == list(range(100))
    with pytest.raises(ValueError, match="lengths: has 3 entries"):
        ConstantLengthDataset(data, seq_len=8, lengths=[1, 2, 3], rank=0, world_size=1)


def test_constant_length_dataset_uses_sample_labels_and_image_budget():
    pytest.importorskip("torch")
    from shardkit.torch import ConstantLengthDataset

    data = [
        {"input_ids": [1, 2, 3, 4], "labels": [-100, -100, 3, 4], "images": ["i"] * 3}
        for _ in range(6)
    ]
    ds = ConstantLengthDataset(data, seq_len=16, max_images_per_pack=6, rank=0, world_size=1)
    batches = list(ds)
    assert len(batches) == 3  # 3 images each: two samples per pack, not four
    for b in batches:
        assert b["labels"][0].tolist()[:8] == [-100, -100, 3, 4, -100, -100, 3, 4]
        assert len(b["images"]) == 6


# ---------------------------------------------------------------------------
# CLI


def test_cli_pack_json_fields(cli, tmp_path):
    f = tmp_path / "lengths.txt"
    f.write_text("5\n3\n# comment\n4\n2\n6\n")
    r = cli("pack", "--lengths", f, "--capacity", 10, "--packs", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert {"items", "dropped", "num_packs", "lower_bound", "efficiency", "packs"} <= set(out)
    assert out["items"] == 5 and out["num_packs"] == 2 and out["efficiency"] == 1.0
    assert out["packs"] == shardkit.pack([5, 3, 4, 2, 6], 10).packs
    npy = tmp_path / "lengths.npy"
    np.save(npy, np.array([5, 30, 4], dtype=np.int32))
    r = cli("pack", "--lengths", npy, "--capacity", 10, "--algorithm", "next_fit", "--json")
    assert json.loads(r.stdout)["dropped"] == 1
    r = cli("pack", "--lengths", "-", "--capacity", 10, input="7\n7\n7\n")
    assert r.returncode == 0 and "3 packs" in r.stdout


@pytest.mark.parametrize(
    "args, stdin, message",
    [
        (["--capacity", "0"], "5\n", "--capacity: must be at least 1, got 0"),
        (["--capacity", "-4"], "5\n", "--capacity: must be at least 1, got -4"),
        (["--capacity", "8"], "5\n-1\n", "--lengths: item 1 is -1"),
        (["--capacity", "8"], "5\nfive\n", "--lengths: stdin line 2: 'five' is not a number"),
        (["--capacity", "8"], "5\n2.5\n", "--lengths: item 1 is 2.5"),
        (["--capacity", "8", "--buffer", "0"], "5\n", "--buffer: must be at least 1, got 0"),
        (["--capacity", "8", "--algorithm", "x"], "5\n", "--algorithm: unknown algorithm 'x'"),
        (["--capacity", "8", "--oversize", "error"], "9\n", "--lengths: item 0 has 9 tokens"),
        (["--capacity", "8", "--max-images", "2"], "5\n", "--max-images: needs --images"),
    ],
)
def test_cli_pack_bad_input_is_one_line_and_exit_2(cli, args, stdin, message):
    r = cli("pack", "--lengths", "-", *args, input=stdin)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_cli_pack_images_of_another_length(cli, tmp_path):
    images = tmp_path / "images.txt"
    images.write_text("1\n2\n")
    r = cli(
        "pack",
        "--lengths",
        "-",
        "--capacity",
        8,
        "--images",
        images,
        "--max-images",
        2,
        input="1\n2\n3\n",
    )
    assert r.returncode == 2 and "--images: has 2 entries but --lengths has 3" in r.stderr


def test_packed_collator_options_are_checked_by_the_core_at_construction():
    with pytest.raises(ValueError, match=r"^seq_len: must be at least 1, got 0"):
        shardkit.PackedCollator(0)
    with pytest.raises(ValueError, match=r"^padding_side: unknown side 'middle'"):
        shardkit.PackedCollator(4, padding_side="middle")
