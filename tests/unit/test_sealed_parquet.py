"""What a sealed Parquet file holds per column: dictionaries, statistics, codecs.

Read back from the file's own footer, as Spark and the node's readers see it:
``time`` plain (never a dictionary) with statistics; a text column of few values
dictionary-encoded without statistics (its dictionary prunes row groups, see
tests/spark/test_spark_pruning.py); every other column with statistics.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from plateau.storage.data.sealed_writer import (
    MIN_SAVING,
    dictionary_savings,
    parquet_leaf_paths,
    statistics_columns,
    write_sealed,
)

ROWS = 10_000
REGIONS = ("eu-west-1", "us-east-1", "ap-south-1")
T0 = 1_700_000_000_000


def table() -> pa.Table:
    return pa.table(
        {
            # several rows a millisecond: repeats enough for a dictionary, never gets one
            "time": pa.array([T0 + i // 4 for i in range(ROWS)], pa.int64()),
            "region": pa.array([REGIONS[i % 3] for i in range(ROWS)]),
            "blob": pa.array([bytes([i % 7]) * 3 for i in range(ROWS)], pa.binary()),
            "request": pa.array([f"req-{i * 7919 % ROWS:08d}" for i in range(ROWS)]),
            "tokens": pa.array([i % 50 for i in range(ROWS)], pa.int32()),
            "point": pa.array([{"x": i % 5, "label": "ab"[i % 2]} for i in range(ROWS)]),
        }
    )


def columns(path: Path) -> dict[str, pq.ColumnChunkMetaData]:
    meta = pq.read_metadata(path).row_group(0)
    return {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}


def test_a_sealed_file_has_statistics_where_no_dictionary_prunes(tmp_path: Path) -> None:
    path = tmp_path / "seg.parquet"
    data = table()
    write_sealed(path, data, "parquet", "zstd", adaptive=True)
    assert pq.read_table(path).equals(data)  # what readers get is unchanged
    cols = columns(path)
    dictionary = {name for name, c in cols.items() if "RLE_DICTIONARY" in c.encodings}
    with_stats = {name for name, c in cols.items() if c.is_stats_set}
    assert dictionary == {"region", "blob", "tokens"}
    assert with_stats == {"time", "request", "tokens", "point.x", "point.label"}
    time_stats = cols["time"].statistics
    assert (time_stats.min, time_stats.max) == (T0, T0 + (ROWS - 1) // 4)


def test_an_explicit_codec_keeps_the_same_statistics(tmp_path: Path) -> None:
    """``segment.compression`` set: one codec for all, the same dictionaries and statistics."""
    path = tmp_path / "seg.parquet"
    write_sealed(path, table(), "parquet", "none", adaptive=False)
    cols = columns(path)
    assert {c.compression for c in cols.values()} == {"UNCOMPRESSED"}
    assert not cols["region"].is_stats_set and cols["time"].is_stats_set


def test_a_dictionary_column_is_compressed_only_where_its_indices_shrink(tmp_path: Path) -> None:
    """Few values chosen at random (a region per request) leave zstd nothing to take from the
    bit-packed indices: stored plain, no decompression on every read. A skewed column (a
    status that is nearly always "ok") and ``time`` still shrink, and are compressed."""
    rng = np.random.default_rng(3)
    rows = 70_000  # past one row group: the judgement is on the first
    statuses = rng.choice(4, rows, p=[0.93, 0.03, 0.03, 0.01])
    data = pa.table(
        {
            "time": pa.array(T0 + np.arange(rows) // 4, pa.int64()),
            "region": pa.array(
                np.array([f"region-{i}" for i in range(8)])[rng.integers(0, 8, rows)]
            ),
            "customer": pa.array(rng.integers(0, 1000, rows), pa.int64()),
            "status": pa.array(np.array(["ok", "timeout", "error", "rejected"])[statuses]),
        }
    )
    path = tmp_path / "seg.parquet"
    write_sealed(path, data, "parquet", "zstd", adaptive=True)
    assert pq.read_table(path).equals(data)
    meta = pq.read_metadata(path)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        codecs = {group.column(i).path_in_schema: group.column(i).compression for i in range(4)}
        assert codecs == {
            "time": "ZSTD",
            "region": "UNCOMPRESSED",
            "customer": "UNCOMPRESSED",
            "status": "ZSTD",
        }
    savings = dictionary_savings(data, "zstd", {"region", "customer", "status"})
    assert savings["region"] < MIN_SAVING <= savings["status"]
    assert dictionary_savings(data.slice(0, 0), "zstd", {"region"}) == {}


def test_statistics_columns_names_parquet_leaf_paths() -> None:
    schema = table().schema
    leaves = parquet_leaf_paths(schema)
    assert statistics_columns(schema, set(), leaves) == [
        "time", "region", "blob", "request", "tokens", "point.x", "point.label",
    ]  # fmt: skip
    # a nested column keeps its leaves' statistics even with a dictionary: only text loses them
    assert statistics_columns(schema, {"region", "point", "tokens"}, leaves) == [
        "time", "blob", "request", "tokens", "point.x", "point.label",
    ]  # fmt: skip
