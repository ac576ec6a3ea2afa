"""`shardkit multimodal-stats`: every number of the report recomputed here from
the plan's rows and the sample table (numpy), the round-robin deal from its
definition (docs/multimodal.md), the picture parsed back, tar shards' tables
from the images Pillow wrote, and bad input refused with one line."""

import io
import json
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from conftest import cli_path
from shardkit.multimodal import MultimodalPlan, qwen_vision_tokens, tile_vision_tokens


def _table(seed, n):
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 7, n)
    vision = [(rng.integers(1, 14, c) * 64).tolist() for c in counts]
    lengths = rng.integers(20, 301, n) + 64 * counts
    lengths[rng.integers(0, n, 3)] = 5000  # oversize: dropped
    return lengths.tolist(), vision


def _ratios(cells, filler):
    """Per step heaviest / mean (1 when the mean is 0); mean and max over the
    steps without filler rows."""
    mean = cells.mean(axis=1)
    per = np.where(mean > 0, cells.max(axis=1) / np.where(mean > 0, mean, 1), 1.0)
    full = per[~filler]
    return per, (full.mean() if len(full) else 1.0), (full.max() if len(full) else 1.0)


def _expected(plan, lengths, vision, world, rows, squared, seq_len):
    """(plan deal, round-robin deal): per step per rank tokens, images, vision
    cost, and the filler flags, from rows / row_packs and the table alone."""
    steps = plan.num_steps
    pack_samples = {}
    slots = np.full((steps, world, rows), -1)
    for s in range(steps):
        for r in range(world):
            for k, (p, row) in enumerate(zip(plan.row_packs(r, s), plan.rows(r, s))):
                slots[s, r, k] = p
                if p >= 0:
                    pack_samples[p] = row
    packs = sorted(pack_samples)
    robin = np.full_like(slots, -1)
    g = world * rows
    for j, p in enumerate(packs):
        robin[j // g, j % world, (j % g) // world] = p

    def cells(deal):
        tok, img, vis = (np.zeros((steps, world)) for _ in range(3))
        for (s, r, _), p in np.ndenumerate(deal):
            for x in pack_samples.get(int(p), []) if p >= 0 else []:
                tok[s, r] += lengths[x]
                img[s, r] += len(vision[x])
                vis[s, r] += sum(v * v if squared else v for v in vision[x])
        filler = (deal < 0).any(axis=(1, 2))
        pad = 1 - tok.sum() / (steps * g * seq_len) if steps else 0.0
        return tok, img, vis, filler, pad

    return cells(slots), cells(robin)


@pytest.mark.parametrize(
    "world,rows,cost,mode,shuffle",
    [
        (4, 1, "tokens", "pad", False),
        (8, 2, "squared", "pad", True),
        (3, 2, "tokens", "drop", True),
    ],
)
def test_report_matches_numbers_recomputed_from_the_plan(
    cli, tmp_path, world, rows, cost, mode, shuffle
):
    lengths, vision = _table(world + rows, 600)
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"lengths": lengths, "vision_tokens": vision}))
    svg = tmp_path / "pic" / "balance.svg"
    svg.parent.mkdir()
    flags = ["--seq-len", 1024, "--world", world, "--batch", rows, "--max-images", 18]
    flags += ["--vision-cost", cost, "--mode", mode, "--seed", 5, "--epoch", 1]
    flags += [] if shuffle else ["--no-shuffle"]
    r = cli("multimodal-stats", "--table", path, *flags, "--steps", "--svg", svg, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)

    counts = [len(v) for v in vision]
    flat = [x for v in vision for x in v]
    plan = MultimodalPlan(
        lengths, counts, flat, seq_len=1024, batch_size=rows, world_size=world, max_images=18,
        vision_cost=cost, mode=mode, shuffle=shuffle, seed=5, epoch=1,
    )  # fmt: skip
    over = [s for s in range(len(lengths)) if lengths[s] > 1024 or counts[s] > 18]
    assert out["dropped"] == len(over) == 3 and sorted(out["dropped_samples"]) == over
    assert out["num_steps"] == plan.num_steps and out["packs"] == plan.summary["packs"]
    assert out["samples"] == 600 and out["world"] == world and out["rows_per_rank"] == rows
    delivered = sorted(
        x
        for s in range(plan.num_steps)
        for r in range(world)
        for row in plan.rows(r, s)
        for x in row
    )
    assert len(delivered) == len(set(delivered))
    if mode == "pad":
        assert delivered == [s for s in range(600) if s not in over]
        assert out["images"] == sum(counts) - sum(counts[s] for s in over)
    after, before = _expected(plan, lengths, vision, world, rows, cost == "squared", 1024)
    for name, (tok, img, vis, filler, pad) in (("after", after), ("before", before)):
        got = out[name]
        steps = got["steps"]
        assert len(steps) == plan.num_steps
        assert [st["filler"] for st in steps] == filler.tolist()
        assert np.array([st["tokens"] for st in steps]).reshape(tok.shape).tolist() == tok.tolist()
        assert np.array([st["images"] for st in steps]).reshape(img.shape).tolist() == img.tolist()
        np.testing.assert_allclose(np.array([st["vision"] for st in steps]).reshape(vis.shape), vis)
        assert got["padding"] == pytest.approx(pad, abs=1e-12)
        for key, cells in (("tokens", tok), ("images", img), ("vision", vis)):
            per, mean, worst = _ratios(cells, filler)
            np.testing.assert_allclose(got[key]["per_step"], per, rtol=1e-12)
            assert got[key]["mean"] == pytest.approx(mean, rel=1e-12)
            assert got[key]["max"] == pytest.approx(worst, rel=1e-12)
    # The plan's own balance report agrees; balancing helped.
    assert out["after"]["vision"]["mean"] == pytest.approx(plan.balance["mean_vision_ratio"])
    assert out["after"]["vision"]["mean"] < out["before"]["vision"]["mean"]

    # The picture: one cell per step and rank in each panel, coloured by its
    # share of the step's mean; the file was replaced whole (no temporary left).
    root = ET.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    cells = [e for e in root.iter(ns + "rect") if e.get("class") == "cell"]
    assert len(cells) == 2 * plan.num_steps * world
    vis_after = after[2]
    last = cells[-1].find(ns + "title").text
    s, rk = plan.num_steps - 1, world - 1
    assert last.startswith(f"step {s}, rank {rk}: vision cost {vis_after[s, rk]:.6g}")
    assert [p.name for p in svg.parent.iterdir()] == ["balance.svg"]

    # Text and JSON are one report: the text's "after" line holds the same figures.
    t = cli("multimodal-stats", "--table", path, *flags)
    assert t.returncode == 0, t.stderr
    line = next(x for x in t.stdout.splitlines() if x.startswith("after (plan)"))
    a = out["after"]
    want = [100 * a["padding"], a["tokens"]["mean"], a["tokens"]["max"], a["images"]["mean"]]
    want += [a["images"]["max"], a["vision"]["mean"], a["vision"]["max"]]
    got = [float(x.rstrip("%")) for x in line.split()[2:]]
    np.testing.assert_allclose(got, want, atol=1e-3)


def _shard(path, samples):
    """A WebDataset tar: per sample its .ids (int32 tokens) and its images."""
    from PIL import Image

    with tarfile.open(path, "w") as tar:
        for i, (tokens, sizes) in enumerate(samples):
            members = [("ids", np.arange(tokens, dtype="<i4").tobytes())]
            for k, (h, w) in enumerate(sizes):
                buf = io.BytesIO()
                Image.new("RGB", (w, h), (k * 40, 90, 160)).save(buf, "PNG" if k % 2 else "JPEG")
                members.append((f"{k}.{'png' if k % 2 else 'jpg'}", buf.getvalue()))
            for ext, data in members:
                info = tarfile.TarInfo(f"s{i:04d}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_tar_shards_table_comes_from_the_images_written(cli, tmp_path):
    rng = np.random.default_rng(3)
    samples = [
        (int(rng.integers(5, 200)), [tuple(rng.integers(32, 900, 2)) for _ in range(c)])
        for c in rng.integers(0, 4, 30)
    ]
    paths = [tmp_path / "a.tar", tmp_path / "b.tar"]
    _shard(paths[0], samples[:17])
    _shard(paths[1], samples[17:])
    tar = ",".join(map(str, paths))
    flags = ["--seq-len", 4096, "--world", 2, "--no-shuffle", "--steps", "--json"]
    r = cli("multimodal-stats", "--tar", tar, "--vision-rule", "qwen", "--inline-vision", *flags)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    vision = [
        qwen_vision_tokens([h for h, _ in s], [w for _, w in s]).tolist() if s else []
        for _, s in samples
    ]
    lengths = [t + sum(v) for (t, _), v in zip(samples, vision)]
    assert out["samples"] == 30 and out["images"] == sum(len(s) for _, s in samples)
    assert out["tokens"] == sum(lengths) and out["dropped"] == 0
    # The same report from the JSON table of the same samples.
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"lengths": lengths, "vision_tokens": vision}))
    j = cli("multimodal-stats", "--table", table, *flags)
    assert j.returncode == 0, j.stderr
    same = json.loads(j.stdout)
    for key in ("before", "after", "packs", "num_steps", "tokens", "images", "fingerprint"):
        assert same[key] == out[key], key
    # The index is cached beside each shard and read back.
    assert all((p.parent / (p.name + ".shardkit-index.json")).exists() for p in paths)
    again = cli(
        "multimodal-stats", "--tar", tar, "--vision-rule", "qwen", "--inline-vision", *flags
    )
    assert json.loads(again.stdout) == out


@pytest.mark.parametrize(
    "args,message",
    [
        (["--seq-len", 8], "--table: give the sample table"),
        (["--table", "T", "--seq-len", 0], "--seq-len: must be at least 1, got 0"),
        (["--table", "T", "--seq-len", 8, "--world", 0], "--world: must be at least 1, got 0"),
        (["--table", "T", "--seq-len", 8, "--batch", -1], "--batch: must be at least 1, got -1"),
        (["--table", "T", "--seq-len", 8, "--world", 2**62], "--world: "),
        (["--table", "T", "--seq-len", 8, "--world", 2**22, "--batch", 8], "--batch: 8 rows per"),
        (["--table", "T", "--seq-len", 8, "--vision-cost", "cube"], "--vision-cost: expected"),
        (["--table", "T", "--seq-len", 8, "--mode", "x"], "--mode: expected 'pad' or 'drop'"),
        (["--table", "T", "--seq-len", 8, "--max-images", -2], "--max-images: must be at least"),
        (["--table", "T", "--seq-len", 8, "--vision-rule", "qwen"], "--vision-rule: only with"),
        (["--table", "missing.json", "--seq-len", 8], "--table: cannot open 'missing.json'"),
        (["--table", "BAD", "--seq-len", 8], "--table: not valid JSON"),
        (["--table", "NEG", "--seq-len", 8], "--table: lengths: sample 1 is negative (-4)"),
        (["--table", "SHORT", "--seq-len", 8], "--table: vision_tokens has 1 samples, lengths 2"),
        (["--table", "T", "--seq-len", 8, "--svg", "/nonexistent/dir/x.svg"], "--svg: cannot"),
        (["--tar", "nope.tar", "--seq-len", 8], "--tar: "),
        (["--tar", "T", "--seq-len", 8, "--vision-rule", "big"], "--vision-rule: expected 'one'"),
    ],
)
def test_bad_input_is_refused_with_one_line(cli, tmp_path, args, message):
    files = {
        "T": {"lengths": [3, 4], "vision_tokens": [[1], []]},
        "NEG": {"lengths": [3, -4]},
        "SHORT": {"lengths": [3, 4], "vision_tokens": [[1]]},
    }
    for name, table in files.items():
        (tmp_path / name).write_text(json.dumps(table))
    (tmp_path / "BAD").write_text('{"lengths": [1,')
    args = [str(tmp_path / a) if a in (*files, "BAD") else a for a in args]
    r = cli("multimodal-stats", *args)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardkit multimodal-stats: " + message), lines


def test_demo_pictures_vision_work_before_and_after(cli, tmp_path):
    report = tmp_path / "demo.html"
    out = cli("demo", "--out", report, "--json")
    assert out.returncode == 0, out.stderr
    mm = json.loads(out.stdout)["multimodal"]
    html = report.read_text()
    section = html[html.index("<h2>Image-text samples") :]
    svg = section[section.index("<svg") : section.index("</svg>") + 6]
    cells = ET.fromstring(svg).findall(".//{http://www.w3.org/2000/svg}rect[@class='cell']")
    assert len(cells) == 2 * mm["steps"] * 8
    assert mm["vision_after"]["mean"] < 1.05 < mm["vision_before"]["mean"]
    assert mm["padding"] < 0.02


def _image_table(*args):
    """`shardkit image-table ...` with this interpreter as its Python."""
    env = dict(os.environ, SHARDKIT_PYTHON=sys.executable)
    return subprocess.run(
        [cli_path(), "image-table", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_image_table_of_tar_shards_is_the_table_of_the_images_written(cli, tmp_path):
    rng = np.random.default_rng(4)
    samples = [
        (int(rng.integers(5, 200)), [tuple(rng.integers(32, 1300, 2)) for _ in range(c)])
        for c in rng.integers(0, 4, 12)
    ]
    _shard(tmp_path / "a.tar", samples)
    out = tmp_path / "t" / "table.json"
    out.parent.mkdir()
    r = _image_table("--tar", tmp_path / "a.tar", "--vision-rule", "tile", "--inline-vision",
                     "--output", out, "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    vision = [tile_vision_tokens([h for h, _ in s], [w for _, w in s]).tolist() for _, s in samples]
    lengths = [t + sum(v) for (t, _), v in zip(samples, vision)]
    assert json.loads(out.read_text()) == {"lengths": lengths, "vision_tokens": vision}
    summary = json.loads(r.stdout)
    assert summary["samples"] == 12 and summary["tokens"] == sum(lengths)
    assert [p.name for p in out.parent.iterdir()] == ["table.json"]
    # multimodal-stats reads it as the tar shards themselves.
    flags = ["--seq-len", 4096, "--world", 2, "--json"]
    a = cli("multimodal-stats", "--table", out, *flags)
    b = cli("multimodal-stats", "--tar", tmp_path / "a.tar", "--vision-rule", "tile",
            "--inline-vision", *flags)  # fmt: skip
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert json.loads(a.stdout)["after"] == json.loads(b.stdout)["after"]


def test_image_table_of_a_datasets_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    from PIL import Image

    rng = np.random.default_rng(5)
    rows = {"input_ids": [], "images": []}
    sizes = []
    for i in range(10):
        n = int(rng.integers(0, 3))
        shape = [tuple(int(x) for x in rng.integers(40, 700, 2)) for _ in range(n)]
        sizes.append(shape)
        rows["input_ids"].append(list(range(int(rng.integers(3, 50)))))
        rows["images"].append([Image.new("RGB", (w, h), (i, 0, 0)) for h, w in shape])
    features = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "images": datasets.Sequence(datasets.Image()),
        }
    )
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "ds"))
    out = tmp_path / "table.json"
    r = _image_table("--hf", tmp_path / "ds", "--vision-rule", "qwen", "--output", out)
    assert r.returncode == 0, r.stderr
    vision = [qwen_vision_tokens([h for h, _ in s], [w for _, w in s]).tolist() for s in sizes]
    lengths = [len(x) for x in rows["input_ids"]]
    assert json.loads(out.read_text()) == {"lengths": lengths, "vision_tokens": vision}
    assert r.stdout.startswith(f"{tmp_path / 'ds'}: 10 samples, {sum(map(len, sizes))} images")
    # The image sizes were cached beside the Arrow files; a second run reads
    # them and writes the same table.
    assert len(list((tmp_path / "ds").glob("shardkit-image-table-*.json"))) == 1
    first = out.read_text()
    r = _image_table("--hf", tmp_path / "ds", "--vision-rule", "qwen", "--output", out)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == first


@pytest.mark.parametrize(
    "args,message",
    [
        (["--output", "x.json"], "one of the arguments --tar --hf is required"),
        (["--tar", "nope.tar", "--output", "x.json"], "--tar: "),
        (["--tar", "a.tar,", "--output", "x.json"], "--tar: an empty path"),
        (["--hf", "nope", "--output", "x.json"], "--hf: "),
        (["--tar", "a.tar", "--vision-rule", "big", "--output", "x.json"], "--vision-rule: "),
    ],
)
def test_image_table_refuses_bad_input_with_one_line(tmp_path, args, message):
    r = _image_table(*args)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardkit image-table: " + message), lines


def test_loader_bench_sides_deliver_the_same_samples_under_the_same_budgets(torch):
    """bench/multimodal_loader.py: the nanoVLM transcription delivers its rank's
    strided share exactly once, each pack within 1024 tokens and 18 images (its
    budgets), and shardkit's side the rank's rows of the plan; both counted the
    way the bench prints them."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import multimodal_loader as ml

    samples, lengths, vision = ml.samples_of()
    samples, lengths, vision = samples[:300], lengths[:300], vision[:300]
    ds = ml.NanoVLMConstantLengthDataset(
        samples, 1, 4, max_images_per_example=6, max_images_per_knapsack=18
    )
    seen = []
    for pack in ds:
        assert len(pack["input_ids"]) <= 1024 and len(pack["images"]) <= 18
        seen.append(int(pack["input_ids"].sum()))
    share = range(1, 300, 4)
    # Each sample's ids are 1..n: the packs hold every share sample's tokens once.
    assert sum(seen) == sum(int(lengths[i]) * (int(lengths[i]) + 1) // 2 for i in share)
    out = ml.run_shardkit(samples, lengths, vision)
    plan = MultimodalPlan(
        lengths,
        [len(v) for v in vision],
        [x for v in vision for x in v],
        seq_len=1024,
        batch_size=8,
        world_size=4,
        max_images=18,
        max_images_per_sample=6,
    )
    mine = [x for s in range(plan.num_steps) for row in plan.rows(0, s) for x in row]
    assert out["samples"] == len(mine) and out["batches"] == plan.num_steps
    assert out["tokens"] == sum(int(lengths[x]) for x in mine)
