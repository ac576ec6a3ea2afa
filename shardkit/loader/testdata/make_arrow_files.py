"""Writes the Arrow IPC files arrow_source_test.cc reads (pyarrow is the writer).

Run from the repository root: .venv/bin/python shardkit/loader/testdata/make_arrow_files.py
The documents are the ones arrow_source_test.cc expects (kDocs there).
"""

import os

import pyarrow as pa

DOCS = [[1, 2], [], [3, 4, 5], [6], [7, 8, 9, 10]]  # kDocs in arrow_source_test.cc
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "arrow")


def table(ids_type, docs=DOCS):
    # Columns before the tokens of several buffer counts (string, struct of
    # int + string, null), and one after.
    n = len(docs)
    return pa.table(
        {
            "text": pa.array([f"doc {i}" if i != 1 else None for i in range(n)], pa.string()),
            "meta": pa.array(
                [{"a": i, "b": str(i)} for i in range(n)],
                pa.struct([("a", pa.int64()), ("b", pa.large_string())]),
            ),
            "nothing": pa.nulls(n),
            "input_ids": pa.array(docs, ids_type),
            "attention_mask": pa.array([[1] * len(d or []) for d in docs], pa.list_(pa.int8())),
        }
    )


def write_stream(name, t, batch, **options):
    with pa.OSFile(os.path.join(OUT, name), "wb") as f:
        with pa.ipc.new_stream(f, t.schema, options=pa.ipc.IpcWriteOptions(**options)) as w:
            for b in t.to_batches(max_chunksize=batch):
                w.write_batch(b)


def main():
    os.makedirs(OUT, exist_ok=True)
    # The stream format, as datasets writes it: list<int32>, batches of 2 rows.
    write_stream("stream_int32.arrow", table(pa.list_(pa.int32())), 2)
    # The file format, large_list<uint16>, one batch.
    t = table(pa.large_list(pa.uint16()))
    with pa.OSFile(os.path.join(OUT, "file_large_uint16.arrow"), "wb") as f:
        with pa.ipc.new_file(f, t.schema) as w:
            w.write_table(t)
    # A null row (row 3), a null id, compressed batches.
    docs = [list(d) for d in DOCS]
    write_stream("null_row.arrow", table(pa.list_(pa.int32()), DOCS[:3] + [None] + DOCS[4:]), 8)
    write_stream("null_id.arrow", table(pa.list_(pa.int32()), [[1, None]] + DOCS[1:]), 8)
    write_stream("zstd.arrow", table(pa.list_(pa.int32()), docs), 8, compression="zstd")


if __name__ == "__main__":
    main()
