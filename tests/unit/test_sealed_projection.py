"""A focused read decodes only the columns it needs from a sealed segment.

Checked through the decoded cache: the projection is cached under its
columns and the whole chunk never is (it was never decoded).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plateau.storage.data.decoded_cache import DecodedCache
from plateau.storage.data.sealed_reader import SegmentReader

ROWS = 3000


def table() -> pa.Table:
    return pa.table(
        {
            "time": pa.array(range(ROWS), pa.int64()),
            "wide": pa.array([f"payload-{i:08d}" * 20 for i in range(ROWS)]),
            "score": pa.array([i * 0.5 for i in range(ROWS)], pa.float64()),
        }
    )


def write(path: Path, fmt: str) -> None:
    data = table()
    if fmt == "parquet":
        pq.write_table(data, path, row_group_size=1000)
        return
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_file(path, data.schema, options=options) as writer:
        for batch in data.to_batches(max_chunksize=1000):
            writer.write_batch(batch)


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_projection_decodes_only_its_columns(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"seg.{fmt}"
    write(path, fmt)
    cache = DecodedCache(64 << 20)
    reader = SegmentReader(path, fmt, cache, drop_pages=False)
    try:
        got = reader.read(500, 1000, ("time", "score"))
        assert got.column_names == ["time", "score"]
        assert got.column("time").to_pylist() == list(range(500, 1500))
        assert got.column("score").to_pylist() == [i * 0.5 for i in range(500, 1500)]
        for chunk in (0, 1):
            assert (reader.key, (chunk, ("time", "score"))) in cache
            assert (reader.key, chunk) not in cache, "the whole chunk was decoded"
        projected = cache.used
        whole = reader.read(500, 1000)
        assert whole.column_names == ["time", "wide", "score"]
        assert cache.used > 5 * projected  # the wide column is most of a chunk
        # asking for every column is the whole read, cached once
        everything = reader.read(0, 10, ("time", "wide", "score"))
        assert everything.equals(table().slice(0, 10))
        assert (reader.key, (0, ("time", "wide", "score"))) not in cache
    finally:
        reader.close()
