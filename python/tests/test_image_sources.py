"""Image-text sources against their peers: tar shards grouped and read as
webdataset reads them (webdataset.WebDataset is the oracle), their image
sizes as Pillow opens them; the index cache reused only for the shard it was
built from; a datasets.Dataset with Image features read as datasets reads it."""

import io
import json
import os
import tarfile

import numpy as np
import pytest
from shardkit.image_sources import HFImageText, TarImageText
from shardkit.multimodal import qwen_vision_tokens

wds = pytest.importorskip("webdataset")
PIL = pytest.importorskip("PIL")
from PIL import Image  # noqa: E402

# The ConstantLengthDataset options of the tests here: rows of 64 tokens, no
# plan check; most run one rank.
ROWS = dict(seq_len=64, check_plan=False)
ONE_RANK = dict(ROWS, world_size=1, rank=0)

IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")


def encoded(h, w, fmt, seed):
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, fmt)
    return buf.getvalue()


def make_samples(n, seed=0, text="ids", prefix="s"):
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n):
        ids = rng.integers(0, 50000, int(rng.integers(1, 40)))
        sample = {"__key__": f"{prefix}{i:05d}"}
        sample[text] = (
            ids.astype("<i4").tobytes()
            if text == "ids"
            else json.dumps({"input_ids": ids.tolist()}).encode()
        )
        for j in range(int(rng.integers(0, 4))):
            fmt, ext = [("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")][(i + j) % 3]
            h, w = int(rng.integers(8, 90)), int(rng.integers(8, 90))
            sample[f"{j}.{ext}"] = encoded(h, w, fmt, seed=i * 10 + j)
        sample["txt"] = b"caption"  # another member, ignored
        samples.append((sample, ids))
    return samples


def write_shards(folder, samples, per_shard):
    paths = []
    for k in range(0, len(samples), per_shard):
        path = os.path.join(folder, f"shard-{k // per_shard:03d}.tar")
        with wds.TarWriter(path) as sink:
            for sample, _ in samples[k : k + per_shard]:
                sink.write(sample)
        paths.append(path)
    return paths


def webdataset_samples(paths):
    return list(wds.WebDataset(paths, shardshuffle=False))


@pytest.mark.parametrize("text", ["ids", "json"])
def test_tar_samples_are_webdatasets_samples(tmp_path, text):
    samples = make_samples(23, text=text)
    paths = write_shards(str(tmp_path), samples, per_shard=10)
    src = TarImageText(paths, text=text)
    theirs = webdataset_samples(paths)
    assert len(src) == len(theirs) == 23
    for i, sample in enumerate(theirs):
        assert src.key(i) == sample["__key__"]
        assert [m[0] for m in src.members(i)] == [k for k in sample if not k.startswith("__")]
        mine = src[i]
        images = [v for k, v in sample.items() if k.split(".")[-1] in IMAGE_EXTS]
        assert mine["images"] == images
        np.testing.assert_array_equal(mine["input_ids"], samples[i][1])
        assert src.lengths[i] == len(samples[i][1])
        a, b = src.image_start[i], src.image_start[i + 1]
        sizes = [Image.open(io.BytesIO(data)).size for data in images]  # (w, h)
        assert list(zip(src.image_widths[a:b], src.image_heights[a:b])) == sizes


def test_tar_long_names_folders_and_repeated_keys_group_like_webdataset(tmp_path):
    path = str(tmp_path / "odd.tar")
    members = [
        ("dir/" + "x" * 150 + ".ids", np.arange(3, dtype="<i4").tobytes()),  # pax long name
        ("dir/" + "x" * 150 + ".png", encoded(5, 6, "PNG", 1)),
        ("a.ids", np.arange(2, dtype="<i4").tobytes()),
        ("c.ids", np.arange(4, dtype="<i4").tobytes()),
        ("__meta__", b"skipped"),
        ("nodot", b"skipped"),
        ("b.IDS", np.arange(1, dtype="<i4").tobytes()),  # extensions are lowercased
        ("b.0.JPG", encoded(7, 9, "JPEG", 2)),
    ]
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        with tarfile.open(path, "w", format=fmt) as tar:
            folder = tarfile.TarInfo("dir")
            folder.type = tarfile.DIRTYPE
            tar.addfile(folder)
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        src = TarImageText([path], cache=False)
        theirs = webdataset_samples([path])
        assert [src.key(i) for i in range(len(src))] == [s["__key__"] for s in theirs]
        assert src.lengths.tolist() == [3, 2, 4, 1]
        assert src.image_heights.tolist() == [5, 7] and src.image_widths.tolist() == [6, 9]


def test_index_cache_is_reused_only_for_the_shard_it_was_built_from(tmp_path):
    samples = make_samples(12, seed=3)
    (path,) = write_shards(str(tmp_path), samples, per_shard=12)
    first = TarImageText([path])
    assert first.cache_written and not first.from_cache
    cache = path + ".shardkit-index.json"
    assert os.path.exists(cache)
    second = TarImageText([path])
    assert second.from_cache and second.fingerprint == first.fingerprint
    assert second.lengths.tolist() == first.lengths.tolist()
    assert [second[i]["images"] for i in range(12)] == [first[i]["images"] for i in range(12)]
    # The shard rewritten with other samples: the cache is stale, the shard scanned again.
    other = make_samples(12, seed=4)
    write_shards(str(tmp_path), other, per_shard=12)
    third = TarImageText([path])
    assert not third.from_cache and third.fingerprint != first.fingerprint
    assert third.lengths.tolist() == [len(ids) for _, ids in other]
    # A damaged cache (an edited number, the seal no longer matches) is rebuilt, never trusted.
    text = open(cache).read()
    state = json.loads(text)
    state["samples"][0][1] += 1
    with open(cache, "w") as f:
        json.dump(state, f)
    fourth = TarImageText([path])
    assert not fourth.from_cache and fourth.lengths.tolist() == third.lengths.tolist()
    # A cache that cannot be written (its path is a folder here; a read-only
    # folder alike): no cache, the same samples.
    os.remove(cache)
    os.mkdir(cache)
    ro = TarImageText([path])
    assert not ro.cache_written and not ro.from_cache
    assert ro.lengths.tolist() == third.lengths.tolist()


def test_bad_shards_are_one_error_naming_the_path(tmp_path):
    samples = make_samples(5, seed=5)
    (path,) = write_shards(str(tmp_path), samples, per_shard=5)
    data = open(path, "rb").read()
    cut = str(tmp_path / "cut.tar")
    for n in (len(data) // 2, 512 * 3 + 100, 700, 1024):  # between members, in data, ...
        open(cut, "wb").write(data[:n])
        with pytest.raises(ValueError, match=r"^paths: '.*cut.tar' is truncated: "):
            TarImageText([cut], cache=False)
    bad = bytearray(data)
    bad[0] ^= 1  # the first header's name: its checksum no longer matches
    open(cut, "wb").write(bytes(bad))
    with pytest.raises(
        ValueError, match=r"^paths: '.*cut.tar' has a bad tar header checksum at byte 0"
    ):
        TarImageText([cut], cache=False)
    with tarfile.open(cut, "w") as tar:
        for name, payload in (("a.ids", b"\0\0\0\0"), ("a.png", b"not a png"), ("b.png", b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    with pytest.raises(
        ValueError, match=r"^paths: '.*cut.tar' sample 0 \('a'\) member .png: not a JPEG"
    ):
        TarImageText([cut], cache=False)
    with tarfile.open(cut, "w") as tar:
        info = tarfile.TarInfo("b.png")
        payload = encoded(4, 4, "PNG", 0)
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    with pytest.raises(ValueError, match=r"sample 0 \('b'\) has no .ids member"):
        TarImageText([cut], cache=False)
    with tarfile.open(cut, "w") as tar:
        for name in ("a.ids", "a.ids"):
            info = tarfile.TarInfo(name)
            info.size = 4
            tar.addfile(info, io.BytesIO(b"\0" * 4))
    with pytest.raises(ValueError, match=r"has member 'a.ids' at byte 1024: sample 'a' already"):
        TarImageText([cut], cache=False)
    with pytest.raises(Exception, match="duplicate file name"):
        webdataset_samples([cut])  # the peer refuses it too
    with pytest.raises(ValueError, match="^text: must be 'ids' or 'json'"):
        TarImageText([path], text="txt")
    with pytest.raises(ValueError, match="^paths: "):
        TarImageText([str(tmp_path / "missing.tar")])


def test_vision_tokens_from_header_sizes(tmp_path):
    samples = make_samples(9, seed=6)
    paths = write_shards(str(tmp_path), samples, per_shard=4)
    src = TarImageText(paths, vision_tokens=qwen_vision_tokens)
    expected = qwen_vision_tokens(src.image_heights, src.image_widths)
    table = src.sample_table()
    assert [x for v in table["vision_tokens"] for x in v] == list(expected)
    assert table["lengths"].tolist() == src.lengths.tolist()


def test_hf_dataset_with_image_features_reads_what_datasets_reads(tmp_path):
    datasets = pytest.importorskip("datasets")
    samples = make_samples(15, seed=7)
    ds, rows = hf_dataset(samples)
    ds.save_to_disk(str(tmp_path / "hf"))
    for source in (ds, str(tmp_path / "hf")):
        src = HFImageText(source, vision_tokens=qwen_vision_tokens)
        assert len(src) == 15
        for i in range(15):
            mine = src[i]
            np.testing.assert_array_equal(mine["input_ids"], samples[i][1])
            assert mine["images"] == [im["bytes"] for im in rows["images"][i]]
            decoded = ds[i]["images"]  # datasets decodes with Pillow
            a, b = src.image_start[i], src.image_start[i + 1]
            assert [im.size for im in decoded] == list(
                zip(src.image_widths[a:b], src.image_heights[a:b])
            )
    single = datasets.Dataset.from_dict(
        {"input_ids": [[1, 2]], "image": [{"bytes": encoded(10, 20, "PNG", 0), "path": None}]},
        features=datasets.Features(
            {"input_ids": datasets.Sequence(datasets.Value("int64")), "image": datasets.Image()}
        ),
    )
    one = HFImageText(single, image_column="image")
    assert one.image_heights.tolist() == [10] and one[0]["images"][0][:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="^image_column: 'input_ids' is"):
        HFImageText(single, image_column="input_ids")


def hf_dataset(samples):
    """samples (make_samples) as an in-memory datasets.Dataset with an Image
    sequence column; returns (dataset, rows)."""
    import datasets

    rows = {
        "input_ids": [ids.tolist() for _, ids in samples],
        "images": [
            [{"bytes": v, "path": None} for k, v in s.items() if k.split(".")[-1] in IMAGE_EXTS]
            for s, _ in samples
        ],
    }
    features = datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "images": datasets.Sequence(datasets.Image()),
        }
    )
    return datasets.Dataset.from_dict(rows, features=features), rows


def save_hf(folder, samples):
    """samples (make_samples) as a save_to_disk folder; returns the rows."""
    ds, rows = hf_dataset(samples)
    ds.save_to_disk(str(folder))
    return rows


def pillow_table(rows):
    """(image counts, heights, widths) as Pillow opens the images: the oracle."""
    counts, heights, widths = [], [], []
    for images in rows["images"]:
        counts.append(len(images))
        for im in images:
            w, h = Image.open(io.BytesIO(im["bytes"])).size
            heights.append(h)
            widths.append(w)
    return counts, heights, widths


def table_of(src):
    return np.diff(src.image_start).tolist(), src.image_heights.tolist(), src.image_widths.tolist()


def test_hf_image_table_is_cached_beside_the_arrow_files_and_read_back(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = save_hf(tmp_path / "hf", make_samples(12, seed=3))
    first = HFImageText(str(tmp_path / "hf"))
    assert (first.from_cache, first.cache_written) == (False, True)
    loaded = datasets.load_from_disk(str(tmp_path / "hf"))
    arrow = os.path.abspath(loaded.cache_files[0]["filename"])
    assert os.path.dirname(first.cache_path) == os.path.dirname(arrow)
    assert os.path.basename(first.cache_path).startswith("shardkit-image-table-")
    for source in (str(tmp_path / "hf"), loaded):
        again = HFImageText(source, vision_tokens=qwen_vision_tokens)
        assert (again.from_cache, again.cache_written) == (True, True)
        assert table_of(again) == table_of(first) == pillow_table(rows)
        # vision_tokens is applied after the cache: another rule, no rebuild.
        np.testing.assert_array_equal(
            again.vision, qwen_vision_tokens(first.image_heights, first.image_widths)
        )
        for i in range(len(first)):
            assert again[i]["images"] == first[i]["images"]
            np.testing.assert_array_equal(again[i]["input_ids"], first[i]["input_ids"])
    # Another image column or pixel_limit is another table: scanned, not read.
    assert not HFImageText(str(tmp_path / "hf"), pixel_limit=10**6).from_cache
    assert not HFImageText(str(tmp_path / "hf"), cache=False).from_cache
    # An in-memory dataset has no files to bind a cache to: it scans.
    memory = datasets.Dataset.from_dict(rows, features=loaded.features)
    src = HFImageText(memory)
    assert (src.from_cache, src.cache_written, src.cache_path) == (False, False, None)
    assert table_of(src) == pillow_table(rows)


def test_hf_load_dataset_cache_files_carry_the_image_table(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    rows = save_hf(tmp_path / "hf", make_samples(5, seed=6))
    parquet = str(tmp_path / "x.parquet")
    datasets.load_from_disk(str(tmp_path / "hf")).to_parquet(parquet)
    seen = []
    for _ in range(2):
        ds = datasets.load_dataset(
            "parquet", data_files=parquet, split="train", cache_dir=str(tmp_path / "c")
        )
        src = HFImageText(ds)
        assert table_of(src) == pillow_table(rows)
        assert os.path.dirname(src.cache_path) == os.path.dirname(ds.cache_files[0]["filename"])
        seen.append(src.from_cache)
    assert seen == [False, True]


def test_hf_dataset_saved_again_is_rescanned(tmp_path):
    pytest.importorskip("datasets")
    save_hf(tmp_path / "hf", make_samples(8, seed=1))
    assert HFImageText(str(tmp_path / "hf")).cache_written
    rows = save_hf(tmp_path / "hf", make_samples(8, seed=2))  # same shape, other images
    src = HFImageText(str(tmp_path / "hf"))
    assert (src.from_cache, src.cache_written) == (False, True)
    assert table_of(src) == pillow_table(rows)
    assert HFImageText(str(tmp_path / "hf")).from_cache


def test_a_tampered_hf_cache_is_not_used(tmp_path):
    pytest.importorskip("datasets")
    rows = save_hf(tmp_path / "hf", make_samples(10, seed=4))
    path = HFImageText(str(tmp_path / "hf")).cache_path
    with open(path) as f:
        original = f.read()
    state = json.loads(original)
    assert state["heights"]
    edited = dict(state, heights=[state["heights"][0] + 1] + state["heights"][1:])
    broken = dict(state, checksum="0" * 16 if state["checksum"] != "0" * 16 else "1" * 16)
    for tampered in (edited, broken, "garbage", original[: len(original) // 2]):
        with open(path, "w") as f:
            f.write(tampered if isinstance(tampered, str) else json.dumps(tampered))
        src = HFImageText(str(tmp_path / "hf"))
        assert (src.from_cache, src.cache_written) == (False, True)
        assert table_of(src) == pillow_table(rows)
        with open(path) as f:  # rewritten from the scan
            assert f.read() == original


def test_an_unwritable_hf_cache_is_left_out(tmp_path):
    pytest.importorskip("datasets")
    rows = save_hf(tmp_path / "hf", make_samples(6, seed=5))
    path = HFImageText(str(tmp_path / "hf")).cache_path
    os.remove(path)
    os.mkdir(path)  # unwritable for root too: a folder where the file goes
    src = HFImageText(str(tmp_path / "hf"))
    assert (src.from_cache, src.cache_written) == (False, False)
    assert table_of(src) == pillow_table(rows)
    os.rmdir(path)
    if os.geteuid() != 0:  # root writes into a read-only folder anyway
        os.chmod(tmp_path / "hf", 0o555)
        try:
            src = HFImageText(str(tmp_path / "hf"))
            assert (src.from_cache, src.cache_written) == (False, False)
            assert table_of(src) == pillow_table(rows)
        finally:
            os.chmod(tmp_path / "hf", 0o755)


def pillow_pixels(data, size):
    im = Image.open(io.BytesIO(data)).convert("RGB").resize((size[1], size[0]), Image.BILINEAR)
    return np.asarray(im)


def test_loader_batches_carry_decoded_images_in_token_order(tmp_path):
    """ConstantLengthDataset over tar shards: the table from the source (no
    sample read to plan), every sample once over the ranks, and each batch's
    pixel_values equal to Pillow's decode and resize of its documents' images
    in order."""
    from shardkit.images import ImageDecoder
    from shardkit.torch import ConstantLengthDataset

    samples = make_samples(30, seed=8)
    paths = write_shards(str(tmp_path), samples, per_shard=8)
    src = TarImageText(paths, vision_tokens=lambda h, w: (h // 16 + 1) * (w // 16 + 1))
    reads = []

    def counting(i):
        reads.append(i)
        return src[i]

    seen = []
    size = (24, 32)
    for rank in range(3):
        reads.clear()
        ds = ConstantLengthDataset(
            ReadThrough(src, counting),
            **ROWS,
            rank=rank,
            world_size=3,
            batch_size=2,
            max_images_per_pack=6,
            image_decoder=ImageDecoder(size=size, threads=2),
        )
        assert reads == []  # planned from the table
        for batch in ds:
            docs = batch["documents"].tolist()
            seen += docs
            expected = [pillow_pixels(b, size) for d in docs for b in src[d]["images"]]
            pv = batch["pixel_values"]
            assert tuple(pv.shape) == (len(expected), *size, 3) and pv.dtype == torch_uint8()
            for k, e in enumerate(expected):
                np.testing.assert_array_equal(pv[k].numpy(), e)
            assert batch["image_sample"].shape[0] == len(expected)
            assert "images" not in batch
    assert sorted(seen) == list(range(30))


class ReadThrough:
    """`src` (its length and sample table) with each sample read through
    `read(i)`: a test's counting or corrupting wrapper."""

    def __init__(self, src, read):
        self.src, self.read = src, read

    def __len__(self):
        return len(self.src)

    def sample_table(self):
        return self.src.sample_table()

    def __getitem__(self, i):
        return self.read(i)


def torch_uint8():
    import torch

    return torch.uint8


def test_a_user_processor_replaces_the_decoder(tmp_path):
    from shardkit.torch import ConstantLengthDataset

    samples = make_samples(10, seed=9)
    paths = write_shards(str(tmp_path), samples, per_shard=10)
    src = TarImageText(paths)
    calls = []

    def processor(images, samples):
        calls.append(list(samples))
        return {
            "pixel_values": np.stack([pillow_pixels(b, (8, 8)) for b in images])
            if images
            else np.zeros((0, 8, 8, 3), np.uint8)
        }

    ds = ConstantLengthDataset(src, **ONE_RANK, batch_size=2, image_decoder=processor)
    total = 0
    for batch in ds:
        assert batch["pixel_values"].shape[0] == batch["image_sample"].shape[0]
        total += batch["pixel_values"].shape[0]
    assert total == int(src.image_counts.sum())
    assert sorted(set(s for c in calls for s in c)) == [i for i in range(10) if src.image_counts[i]]
    with pytest.raises(ValueError, match="^image_decoder: expected a callable"):
        ConstantLengthDataset(src, seq_len=64, image_decoder=3, world_size=1, rank=0)


def test_a_corrupt_image_in_a_batch_names_its_sample(tmp_path):
    from shardkit.images import ImageDecoder
    from shardkit.torch import ConstantLengthDataset

    samples = make_samples(6, seed=10)
    paths = write_shards(str(tmp_path), samples, per_shard=6)
    src = TarImageText(paths)
    bad = next(i for i in range(6) if src.image_counts[i])

    def broken(i):
        s = src[i]
        if i == bad:
            s["images"] = [b[: len(b) // 2] for b in s["images"]]
        return s

    ds = ConstantLengthDataset(
        ReadThrough(src, broken), **ONE_RANK, image_decoder=ImageDecoder(size=(8, 8))
    )
    with pytest.raises(ValueError, match=rf"^images: sample {bad}, image 0: "):
        list(ds)


@pytest.mark.timeout(120)  # a regression hung here (a forked worker's decoder threads)
def test_dataloader_workers_give_the_same_decoded_batches(tmp_path):
    import torch.utils.data as tud
    from shardkit.images import ImageDecoder
    from shardkit.torch import ConstantLengthDataset

    samples = make_samples(16, seed=11)
    paths = write_shards(str(tmp_path), samples, per_shard=16)
    src = TarImageText(paths)

    def make():
        return ConstantLengthDataset(
            src, **ONE_RANK, batch_size=2, image_decoder=ImageDecoder(size=(8, 8))
        )

    alone = [(b["documents"].tolist(), b["pixel_values"].numpy()) for b in make()]
    workers = [
        (b["documents"].tolist(), b["pixel_values"].numpy())
        for b in tud.DataLoader(make(), batch_size=None, num_workers=2)
    ]
    assert [d for d, _ in alone] == [d for d, _ in workers]
    for (_, a), (_, b) in zip(alone, workers):
        np.testing.assert_array_equal(a, b)
