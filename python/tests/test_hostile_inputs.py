"""Hostile-but-plausible inputs to the newest features, judged by what is delivered.

Each sweep draws a few dozen to a few hundred seeded cases: edited, bit-flipped,
truncated, swapped or replayed files and states, values at the edges (0, 1, huge,
negative, NaN, 2^63-1). An input that is refused must be one line naming the value
(CLI: non-zero exit, no traceback); an input that is accepted must deliver what the
oracle says: the same loader without the feature (share_plan), Pillow (image
tables, pixels), numpy slicing of the token file (OLMo), `source_of` one sample at a
time (Mixture.numpy), the full row put back from every CP rank's slice (cp_strategy).
"""

import gzip
import json
import math
import os
import random

import numpy as np
import pytest
from sealing import reseal
from test_loader import make_data
from test_share_plan import pieces_of
from tiling import batch_fields

import shardkit

EDGES = [0, 1, -1, 2, 7, 2**31, 2**62, 2**63 - 1, -(2**63), 10**30]


def one_line(error: BaseException, *names: str) -> None:
    """A refusal: one line that names one of `names` (the parameter or its value)."""
    text = str(error)
    assert "\n" not in text.strip(), text
    assert any(n in text for n in names), (names, text)


# ---- Mixture.numpy(start, stop, out=) ------------------------------------------


def test_mixture_numpy_with_edge_ranges_and_hostile_out_buffers():
    """Accepted: the arrays equal source_of(i) for every i and `out` is the array
    written; refused: ValueError/IndexError naming start, stop or out, and `out`
    untouched."""
    rng = random.Random(101)
    for case in range(300):
        k = rng.randint(1, 4)
        sizes = [rng.choice([1, 2, 5, 37]) for _ in range(k)]
        weights = [rng.choice([0.0, 1.0, 0.3, 5.0]) for _ in range(k)]
        if not any(weights):
            weights[0] = 1.0
        repeat = rng.random() < 0.7
        mix = shardkit.Mixture(sizes, weights, seed=case, repeat=repeat)
        base = rng.choice([0, 1, 5, 100, 2**40])
        start = rng.choice([base, base + rng.randint(0, 9), rng.choice(EDGES)])
        stop = rng.choice([start, start + rng.randint(0, 40), start - 1, rng.choice(EDGES)])
        n = stop - start if isinstance(stop, int) and isinstance(start, int) else 0
        shape = max(0, min(n, 64))
        kind = rng.choice(["none", "ok", "dtype", "short", "long", "strided", "readonly", "2d"])
        out = None
        if kind != "none":
            a = np.full(shape, -7, np.int64)
            b = np.full(shape, -7, np.int64)
            if kind == "dtype":
                a = a.astype(rng.choice([np.int32, np.float64, np.uint64]))
            elif kind == "short" and shape:
                a = a[:-1]
            elif kind == "long":
                b = np.full(shape + 1, -7, np.int64)
            elif kind == "strided":
                a = np.full(2 * shape, -7, np.int64)[::2]
            elif kind == "readonly":
                b.flags.writeable = False
            elif kind == "2d":
                a = a.reshape(1, shape)
            out = (a, b)
            before = (a.copy(), b.copy())
        label = (case, sizes, weights, repeat, start, stop, kind)
        try:
            got = mix.numpy(start, stop) if out is None else mix.numpy(start, stop, out=out)
        except (ValueError, IndexError, OverflowError, TypeError) as e:
            one_line(e, "start", "stop", "out", "position", str(start), str(stop))
            if out is not None:
                assert all((x == y).all() for x, y in zip(out, before)), label
            continue
        if n > 64 and out is None:
            continue  # accepted a large range: checked on its head below
        sources, items = got
        assert sources.dtype == items.dtype == np.int64, label
        assert len(sources) == len(items) == max(n, 0), label
        if out is not None:
            assert sources is out[0] and items is out[1], label
            # An empty range writes nothing: any empty int64 pair may take it.
            assert kind == "ok" or (shape == 0 and kind != "dtype"), label
        for j, i in enumerate(range(start, stop)):
            assert (int(sources[j]), int(items[j])) == tuple(mix.source_of(i)), (label, j)


# ---- share_plan: the host's plan file edited, cut, swapped, replayed ------------


def test_share_plan_file_mutations_never_change_what_a_rank_delivers(tmp_path, monkeypatch):
    """Local rank 0 writes the plan; the file is then bit-flipped, truncated,
    extended, zeroed, replaced by another configuration's plan or another data set's,
    before the reader on another local rank opens it or after (in place, the mapped
    file changed between open and read); the reader delivers exactly what the same
    rank delivers without share_plan, or refuses in one line naming share_plan."""
    monkeypatch.setenv("SHARDKIT_SHARE_PLAN_TIMEOUT", "5")
    rng = random.Random(202)
    datasets = [make_data(random.Random(220 + i), 120, 200) for i in range(2)]
    plain_cache = {}
    for case in range(150):
        share = tmp_path / f"shm{case}"
        share.mkdir()
        monkeypatch.setenv("SHARDKIT_SHARE_PLAN_DIR", str(share))
        tokens, offsets = datasets[0]
        world = rng.choice([2, 3])
        kw = dict(seq_len=64, batch_size=2, world_size=world, seed=case % 3, num_threads=0)
        kw["mode"] = rng.choice(["pad", "drop", "continuous"])
        builder = shardkit.TokenLoader(tokens, offsets, rank=0, share_plan=True, local_rank=0, **kw)
        (path,) = [p for p in share.iterdir() if not p.name.startswith(".")]
        data = bytearray(path.read_bytes())
        op = rng.choice(["flip", "flip", "cut", "extend", "zero", "other", "dataset", "none"])
        when = rng.choice(["before", "after"])
        if op == "flip":
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif op == "cut":
            data = data[: rng.randrange(len(data))]
        elif op == "extend":
            data += bytes(rng.randint(1, 64))
        elif op == "zero":
            i = rng.randrange(len(data))
            data[i : i + 8] = bytes(len(data[i : i + 8]))
        elif op in ("other", "dataset"):
            # Another plan's file (another seed, or another data set of the same
            # shape) under this plan's name.
            other = tmp_path / f"other{case}"
            other.mkdir()
            monkeypatch.setenv("SHARDKIT_SHARE_PLAN_DIR", str(other))
            okw = dict(kw, seed=kw["seed"] + 1) if op == "other" else kw
            t2, o2 = datasets[1] if op == "dataset" else (tokens, offsets)
            b2 = shardkit.TokenLoader(t2, o2, rank=0, share_plan=True, local_rank=0, **okw)
            (p2,) = [p for p in other.iterdir() if not p.name.startswith(".")]
            data = bytearray(p2.read_bytes())
            del b2
            monkeypatch.setenv("SHARDKIT_SHARE_PLAN_DIR", str(share))
        rank = rng.randrange(1, world)
        label = (case, op, when, world, kw["mode"], rank)

        def edit():
            with open(path, "r+b") as f:  # in place: the same file, mapped or not
                f.write(bytes(data))
                f.truncate(len(data))

        try:
            if when == "before":
                edit()
            reader = shardkit.TokenLoader(
                tokens, offsets, rank=rank, share_plan=True, local_rank=1, **kw
            )
            if when == "after":
                edit()
            # Local rank 0 reads its epoch first: at its end it writes the next
            # epoch's file, which the reader maps when its own epoch ends.
            assert pieces_of(builder)
            got = pieces_of(reader)
        except ValueError as e:
            one_line(e, "share_plan")
            continue
        key = (world, kw["mode"], kw["seed"], rank)
        if key not in plain_cache:
            plain = shardkit.TokenLoader(tokens, offsets, rank=rank, **kw)
            plain_cache[key] = pieces_of(plain)
        assert got == plain_cache[key] and got, label
        del builder, reader


# ---- HFImageText(cache=True): the image-table cache edited, resealed, replayed ---


def _valid_table(state: dict, samples: int, pixel_limit: int) -> bool:
    try:
        counts, hs, ws = state["image_counts"], state["heights"], state["widths"]
        ints = all(type(v) is int for v in [*counts, *hs, *ws])
        return (
            ints
            and len(counts) == samples
            and all(c >= 0 for c in counts)
            and sum(counts) == len(hs) == len(ws)
            and all(h >= 1 and w >= 1 and h * w <= pixel_limit for h, w in zip(hs, ws))
        )
    except (KeyError, TypeError):
        return False


def test_hf_image_table_cache_mutations_deliver_pillows_table(tmp_path):
    """The cache beside the Arrow files is bit-flipped, truncated, edited (with or
    without a new seal: hostile values behind a valid seal), replaced by another
    data set's cache or an older one; an open that reads the cache must deliver a
    valid table (and for an unsealed edit, Pillow's); otherwise it scans (Pillow's
    table, the file rewritten)."""
    datasets = pytest.importorskip("datasets")
    from shardkit.image_sources import HFImageText
    from test_image_sources import make_samples, pillow_table, save_hf, table_of

    rows = save_hf(tmp_path / "hf", make_samples(9, seed=41))
    save_hf(tmp_path / "hf2", make_samples(9, seed=42))
    ds = datasets.load_from_disk(str(tmp_path / "hf"))
    oracle = pillow_table(rows)
    path = HFImageText(ds).cache_path
    original = open(path).read()
    state = json.loads(original)
    other = open(HFImageText(str(tmp_path / "hf2")).cache_path).read()
    limit = state["pixel_limit"]
    rng = random.Random(303)
    fields = ["image_counts", "heights", "widths", "pixel_limit", "version", "key", "kind"]
    seen = set()
    for case in range(120):
        op = rng.choice(["flip", "cut", "edit", "reseal", "reseal", "other", "none"])
        sealed_ok = op in ("reseal", "none")
        text = original
        if op == "flip":
            b = bytearray(original.encode())
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(7)
            text = b.decode("latin-1")
        elif op == "cut":
            text = original[: rng.randrange(len(original))]
        elif op == "other":
            text = other
        elif op in ("edit", "reseal"):
            edited = json.loads(original)
            field = rng.choice(fields)
            value = edited[field]
            new = rng.choice([*EDGES, None, "x", 1.5, float("nan"), [], [0]])
            if isinstance(value, list) and value and rng.random() < 0.7:
                value = list(value)
                j = rng.randrange(len(value))
                choice = rng.random()
                if choice < 0.6:
                    value[j] = new
                elif choice < 0.8:
                    del value[j]
                else:
                    value.append(value[j])
                new = value
            edited[field] = new
            if op == "reseal":
                edited = reseal(edited)
            text = json.dumps(edited)
        with open(path, "w", encoding="latin-1") as f:
            f.write(text)
        label = (case, op, text[:0] if op != "edit" and op != "reseal" else text[-300:])
        try:
            src = HFImageText(ds)
        except ValueError as e:
            one_line(e, "cache", "image", path)
            continue
        got = table_of(src)
        seen.add((op, src.from_cache))
        if src.from_cache:
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            assert parsed is not None and (sealed_ok or parsed == state), label
            assert _valid_table(parsed, 9, limit), label
            assert got == table_of_state(parsed), label
        else:
            assert got == oracle, label
            assert src.cache_written and open(path).read() == original, label
            assert [len(src[i]["images"]) for i in range(len(src))] == oracle[0], label
    # Both outcomes were exercised: resealed edits read back, damaged files rescanned.
    assert {("reseal", True), ("reseal", False), ("flip", False), ("none", True)} <= seen


def table_of_state(state: dict):
    return state["image_counts"], state["heights"], state["widths"]


# ---- format="olmo": metadata rows and the EOS-scan cache, edited ----------------


def test_olmo_metadata_and_cache_mutations_deliver_olmo_cores_documents(tmp_path):
    """The .csv.gz rows are edited (edge values, swapped, dropped, repeated, extra
    columns, blanks) and the EOS-scan cache is flipped, cut or replaced by another
    file's; an accepted source delivers the documents of OLMo-core's rule (its
    transcription in test_olmo_source.py) token for token; a source OLMo-core
    refuses (rows not consecutive, out of bounds) is refused in one line."""
    from test_olmo_source import olmo_documents, olmo_iter_document_indices, write_tokens

    rng = random.Random(404)
    nrng = np.random.default_rng(404)
    for case in range(120):
        folder = tmp_path / f"c{case}"
        folder.mkdir()
        dtype = rng.choice([np.uint8, np.uint16, np.uint32])
        name = np.dtype(dtype).name
        path = write_tokens(str(folder / "a.npy"), nrng, dtype, 3, docs=rng.randint(1, 8))
        total = os.path.getsize(path) // np.dtype(dtype).itemsize
        if rng.random() < 0.5:
            ends = np.nonzero(np.fromfile(path, dtype=dtype) == 3)[0] + 1
            rows = [[int(s), int(e)] for s, e in zip([0, *ends[:-1]], ends)]
            op = rng.choice(["edit", "swap", "drop", "dup", "extra", "blank", "text", "none"])
            if op == "edit":
                row = rng.choice(rows)
                row[rng.randrange(2)] = rng.choice([*EDGES, total, total + 1])
            elif op == "swap" and len(rows) > 1:
                i = rng.randrange(len(rows) - 1)
                rows[i], rows[i + 1] = rows[i + 1], rows[i]
            elif op == "drop":
                rows.pop(rng.randrange(len(rows)))
            elif op == "dup":
                i = rng.randrange(len(rows))
                rows.insert(i, list(rows[i]))
            lines = [",".join(map(str, r)) for r in rows]
            if op == "extra":
                lines = [ln + ",7,x" for ln in lines]
            elif op == "blank":
                lines.insert(rng.randrange(len(lines) + 1), rng.choice(["", " ", "\t"]))
            elif op == "text":
                i = rng.randrange(len(lines))
                lines[i] = lines[i].replace(",", rng.choice([";", ", ", ",+", ",0x", ",1e"]), 1)
            with gzip.open(str(folder / "a.csv.gz"), "wt") as f:
                f.write("\n".join(lines) + "\n")
            kwargs = dict(token_dtype=name)
            label = (case, op, lines)
            try:
                oracle = [
                    np.fromfile(path, dtype=dtype)[s:e]
                    for s, e in olmo_iter_document_indices(path, dtype=dtype)
                ]
                last = 0
                for s, e in olmo_iter_document_indices(path, dtype=dtype):
                    assert s == last and s <= e  # OLMo-core's consecutive-documents rule
                    last = e
                if last != total:
                    oracle = None  # OLMo-core adds a tail document; shardkit refuses
            except (AssertionError, RuntimeError, ValueError):
                oracle = None
        else:
            kwargs = dict(token_dtype=name, eos_token_id=3)
            shardkit.open_source(path, format="olmo", **kwargs)  # writes the cache
            cache = path + ".shardkit-docs-eos3"
            data = bytearray(open(cache, "rb").read())
            op = rng.choice(["flip", "cut", "other", "none"])
            if op == "flip":
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            elif op == "cut":
                data = data[: rng.randrange(len(data))]
            elif op == "other":
                other = write_tokens(str(folder / "b.npy"), nrng, dtype, 3, docs=4)
                shardkit.open_source(other, format="olmo", **kwargs)
                data = bytearray(open(other + ".shardkit-docs-eos3", "rb").read())
            with open(cache, "wb") as f:
                f.write(bytes(data))
            oracle = olmo_documents([path], dtype, 3)
            label = (case, "cache", op)
        try:
            source = shardkit.open_source(path, format="olmo", **kwargs)
            got = [source.document(d).tolist() for d in range(source.num_documents)]
        except ValueError as e:
            one_line(e, "metadata", "tokens", "eos_token_id", path)
            assert oracle is None or label[1] in ("text", "extra", "blank"), (label, e)
            continue
        assert oracle is not None, label
        assert got == [d.astype(np.int64).tolist() for d in oracle], label
        assert source.lengths().tolist() == [len(d) for d in oracle], label


# ---- shardkit multimodal-stats / image-table: hostile tables and flags ----------


def _stats_oracle(table: dict, seq_len: int, max_images=None):
    """(samples, tokens, images, vision) of the samples kept: those whose length
    fits seq_len and whose images fit max_images (the plan drops the others as
    oversize and lists them)."""
    lengths = table["lengths"]
    if "vision_tokens" in table:
        vision = [list(v) for v in table["vision_tokens"]]
    else:
        vision = [[1] * c for c in table["image_counts"]]
    keep = [
        i
        for i, n in enumerate(lengths)
        if n <= seq_len and (max_images is None or len(vision[i]) <= max_images)
    ]
    dropped = [i for i in range(len(lengths)) if i not in keep]
    return dict(
        samples=len(lengths),
        dropped_samples=dropped,
        tokens=sum(lengths[i] for i in keep),
        images=sum(len(vision[i]) for i in keep),
        vision=sum(sum(vision[i]) for i in keep),
    )


def test_multimodal_stats_hostile_tables_and_flags(tmp_path, cli):
    """Tables with edge values (0, negative, 2^63-1, 1.5, NaN, strings, nulls,
    mismatched lists, duplicate keys) and edge flag values; a refusal is a non-zero
    exit with one line naming the flag (no traceback); an accepted table's report
    counts every kept sample's tokens, images and vision cost once, per step and in
    total, and lists exactly the samples longer than seq_len as dropped."""
    rng = random.Random(505)
    hostile = [0, -1, 1, 2**31, 2**63 - 1, 2**63, -(2**63), 1.5, "NaN", "7", None, [], True]
    accepted = refused = 0
    for case in range(150):
        n = rng.randint(1, 12)
        lengths = [rng.randint(1, 90) for _ in range(n)]
        vision = [[rng.randint(1, 40) for _ in range(rng.randint(0, 3))] for _ in range(n)]
        table = {"lengths": lengths}
        if rng.random() < 0.5:
            table["vision_tokens"] = vision
        else:
            table["image_counts"] = [len(v) for v in vision]
        flags = {"--seq-len": 64, "--world": rng.choice([1, 2, 3]), "--batch": 1}
        op = rng.choice(["length", "vision", "count", "shape", "flag", "dupkey", "none"])
        raw = None
        if op == "length":
            lengths[rng.randrange(n)] = rng.choice(hostile)
        elif op == "vision" and "vision_tokens" in table and any(vision):
            v = rng.choice([v for v in vision if v])
            v[rng.randrange(len(v))] = rng.choice(hostile)
        elif op == "count" and "image_counts" in table:
            table["image_counts"][rng.randrange(n)] = rng.choice(hostile)
        elif op == "shape":
            key = rng.choice([k for k in table])
            table[key] = table[key][:-1] if rng.random() < 0.5 else table[key] + table[key][:1]
        elif op == "flag":
            flag = rng.choice(["--seq-len", "--world", "--batch", "--max-images", "--seed"])
            flags[flag] = rng.choice(["0", "-1", "1", "2", "9223372036854775807", "1e3", "nan", ""])
        elif op == "dupkey":
            text = json.dumps(table)
            raw = text[:-1] + ', "lengths": ' + json.dumps([1] * n) + "}"
        path = tmp_path / f"t{case}.json"
        path.write_text(raw if raw is not None else json.dumps(table).replace('"NaN"', "NaN"))
        args = ["multimodal-stats", "--table", path, "--json", "--steps"]
        for k, v in flags.items():
            args += [k, v]
        r = cli(*args)
        label = (case, op, path.read_text()[:400], flags)
        if r.returncode != 0:
            refused += 1
            assert r.returncode == 2 and r.stdout == "", label
            err = r.stderr.strip()
            assert err and "\n" not in err and "Traceback" not in err, (label, err)
            assert err.startswith("shardkit multimodal-stats: --"), (label, err)
            continue
        accepted += 1
        assert raw is None, (label, "a duplicate key was accepted")
        # Accepted: every value in the table was a valid count.
        assert all(type(x) is int and x >= 0 for x in lengths), label
        report = json.loads(r.stdout)
        max_images = flags.get("--max-images")
        want = _stats_oracle(
            table, int(flags["--seq-len"]), None if max_images is None else int(max_images)
        )
        assert report["samples"] == want["samples"], label
        assert sorted(report["dropped_samples"]) == want["dropped_samples"], label
        assert report["tokens"] == want["tokens"] and report["images"] == want["images"], label
        world, rows, seq_len = report["world"], report["rows_per_rank"], report["seq_len"]
        assert (world, rows, seq_len) == (
            int(flags["--world"]),
            int(flags["--batch"]),
            int(flags["--seq-len"]),
        ), label
        for deal in ("before", "after"):
            steps = report[deal]["steps"]
            assert len(steps) == report["num_steps"], label
            assert sum(sum(s["tokens"]) for s in steps) == want["tokens"], (label, deal)
            assert sum(sum(s["images"]) for s in steps) == want["images"], (label, deal)
            assert sum(sum(s["vision"]) for s in steps) == want["vision"], (label, deal)
            capacity = report["num_steps"] * world * rows * seq_len
            padding = 1 - want["tokens"] / capacity if capacity else 0
            assert math.isclose(report[deal]["padding"], padding), label
    assert accepted > 30 and refused > 30, (accepted, refused)


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--tar", "{d}/missing.tar"], "--tar"),
        (["--tar", "{d}/cut.tar"], "--tar"),
        (["--tar", "{d}/cut.tar", "--vision-rule", "squares"], "--vision-rule"),
        (["--hf", "{d}/missing"], "--hf"),
        (["--tar", "{d}/ok.tar", "--output", "{d}"], "--output"),
    ],
)
def test_image_table_hostile_inputs_are_one_line(tmp_path, cli, monkeypatch, args, flag):
    import io
    import sys
    import tarfile

    monkeypatch.setenv("SHARDKIT_PYTHON", sys.executable)
    with tarfile.open(tmp_path / "ok.tar", "w") as tar:
        data = np.arange(5, dtype="<i4").tobytes()
        info = tarfile.TarInfo("s0.ids")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    whole = (tmp_path / "ok.tar").read_bytes()
    (tmp_path / "cut.tar").write_bytes(whole[:1024])  # the member, no end-of-archive blocks
    if "--output" not in args:
        args = [*args, "--output", "{d}/table.json"]
    r = cli("image-table", *[a.format(d=tmp_path) for a in args], "--json")
    err = r.stderr.strip()
    assert r.returncode != 0 and r.stdout == "", (r.returncode, r.stdout, err)
    assert err and "\n" not in err and "Traceback" not in err, err
    assert flag in err, err
    assert not os.path.exists(tmp_path / "table.json")


# ---- jpeg_draft: random JPEGs, targets at the edges, damaged bytes --------------


def test_jpeg_draft_sweep_against_pillows_draft(tmp_path):
    """Random JPEGs (sizes, subsampling, progressive, grey) at random targets, also
    targets at the edges (0, 1, negative, huge), and the same bytes cut or flipped:
    every accepted decode equals Pillow's im.draft + BILINEAR within the JPEG
    tolerance (and Pillow must decode those bytes too); a refusal is one ValueError
    naming the field or the target."""
    from test_image_decode import JPEG_MAX_DIFF, JPEG_MEAN_DIFF, encode, photo, pillow_draft

    from shardkit import images

    rng = random.Random(606)
    decoded = refused = 0
    for case in range(150):
        h, w = rng.randint(1, 300), rng.randint(1, 300)
        kw = rng.choice([{}, {"subsampling": 0}, {"subsampling": 1}, {"progressive": True}])
        data = encode(photo(h, w, seed=case), "JPEG", rng.choice(["RGB", "RGB", "L"]), **kw)
        op = rng.choice(["size", "size", "max_pixels", "edge", "cut", "flip"])
        size, max_pixels = (max(1, h // rng.randint(1, 9)), max(1, w // rng.randint(1, 9))), None
        if op == "max_pixels":
            size, max_pixels = None, rng.choice([1, 2, 50, h * w // 5 + 1, h * w, 2**62])
        elif op == "edge":
            size = rng.choice([(0, 5), (5, 0), (-1, 3), (1, 1), (2**31, 2), (2**63 - 1, 1)])
        elif op == "cut":
            data = data[: rng.randrange(len(data))]
        elif op == "flip":
            b = bytearray(data)
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(2, len(b))] ^= 1 << rng.randrange(8)
            data = bytes(b)
        label = (case, op, h, w, kw, size, max_pixels)
        try:
            ours = images.decode_image(data, size=size, max_pixels=max_pixels, jpeg_draft=True)
        except (ValueError, OverflowError) as e:
            refused += 1
            one_line(e, "image", "size", "max_pixels")
            continue
        decoded += 1
        target = ours.shape[:2]
        assert ours.dtype == np.uint8 and ours.shape[2] == 3, label
        if size is not None:
            assert target == size, label
        elif max_pixels is not None:
            assert target[0] * target[1] <= max(max_pixels, 1) or target == (h, w), label
        try:
            theirs = pillow_draft(data, target)
        except Exception as e:  # Pillow refused bytes shardkit decoded
            raise AssertionError((label, "Pillow refuses these bytes", e)) from None
        diff = np.abs(ours.astype(int) - theirs.astype(int))
        if op == "flip":
            # Damaged entropy data decodes differently across libjpeg-turbo builds
            # only by its rounding; the shape and Pillow's acceptance are the rule.
            continue
        assert diff.max() <= JPEG_MAX_DIFF and diff.mean() <= JPEG_MEAN_DIFF, (
            label,
            diff.max(),
            diff.mean(),
        )
    assert decoded > 50 and refused > 10, (decoded, refused)
    for size in ((2**31, 2), (2**63 - 1, 1)):  # allocated (or overflowed) before
        with pytest.raises(ValueError, match="^resize: the target .* is over the limit of"):
            images.ImageDecoder(size=size)


# ---- cp_strategy="balanced" / "ptrr": edge options, every CP rank's slice -------


def _cp_pass(tokens, offsets, **kw):
    """Every batch of one loader: (pieces, per-slot rows)."""
    out = []
    for batch in shardkit.TokenLoader(tokens, offsets, **kw):
        out.append((batch_fields(batch, "rows", "documents", "starts", "lengths"), batch))
    return out


def test_cp_strategies_with_edge_options_deliver_every_token_once(tmp_path):
    """cp_size 2 or 4 under head_tail / balanced / ptrr with edge granularities,
    sequence lengths and CP ranks; accepted: every CP rank carries the same pieces,
    the pieces are those of the plan without CP at the same granularity, and the CP
    ranks' slots together hold every token of every piece exactly once (its token
    read from the data at its document position, cp_index unique per row);
    refused: one line naming the option."""
    rng = random.Random(707)
    tokens, offsets = make_data(random.Random(77), 60, 70)
    checked = 0
    for case in range(200):
        c = rng.choice([2, 4])
        strategy = rng.choice(["head_tail", "balanced", "balanced", "ptrr", "ptrr", "PTRR", ""])
        edge = rng.random() < 0.3
        g = rng.choice([0, 1, 3, -1, 2**63 - 1] if edge else [None, None, 2 * c, 4 * c])
        seq_len = rng.choice([2 * c, 6 * c + 1, 0] if rng.random() < 0.2 else [16 * c, 32 * c])
        mode = rng.choice(["pad", "continuous", "drop"])
        kw = dict(seq_len=seq_len, batch_size=2, world_size=2, rank=case % 2, seed=case)
        kw.update(mode=mode, num_threads=0, cp_size=c, cp_strategy=strategy)
        if g is not None:
            kw["cp_granularity"] = g
        label = (case, c, strategy, g, seq_len, mode)
        try:
            runs = [_cp_pass(tokens, offsets, cp_rank=r, **kw) for r in range(c)]
        except (ValueError, OverflowError) as e:
            one_line(e, "cp_", "seq_len", "granularity", "strategy")
            continue
        try:
            bad_rank = shardkit.TokenLoader(tokens, offsets, **dict(kw, cp_rank=c))
        except (ValueError, IndexError) as e:
            one_line(e, "cp_rank")
        else:
            raise AssertionError((label, "cp_rank = cp_size accepted", bad_rank))
        plain_kw = {k: v for k, v in kw.items() if k not in ("cp_size", "cp_strategy")}
        plain_kw["cp_granularity"] = g if g is not None else 2 * c
        plain = [p for p, _ in _cp_pass(tokens, offsets, **plain_kw)]
        assert [p for p, _ in runs[0]] == plain and plain, label
        for step, (pieces, _) in enumerate(runs[0]):
            seen = {}
            for r in range(c):
                p_r, batch = runs[r][step]
                assert p_r == pieces, (label, step, r)
                by_row = {}
                for row, doc, start, length in pieces:
                    if length:  # document_ids count the row's non-empty pieces
                        by_row.setdefault(row, []).append((doc, start, length))
                ids, pos = batch["input_ids"], batch["position_ids"]
                dids, cpi = batch["document_ids"], batch["cp_index"]
                assert ids.shape == (2, seq_len // c), label
                for row in range(ids.shape[0]):
                    for k in range(ids.shape[1]):
                        if cpi[row, k] < 0:
                            continue
                        j = int(dids[row, k])
                        if j < 0:
                            continue  # the row's padding
                        doc, start, length = by_row[row][j]
                        p = int(pos[row, k])  # the position in its piece
                        assert 0 <= p < length, (label, step, r, row, k)
                        want = tokens[offsets[doc] + start + p]
                        assert ids[row, k] == want, (label, step, r, row, k)
                        key = (row, j, p)
                        assert key not in seen, (label, step, "twice", key, seen[key], r)
                        assert (row, int(cpi[row, k])) not in seen.values(), (label, "cp_index")
                        seen[key] = (row, int(cpi[row, k]))
            want = {
                (row, j, p)
                for row in {q[0] for q in pieces}
                for j, (_, _, _, n) in enumerate([q for q in pieces if q[0] == row and q[3]])
                for p in range(n)
            }
            assert set(seen) == want, (label, step, "lost", sorted(want - set(seen))[:5])
        checked += 1
    assert checked >= 60, checked


# ---- train state v3: resumed with changed world size / options / data set -------


def test_train_state_resumed_with_changed_configuration(monkeypatch, tmp_path):
    """An equal-steps loader's state after k steps is loaded into a loader with one
    thing changed: world size, batch size, threads, share_plan (allowed: every
    piece of the epoch not delivered before the state delivered exactly once,
    token for token; with nothing changed: the uninterrupted run's batches), or
    seq_len, seed, buffer, algorithm, shuffle, mode, cp_granularity, another data
    set of the same lengths (refused in one line naming state or the option); a
    loader built for another epoch (the state's epoch wins: the uninterrupted run's
    batches, or a refusal). Tokens name their data set, document and position
    (tools/sweep_delivery.py's data), so a wrong data set shows as foreign tokens."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import sweep_delivery as sd

    monkeypatch.setenv("SHARDKIT_SHARE_PLAN_DIR", str(tmp_path))
    monkeypatch.setenv("SHARDKIT_SHARE_PLAN_TIMEOUT", "5")
    rng = random.Random(808)
    allowed = ["same", "world_size", "batch_size", "num_threads", "share_plan"]
    refused_changes = ["seq_len", "seed", "buffer", "algorithm", "shuffle", "mode"]
    refused_changes += ["cp_granularity", "dataset", "epoch"]
    counts = {"accepted": 0, "refused": 0}
    for case in range(150):
        n = rng.choice([20, 40])
        world = rng.choice([1, 2, 3])
        base = dict(seq_len=rng.choice([32, 64]), batch_size=rng.choice([1, 2]), seed=case % 4)
        mode = rng.choice(["pad", "pad", "continuous"])
        base.update(buffer=rng.choice([4, 8]), mode=mode, num_threads=0, shuffle=True)
        tokens, offsets = sd.data(n)
        refs = [
            sd._run(sd._loader(shardkit, 0, n, world_size=world, rank=r, **base), tokens, offsets)
            for r in range(world)
        ]
        steps = len(refs[0][0])
        k = rng.randrange(steps)
        state = refs[0][1][k]
        change = rng.choice(allowed + refused_changes)
        if mode == "continuous" and change in ("world_size", "batch_size"):
            change = "same"  # elastic resume is the pad mode's rule (docs/loader.md)
        new = dict(base)
        new_world, tag = world, 0
        if change == "world_size":
            new_world = rng.choice([w for w in (1, 2, 3, 5) if w != world])
        elif change == "batch_size":
            new["batch_size"] = 3 - base["batch_size"]
        elif change == "num_threads":
            new["num_threads"] = 2
        elif change == "share_plan":
            new["share_plan"] = True
        elif change == "seq_len":
            new["seq_len"] = 96
        elif change == "seed":
            new["seed"] = base["seed"] + 1
        elif change == "buffer":
            new["buffer"] = 16
        elif change == "algorithm":
            new["algorithm"] = "next_fit"
        elif change == "shuffle":
            new["shuffle"] = False
        elif change == "mode":
            new["mode"] = "pad" if mode == "continuous" else "continuous"
        elif change == "cp_granularity":
            new["cp_granularity"] = 4
        elif change == "dataset":
            tag = 1
        elif change == "epoch":
            new["epoch"] = 1
        label = (case, n, world, base, k, change)
        got = []
        try:
            # Local rank 0 first: it writes the host's plan for the others.
            for r in range(new_world):
                extra = {"local_rank": r} if new.get("share_plan") else {}
                loader = sd._loader(shardkit, tag, n, world_size=new_world, rank=r, **new, **extra)
                loader.load_state_dict(state)
                got.append(loader)
            got = [sd._pass(loader, *sd.data(n, tag)) for loader in got]
        except (ValueError, IndexError, TypeError, sd.Refused) as e:
            e = getattr(e, "error", e)
            counts["refused"] += 1
            assert change in refused_changes, (label, "refused", e)
            one_line(e, "state", change)
            continue
        counts["accepted"] += 1
        # (mode: a pad state loaded into a continuous loader was accepted and
        # delivered tokens twice; continuous mode is another stream now.)
        assert change in allowed or change == "epoch", (label, "accepted")
        assert len({len(g) for g in got}) == 1, (label, [len(g) for g in got])
        # (epoch: the state says where the run stands, its epoch included.)
        if change in ("same", "num_threads", "share_plan", "epoch"):
            for r in range(world):
                sd.same_batches(got[r], refs[r][0][k:], f"{label} rank {r}")
            continue
        before = [
            t for ref in refs for _, ps in ref[0][:k] for t in sd.token_keys(ps, tokens, offsets)
        ]
        after = [t for g in got for _, ps in g for t in sd.token_keys(ps, tokens, offsets)]
        sd.exactly_once(before + after, tokens.tolist(), str(label))
    assert counts["accepted"] > 15 and counts["refused"] > 15, counts
