"""Context parallelism through the Python surface: TrainPlan(cp_size=...),
TokenLoader(cp_size=, cp_rank=) slices against the loader without CP on the
same plan (the peer: cp_size=1 with the same cp_granularity delivers the
unsplit rows), DataRoles(cp_axes=), the rank-work statistic, errors, and the
torchrun exactness test (cp_attention_torchrun_worker.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tiling import lognormal_lengths, offsets_of

import shardkit

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(11)
    lengths = lognormal_lengths(rng, 60, 1.0, 300)
    lengths[::41] = 0
    lengths[5] = 700  # split into pieces
    offsets = offsets_of(lengths)
    tokens = (np.arange(offsets[-1]) * 7 % 50000).astype(np.int32)
    return tokens, offsets, lengths


def loader(corpus, **kw):
    tokens, offsets, _ = corpus
    kw.setdefault("num_threads", 0)
    return shardkit.TokenLoader(tokens, offsets, batch_size=2, seed=5, **kw)


def check_balanced_metadata(slices, step, full, seq_len, cp, g):
    """cp_strategy="balanced" (the exact layout is pinned against its
    definition in context_parallel_test.cc): per row, cu_seqlens_padded cut
    the row's seq_len slots and each rank's local cu_seqlens its width; every
    local sequence holds the tokens of at most one document, positions
    increasing; a document held by one rank in a
    local sequence of exactly its length with no padding is whole (a split
    one has P / C >= 2 slots per token held there). Returns the rows with a
    whole document."""
    width = seq_len // cp
    whole_rows = set()
    for r in range(cp):
        part = slices[r][step]
        cu, cup = part["cu_seqlens"].tolist(), part["cu_seqlens_padded"].tolist()
        assert cu[0] == 0 and cup[0] == 0
        assert all(a < b for a, b in zip(cu, cu[1:])) and all(a < b for a, b in zip(cup, cup[1:]))
        assert cup[-1] == 2 * seq_len and cu[-1] == 2 * width
        assert {b * width for b in range(3)} <= set(cu)
        assert {b * seq_len for b in range(3)} <= set(cup)
        docs, pos = part["document_ids"].reshape(-1), part["position_ids"].reshape(-1)
        for a, b in zip(cu, cu[1:]):
            real = docs[a:b] >= 0
            if not real.any():
                continue
            n = int(real.sum())
            assert len(set(docs[a:b][real].tolist())) == 1
            assert (np.diff(pos[a:b][real]) > 0).all()  # a head chunk, then a tail chunk
            row, d = a // width, int(docs[a])
            length = int(
                full["lengths"][full["rows"] == row][full["lengths"][full["rows"] == row] > 0][d]
            )
            if n == b - a == length:
                whole_rows.add(row)
    return len(whole_rows)


@pytest.mark.parametrize("strategy", ["head_tail", "balanced", "ptrr"])
@pytest.mark.parametrize("cp, granularity", [(2, None), (3, None), (4, 16), (8, None)])
def test_cp_slices_are_the_unsplit_rows_at_cp_index_every_token_once(
    corpus, cp, granularity, strategy
):
    seq_len = 48 * cp
    g = granularity or 2 * cp
    kw = dict(seq_len=seq_len, rank=1, world_size=2)
    full_rows = list(loader(corpus, cp_granularity=g, **kw))
    slices = [
        list(
            loader(
                corpus,
                cp_size=cp,
                cp_rank=r,
                cp_granularity=granularity,
                cp_strategy=strategy,
                **kw,
            )
        )
        for r in range(cp)
    ]
    whole_rows = 0
    assert all(len(s) == len(full_rows) for s in slices)
    for step, full in enumerate(full_rows):
        seen = np.zeros(full["input_ids"].shape, dtype=np.int64)
        for r in range(cp):
            part = slices[r][step]
            assert part["input_ids"].shape == (2, seq_len // cp)
            np.testing.assert_array_equal(part["documents"], full["documents"])  # same rows
            idx = part["cp_index"]
            for b in range(2):
                real = idx[b] >= 0
                at = idx[b][real]
                seen[b, at] += 1
                for key in ("input_ids", "labels", "position_ids", "document_ids"):
                    np.testing.assert_array_equal(part[key][b][real], full[key][b][at])
                assert (part["labels"][b][~real] == -100).all()
                assert (part["document_ids"][b][~real] == -1).all()
            assert part["row_tokens"].sum() == (idx >= 0).sum()
            if strategy != "head_tail":
                continue  # its metadata: checked below
            # cu_seqlens_padded, from the rows' pieces rounded up independently.
            expect = [0]
            for b in range(2):
                lens = part["lengths"][part["rows"] == b]
                for n in lens[lens > 0]:
                    expect.append(expect[-1] + -(-int(n) // g) * g)
                if expect[-1] < (b + 1) * seq_len:
                    expect.append((b + 1) * seq_len)
            np.testing.assert_array_equal(part["cu_seqlens_padded"], expect)
            np.testing.assert_array_equal(part["cu_seqlens"], np.asarray(expect) // cp)
        real_full = full["document_ids"] >= 0
        assert (seen[real_full] == 1).all() and (seen[~real_full] == 0).all()
        if strategy != "head_tail":
            whole_rows += check_balanced_metadata(slices, step, full, seq_len, cp, g)
        # The restore index gives the unsplit rows back from the slices.
        width = seq_len // cp
        for b in range(2):
            lens = full["lengths"][full["rows"] == b].tolist()
            restore = shardkit.cp_restore_index(
                lens, seq_len, cp, cp_granularity=granularity, cp_strategy=strategy
            )
            flat = np.concatenate([slices[r][step]["input_ids"][b] for r in range(cp)])
            real = restore >= 0
            np.testing.assert_array_equal(flat[restore[real]], full["input_ids"][b][real])
            assert real.sum() == sum(lens) and width * cp == seq_len
    if strategy == "balanced" and cp > 2:
        assert whole_rows > 0  # the strategy kept documents whole in some rows


def test_cp_batches_are_the_same_for_any_thread_count(corpus):
    def run(**kw):
        batches = loader(corpus, seq_len=96, cp_size=4, cp_rank=2, **kw)
        return [{k: np.array(v) for k, v in b.items()} for b in batches]

    inline, threaded = run(), run(num_threads=2, prefetch=3)
    assert len(inline) == len(threaded) > 0
    for x, y in zip(inline, threaded):
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=key)


def test_cp_plan_rows_fit_with_padding_and_the_default_plan_is_unchanged(corpus):
    _, _, lengths = corpus
    plan = shardkit.TrainPlan(lengths, seq_len=64, batch_size=2, world_size=3, cp_size=4)
    assert plan.audit().exactly_once
    for s in range(plan.num_steps):
        for r in range(3):
            for row in plan.step(r, s):
                assert sum(-(-n // 8) * 8 for _, _, n in row) <= 64
    # cp_size=1 without a granularity is the plan without CP, state for state.
    a = shardkit.TrainPlan(lengths, seq_len=64, batch_size=2, world_size=3)
    b = shardkit.TrainPlan(lengths, seq_len=64, batch_size=2, world_size=3, cp_size=1)
    assert a.state_dict(1) == b.state_dict(1)
    assert [a.step(0, s) for s in range(a.num_steps)] == [b.step(0, s) for s in range(b.num_steps)]


def test_resume_with_another_cp_size_under_one_granularity(corpus):
    kw = dict(seq_len=128, rank=0, world_size=1, cp_granularity=16)
    first = loader(corpus, cp_size=2, cp_rank=1, **kw)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    rest = loader(corpus, cp_size=4, cp_rank=0, **kw)
    rest.load_state_dict(state)
    expect = list(loader(corpus, cp_size=4, cp_rank=0, **kw))[3:]
    got = list(rest)
    assert len(got) == len(expect) > 0
    for x, y in zip(got, expect):
        np.testing.assert_array_equal(x["input_ids"], y["input_ids"])
    other = loader(corpus, cp_size=2, cp_rank=0, seq_len=128, cp_granularity=32)
    with pytest.raises(ValueError, match="^state: "):
        other.load_state_dict(state)


def test_roles_with_cp_axes_feed_the_loader(corpus):
    roles = shardkit.DataRoles({"dp": 2, "cp": 2, "tp": 2}, "dp", rank=6, cp_axes="cp")
    assert (roles.dp_rank, roles.dp_size, roles.cp_rank, roles.cp_size) == (1, 2, 1, 2)
    assert roles.replica_group == [6, 7]
    a = next(iter(loader(corpus, seq_len=64, roles=roles)))
    b = next(iter(loader(corpus, seq_len=64, rank=1, world_size=2, cp_size=2, cp_rank=1)))
    np.testing.assert_array_equal(a["cp_index"], b["cp_index"])
    np.testing.assert_array_equal(a["input_ids"], b["input_ids"])


def test_torch_dataloader_delivers_the_cp_slice_from_roles(corpus):
    pytest.importorskip("torch")
    from shardkit.torch import TokenDataLoader, TokenDataset

    tokens, offsets, _ = corpus
    roles = shardkit.DataRoles({"dp": 2, "cp": 2}, "dp", rank=3, cp_axes="cp")
    ds = TokenDataset(tokens, offsets, seq_len=64, batch_size=2, roles=roles, num_threads=0, seed=5)
    got = next(iter(TokenDataLoader(ds, num_workers=0)))
    ref = next(iter(loader(corpus, seq_len=64, rank=1, world_size=2, cp_size=2, cp_rank=1)))
    for key in ("input_ids", "cp_index", "cu_seqlens_padded", "cu_seqlens"):
        np.testing.assert_array_equal(got[key].numpy(), ref[key])


def test_rank_work_per_document_head_tail_is_balanced():
    # One document filling a row of 64 over 2 ranks: the contiguous split gives
    # the second rank the later (costlier) half; per-document head-tail evens it.
    assert shardkit.cp_rank_work([64], 64, 2, "contiguous") == [528.0, 1552.0]
    assert shardkit.cp_rank_work([64], 64, 2, "head_tail") == [1040.0, 1040.0]
    # Two documents: the document-blind head-tail split gives rank 1 the middle
    # of the long one; per document, each rank holds a head and a tail of each.
    assert shardkit.cp_rank_work([48, 16], 64, 2, "head_tail") == [272.0, 1040.0]
    assert shardkit.cp_rank_work([48, 16], 64, 2) == [656.0, 656.0]


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(seq_len=60, cp_size=4), "^seq_len: 60"),
        (dict(seq_len=64, cp_size=4, cp_rank=4), "^cp_rank: 4"),
        (dict(seq_len=64, cp_size=2, cp_granularity=6), "^cp_granularity: 6"),
        (dict(seq_len=64, cp_size=0), "^cp_size: "),
        (dict(seq_len=64, cp_size=2, equal_steps=False), "^cp_size: 2"),
        (dict(seq_len=64, cp_size=2, block_mask=True), "^block_mask: "),
        (dict(seq_len=64, cp_size=2, padding_side="left"), "^padding_side: "),
        (dict(seq_len=64, cp_size=2, cp_strategy="ring"), "^cp_strategy: .*ring"),
    ],
)
def test_bad_cp_options_name_the_parameter(corpus, kw, message):
    with pytest.raises(ValueError, match=message):
        loader(corpus, **kw)


def test_bad_rank_work_and_plan_options_name_the_parameter():
    with pytest.raises(ValueError, match="^lengths: "):
        shardkit.cp_rank_work([33, 30], 64, 2)  # 36 + 32 > 64 once padded
    with pytest.raises(ValueError, match="^cp_split: "):
        shardkit.cp_rank_work([8], 64, 2, "ring")
    with pytest.raises(ValueError, match="^cp_strategy: "):
        shardkit.TrainPlan(
            [5, 6], seq_len=64, batch_size=1, world_size=1, cp_size=2, cp_strategy="ring"
        )


def test_cli_loader_stats_cp_reports_the_work_of_the_cp_plans_rows(cli, corpus, tmp_path):
    tokens, offsets, lengths = corpus
    np.save(tmp_path / "t.npy", tokens)
    np.save(tmp_path / "o.npy", offsets)
    base = ["loader-stats", "--tokens", tmp_path / "t.npy", "--offsets", tmp_path / "o.npy"]
    base += ["--seq-len", 96, "--batch", 2, "--world", 2, "--seed", 5, "--quiet"]
    out = cli(*base, "--cp", 4, "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["complete"]  # the unsplit rows still deliver every token once
    # The same rows from TrainPlan(cp_size=4), split by hand.
    plan = shardkit.TrainPlan(lengths, seq_len=96, batch_size=2, world_size=2, seed=5, cp_size=4)
    ratios = {s: [] for s in ("contiguous", "head_tail", "document_head_tail", "balanced", "ptrr")}
    padding = balanced_padding = 0
    for step in range(plan.num_steps):
        for rank in range(2):
            for row in plan.step(rank, step):
                lens = [n for _, _, n in row]
                if sum(lens) == 0:
                    continue
                padding += sum(-(-n // 8) * 8 - n for n in lens)
                balanced_padding += shardkit.cp_document_padding(
                    lens, 96, 4, cp_strategy="balanced"
                )
                for split in ratios:
                    w = shardkit.cp_rank_work(lens, 96, 4, split)
                    ratios[split].append(max(w) / (sum(w) / 4))
    cp = report["cp"]
    assert (cp["cp_size"], cp["granularity"], cp["padding"]) == (4, 8, padding)
    assert cp["balanced_padding"] == balanced_padding < padding
    assert cp["rows"] == len(ratios["contiguous"])
    for split, values in ratios.items():
        assert cp["splits"][split]["mean_max_over_mean"] == pytest.approx(np.mean(values))
        assert cp["splits"][split]["worst_max_over_mean"] == pytest.approx(max(values))
    bad = cli(*base, "--cp", 4, "--cp-granularity", 12)
    assert bad.returncode != 0
    assert (
        bad.stderr.strip()
        .splitlines()[-1]
        .endswith("--cp-granularity: 12 is not a positive multiple of 2 x cp_size = 8")
    )


def test_docs_example_runs():
    """The >>> example of docs/context_parallel.md, run as a doctest."""
    import doctest

    text = (HERE.parents[1] / "docs" / "context_parallel.md").read_text()
    blocks = [b[: b.index("```")] for b in text.split("```python\n")[1:]]
    (block,) = [b for b in blocks if b.startswith(">>>")]
    test = doctest.DocTestParser().get_doctest(block, {}, "context_parallel.md", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_cp_attention_under_torchrun_equals_full_attention(tmp_path):
    pytest.importorskip("torch")
    from torchrun_launch import finish, launch

    rng = np.random.default_rng(2)
    lengths = lognormal_lengths(rng, 30, 0.9, 120)
    offsets = offsets_of(lengths)
    np.save(tmp_path / "tokens.npy", (np.arange(offsets[-1]) % 997).astype(np.int32))
    np.save(tmp_path / "offsets.npy", offsets)

    def start():
        return launch("cp_attention_torchrun_worker.py", 4, tmp_path)

    finish(start(), 240, start)
    for rank in range(4):
        report = json.loads((tmp_path / f"cp-{rank}.json").read_text())
        for layout, r in report.items():
            assert r["batches"] > 0 and r["tokens"] > 0, layout
            assert r["max_abs_diff"] < 1e-12, (layout, r)
            if layout.startswith("balanced"):
                assert r["batches_with_whole_documents"] > 0, (layout, r)


def test_demo_context_parallel_section_matches_the_plan_split_by_hand(cli, tmp_path):
    out = cli("demo", "--out", tmp_path / "demo.html", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)["context_parallel"]
    lines = (HERE.parents[1] / "data" / "python_stdlib.tsv").read_text().splitlines()
    lengths = [int(line.split("\t")[1]) for line in lines[2:] if line]
    S, C = report["seq_len"], report["cp_size"]
    assert (S, C) == (16384, 8)
    plan = shardkit.TrainPlan(lengths, seq_len=S, batch_size=1, world_size=4, cp_size=C)
    splits = ("contiguous", "head_tail", "document_head_tail", "balanced", "ptrr")
    ratios = {s: [] for s in splits}
    padding = {"document_head_tail": 0, "balanced": 0}
    for step in range(plan.num_steps):
        for rank in range(4):
            for row in plan.step(rank, step):
                lens = [n for _, _, n in row if n > 0]
                if not lens:
                    continue
                for split in splits:
                    w = shardkit.cp_rank_work(lens, S, C, split)
                    ratios[split].append(max(w) / (sum(w) / C))
                padding["document_head_tail"] += shardkit.cp_document_padding(lens, S, C)
                padding["balanced"] += shardkit.cp_document_padding(
                    lens, S, C, cp_strategy="balanced"
                )
    assert report["rows"] == len(ratios["contiguous"])
    for split in splits:
        got = report["splits"][split]
        assert got["mean_max_over_mean"] == pytest.approx(np.mean(ratios[split]))
        assert got["worst_max_over_mean"] == pytest.approx(max(ratios[split]))
        assert got["padding"] == padding.get(split, 0)
    # The balanced strategy is what the demo shows it to be: better at worst.
    assert max(ratios["balanced"]) < max(ratios["document_head_tail"])
    html = (tmp_path / "demo.html").read_text()
    section = html[html.index("<h2>Context parallelism") :]
    assert section.count("<svg") >= 2 and "CP rank 7" in section


def test_jax_token_batches_put_each_cp_slice_on_its_cp_device():
    pytest.importorskip("jax")
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(HERE.parent),
    )
    out = subprocess.run(
        [sys.executable, str(HERE / "workers" / "token_batches_cp_jax_single.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    checked = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(checked) == {"head_tail-dp2xcp4", "balanced-dp1xcp8", "balanced-dp4xcp2"}
    assert all(steps > 0 for steps in checked.values())


def test_balanced_strategy_changes_the_layout_not_the_plan(corpus):
    _, _, lengths = corpus
    kw = dict(seq_len=96, batch_size=2, world_size=3, cp_size=4, seed=7)

    def rows(plan):
        return [plan.step(r, s) for s in range(plan.num_steps) for r in range(3)]

    # cost="tokens": the same rows on the same ranks (the layout is decided per row at collation).
    head_tail = shardkit.TrainPlan(lengths, **kw)
    balanced = shardkit.TrainPlan(lengths, cp_strategy="balanced", **kw)
    assert rows(balanced) == rows(head_tail)
    # cost="squared": the same packs, dealt by the balanced layout's busiest CP rank; every
    # document still once, every row fits with its split documents padded.
    squared = shardkit.TrainPlan(lengths, cp_strategy="balanced", cost="squared", **kw)
    audit = squared.audit()
    assert audit.exactly_once
    packs = sorted(tuple(row) for step in rows(squared) for row in step if row)
    assert packs == sorted(tuple(row) for step in rows(head_tail) for row in step if row)
    for step in rows(squared):
        for row in step:
            lens = [n for _, _, n in row if n > 0]
            if lens:
                assert shardkit.cp_document_padding(lens, 96, 4, cp_strategy="balanced") <= (
                    shardkit.cp_document_padding(lens, 96, 4)
                )
                w = shardkit.cp_rank_work(lens, 96, 4, "balanced")
                h = shardkit.cp_rank_work(lens, 96, 4)
                assert max(w) <= max(h) and sum(w) == sum(h)
