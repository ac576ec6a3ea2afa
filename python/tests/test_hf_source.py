"""Hugging Face datasets as token sources (format "arrow" / "parquet"), against `datasets`.

`datasets` writes the files (save_to_disk: Arrow IPC streams; to_parquet) and its own
readers give the oracle: every document shardkit delivers must be the row
`datasets.load_from_disk(...)` (or `Dataset.from_parquet`) returns for it, in order.
"""

import json
import os
import sys

import numpy as np
import pytest

import shardkit

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402


def rows(n, rng, hi=50000):
    return [rng.integers(0, hi, size=int(rng.integers(0, 40))).tolist() for _ in range(n)]


def make_dataset(rng, n=300, feature="int32", large=False):
    ids = rows(n, rng, hi=256 if feature == "uint8" else 50000)
    features = datasets.Features(
        {
            "text": datasets.Value("string"),
            "input_ids": (datasets.LargeList if large else datasets.Sequence)(
                datasets.Value(feature)
            ),
            "labels": datasets.Sequence(datasets.Value("int64")),
        }
    )
    return datasets.Dataset.from_dict(
        {"text": [f"row {i}" for i in range(n)], "input_ids": ids, "labels": ids},
        features=features,
    )


def expect_rows(source, want):
    assert source.num_documents == len(want)
    assert source.lengths().tolist() == [len(r) for r in want]
    for d, r in enumerate(want):
        assert source.document(d).tolist() == list(r), d


@pytest.mark.parametrize(
    "feature,large",
    [("int32", False), ("uint16", False), ("int64", False), ("uint8", False), ("int32", True)],
)
def test_save_to_disk_rows_match_load_from_disk(tmp_path, feature, large):
    rng = np.random.default_rng(1)
    ds = make_dataset(rng, feature=feature, large=large)
    folder = str(tmp_path / "ds")
    ds.save_to_disk(folder, num_shards=3)
    want = datasets.load_from_disk(folder)["input_ids"]
    source = shardkit.open_source(folder)  # detected: a save_to_disk folder
    expect_rows(source, want)
    assert source.num_files >= 3  # one part per record batch, no copy
    # A glob of its files (byte order: state.json's order for datasets' names): the same rows.
    expect_rows(shardkit.open_source(os.path.join(folder, "data-*-of-*.arrow")), want)
    # A single .arrow file, and another column.
    first = sorted(f for f in os.listdir(folder) if f.endswith(".arrow"))[0]
    labels = shardkit.open_source(os.path.join(folder, first), column="labels")
    n0 = labels.num_documents
    expect_rows(labels, want[:n0])


def test_selected_and_shuffled_datasets_are_read_as_saved(tmp_path):
    rng = np.random.default_rng(2)
    ds = (
        make_dataset(rng)
        .shuffle(seed=3)
        .select(range(10, 250))
        .filter(lambda r: len(r["input_ids"]) != 7)
    )
    folder = str(tmp_path / "ds")
    ds.save_to_disk(folder)
    expect_rows(
        shardkit.open_source(folder, format="arrow"), datasets.load_from_disk(folder)["input_ids"]
    )


def test_parquet_rows_match_datasets_and_mix_with_arrow(tmp_path):
    rng = np.random.default_rng(4)
    ds = make_dataset(rng, feature="int64")
    path = str(tmp_path / "train.parquet")
    ds.to_parquet(path)
    want = datasets.Dataset.from_parquet(path, cache_dir=str(tmp_path / "cache"))["input_ids"]
    source = shardkit.open_source(path)  # detected: parquet
    expect_rows(source, want)
    folder = str(tmp_path / "ds")
    ds.save_to_disk(folder)
    both = shardkit.open_source([path, folder])
    expect_rows(both, list(want) + list(datasets.load_from_disk(folder)["input_ids"]))
    loader = shardkit.TokenLoader(both, seq_len=64, batch_size=4, rank=0, world_size=1)
    assert sorted(d for b in loader for d in b["documents"].tolist()) == list(
        range(both.num_documents)
    )


def test_resume_against_one_edited_token_is_refused(tmp_path):
    rng = np.random.default_rng(5)
    ds = make_dataset(rng, n=40)
    folder = str(tmp_path / "a")
    ds.save_to_disk(folder)
    source = shardkit.open_source(folder)
    fingerprint = source.fingerprint
    loader = shardkit.TokenLoader(source, seq_len=32, batch_size=2)
    next(iter(loader))
    state = loader.state_dict()
    edited = [list(r) for r in ds["input_ids"]]
    d = next(i for i, r in enumerate(edited) if r)
    edited[d][0] += 1  # one token; every length the same
    folder_b = str(tmp_path / "b")
    ds.remove_columns("input_ids").add_column(
        "input_ids", edited, feature=ds.features["input_ids"]
    ).save_to_disk(folder_b)
    other = shardkit.open_source(folder_b)
    assert other.lengths().tolist() == source.lengths().tolist()
    assert other.fingerprint != fingerprint
    with pytest.raises(ValueError, match="differ"):
        shardkit.TokenLoader(other, seq_len=32, batch_size=2).load_state_dict(state)


def _write_stream(path, table, **options):
    with pa.OSFile(path, "wb") as f:
        with pa.ipc.new_stream(f, table.schema, options=pa.ipc.IpcWriteOptions(**options)) as w:
            w.write_table(table)


def test_hostile_arrow_and_parquet_files_are_refused_naming_file_and_field(tmp_path):
    ok = pa.table({"text": ["a", "b"], "input_ids": pa.array([[1, 2], [3]], pa.list_(pa.int32()))})
    good = str(tmp_path / "good.arrow")
    _write_stream(good, ok)
    data = open(good, "rb").read()
    cases = []
    for name, table, options, column, words in [
        (
            "missing column",
            ok,
            {},
            "ids",
            "column: no column 'ids'; the columns are 'text', 'input_ids'",
        ),
        ("string column", ok, {}, "text", "column: 'text' is Utf8"),
        (
            "null row",
            pa.table({"input_ids": pa.array([[1], None], pa.list_(pa.int32()))}),
            {},
            "input_ids",
            "record_batch[0] row 1 is null",
        ),
        (
            "float lists",
            pa.table({"input_ids": pa.array([[1.5]], pa.list_(pa.float32()))}),
            {},
            "input_ids",
            "'input_ids' is List<FloatingPoint>",
        ),
        ("lz4", ok, {"compression": "lz4"}, "input_ids", "compressed with LZ4_FRAME"),
    ]:
        path = str(tmp_path / (name.replace(" ", "_") + ".arrow"))
        _write_stream(path, table, **options)
        cases.append((path, column, f"path: {path}: ", words))
    for cut in (3, 40, len(data) // 2, len(data) - 12):
        path = str(tmp_path / f"cut{cut}.arrow")
        with open(path, "wb") as f:
            f.write(data[:cut])
        cases.append((path, "input_ids", f"path: {path}: ", ""))
    for path, column, start, words in cases:
        with pytest.raises(ValueError) as e:
            shardkit.open_source(path, column=column)
        message = str(e.value)
        assert message.startswith(start) and words in message and "\n" not in message, message
    pq.write_table(
        pa.table({"input_ids": pa.array([[1], None, [2]], pa.list_(pa.int64()))}),
        str(tmp_path / "n.parquet"),
    )
    pq.write_table(
        pa.table({"input_ids": pa.array([[1, 2**40]], pa.list_(pa.int64()))}),
        str(tmp_path / "big.parquet"),
    )
    with open(str(tmp_path / "junk.parquet"), "wb") as f:
        f.write(b"PAR1 not really")
    for name, words in [
        ("n.parquet", "column: {d}/n.parquet: 'input_ids' row 1 is null"),
        ("big.parquet", "tokens: {d}/big.parquet: token 1 is 1099511627776"),
        ("junk.parquet", "path: {d}/junk.parquet: not a readable Parquet file"),
    ]:
        with pytest.raises(ValueError) as e:
            shardkit.open_source(str(tmp_path / name))
        assert str(e.value).startswith(words.format(d=tmp_path)), str(e.value)
    with pytest.raises(ValueError, match="column: .*no column 'ids'"):
        shardkit.open_source(str(tmp_path / "big.parquet"), column="ids")


def test_cli_loader_stats_reads_a_save_to_disk_folder(cli, tmp_path):
    rng = np.random.default_rng(6)
    ds = make_dataset(rng, n=50)
    folder = str(tmp_path / "ds")
    ds.save_to_disk(folder)
    run = ["loader-stats", "--source", folder, "--seq-len", "32", "--batch", "2", "--quiet"]
    out = cli(*run, "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["documents"] == 50
    assert report["tokens"] == sum(len(r) for r in ds["input_ids"]), report
    labels = cli(*run, "--column", "text")
    assert labels.returncode != 0 and "column: 'text' is Utf8" in labels.stderr, labels.stderr
    assert labels.stderr.strip().count("\n") == 0
    # The CLI does not decode Parquet: one line saying how to convert it.
    path = str(tmp_path / "t.parquet")
    ds.to_parquet(path)
    run[2] = path
    parquet = cli(*run)
    assert parquet.returncode != 0, parquet.stdout
    assert "Parquet is decoded by the Python package" in parquet.stderr, parquet.stderr
    assert parquet.stderr.strip().count("\n") == 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
