"""Sealed Parquet segments read with O_DIRECT (``parquet_chunks``): the same rows as through
the page cache, only the column chunks a read needs, and no page left cached."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plateau.storage.data import parquet_chunks
from plateau.storage.data.decoded_cache import DecodedCache
from plateau.storage.data.direct_io import open_direct
from plateau.storage.data.parquet_chunks import column_ranges, leaf_indices
from plateau.storage.data.sealed_reader import SegmentReader
from plateau.storage.data.sealed_writer import PARQUET_ROW_GROUP, write_sealed
from tests.unit.test_direct_reads import _disk_dir, drop_cached
from tests.unit.test_engine_reads import _resident_pages

ROWS = 2 * PARQUET_ROW_GROUP + 1234  # three row groups, the last one short


def _table() -> pa.Table:
    n = ROWS
    return pa.table(
        {
            "time": pa.array(range(n), pa.int64()),
            "model": pa.array([f"model-{i % 5}" for i in range(n)]),  # dictionary-encoded
            "tags": pa.array([[f"t{i % 7}", None] if i % 3 else None for i in range(n)]),
            "point": pa.array([{"x": i, "y": i / 3} for i in range(n)]),
            "label": pa.array(["a", "b", "c"] * (n // 3) + ["a"] * (n % 3)).dictionary_encode(),
            "blob": pa.Array.from_buffers(
                pa.binary(24), n, [None, pa.py_buffer(os.urandom(24 * n))]
            ),
            "score": pa.array([None if i % 11 == 0 else i * 0.5 for i in range(n)]),
        }
    )


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    table = _table()
    path = _disk_dir(tmp_path_factory.mktemp("parquet")) / "seg.parquet"
    write_sealed(path, table, "parquet", "zstd", adaptive=True)
    return path, pq.read_table(path)


def _reader(path: Path, direct: bool) -> SegmentReader:
    return SegmentReader(path, "parquet", DecodedCache(64 << 20), drop_pages=True, direct=direct)


@pytest.mark.parametrize(
    "columns",
    [None, ("time",), ("point",), ("tags", "blob"), ("score", "label", "time"), ("model",)],
)
def test_direct_reads_return_the_rows_the_page_cache_does(
    segment: tuple[Path, pa.Table], columns: tuple[str, ...] | None
) -> None:
    path, table = segment
    direct, buffered = _reader(path, True), _reader(path, False)
    try:
        assert direct.direct and not buffered.direct
        for start, count in [(0, 10_000), (60_000, 10_000), (PARQUET_ROW_GROUP - 1, 2), (0, ROWS)]:
            got = direct.read(start, count, columns)
            assert got.equals(buffered.read(start, count, columns))
            want = table.slice(start, count)
            assert got.equals(want if columns is None else want.select(list(columns)))
    finally:
        direct.close()
        buffered.close()


def test_a_direct_scan_leaves_no_pages_cached(segment: tuple[Path, pa.Table]) -> None:
    path, table = segment
    drop_cached(path)
    before = _resident_pages(path)
    reader = _reader(path, True)
    try:
        got = [reader.read(start, 10_000) for start in range(0, reader.rows, 10_000)]
        assert pa.concat_tables(got).equals(table)
        # the footer is all that may be cached: the reader's open reads the file's last
        # 64 KiB through the page cache (Parquet's default footer read), or more for a
        # larger footer
        footer = max(pq.read_metadata(path).serialized_size, 64 << 10) // 4096 + 2
        assert _resident_pages(path) - before <= footer
    finally:
        reader.close()


def test_a_projection_reads_only_its_column_chunks(segment: tuple[Path, pa.Table]) -> None:
    path, table = segment
    meta = pq.read_metadata(path)
    group = meta.row_group(1)
    leaves = leaf_indices(table.schema, ["tags", "score"])
    # time, model, tags (one leaf: the list's element), point (two: x, y), label, blob, score
    assert leaves == [2, 7]
    ranges = column_ranges(group, leaves)
    wanted = sum(group.column(i).total_compressed_size for i in leaves)
    assert sum(length for _, length in ranges) == wanted < group.total_byte_size
    # adjacent chunks merge into one read
    everything = column_ranges(group, range(group.num_columns))
    assert len(everything) == 1
    assert everything[0][1] == sum(
        group.column(i).total_compressed_size for i in range(group.num_columns)
    )


def test_a_refused_direct_read_falls_back_to_the_page_cache(
    segment: tuple[Path, pa.Table], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device refusing O_DIRECT part-way cannot be made on demand here: the refusal is
    simulated (the one mock in this file), the fallback that follows is real."""
    path, table = segment

    def refuse(self: object, chunk: int, columns: object) -> pa.Table:
        raise OSError(22, "Invalid argument")

    reader = _reader(path, True)
    try:
        assert reader.direct
        monkeypatch.setattr(parquet_chunks.DirectRowGroups, "read", refuse)
        assert reader.read(70_000, 100).equals(table.slice(70_000, 100))
        assert reader.read(0, 5, ("time",)).equals(table.slice(0, 5).select(["time"]))
        assert not reader.direct
    finally:
        reader.close()


def test_tmpfs_segments_are_read_through_the_page_cache(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm on this machine")  # not a component CI installs: an OS mount
    path = shm / f"plateau-test-{os.getpid()}.parquet"
    try:
        table = _table().slice(0, 1000)
        write_sealed(path, table, "parquet", "zstd", adaptive=True)
        if open_direct(path) is not None:
            return  # this machine's /dev/shm takes O_DIRECT: nothing to fall back from
        reader = _reader(path, True)
        try:
            assert not reader.direct
            assert reader.read(0, 1000).equals(pq.read_table(path))
        finally:
            reader.close()
    finally:
        path.unlink(missing_ok=True)


def _text_table() -> pa.Table:
    """Text columns a seal gives a dictionary, one whose dictionary overflows, and one without."""
    n = ROWS
    late = [f"{i:08d}-" + "x" * 200 for i in range(n)]  # unique and long past the sample
    return pa.table(
        {
            "time": pa.array(range(n), pa.int64()),
            "model": pa.array([None if i % 13 == 0 else f"model-{i % 5}" for i in range(n)]),
            "region": pa.array([f"region-{i % 8}" for i in range(n)], pa.large_string()),
            "status": pa.array([b"ok", b"error"] * (n // 2) + [b"ok"] * (n % 2), pa.binary()),
            # repeats in the seal's sample, then every value differs: Parquet's writer
            # falls back from the dictionary to plain pages within the row group
            "request": pa.array(["same"] * 4096 + late[4096:]),
            "payload": pa.array([f"{i * 7919:012d}" for i in range(n)]),  # no dictionary
        }
    )


@pytest.fixture(scope="module")
def text_segment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    table = _text_table()
    path = _disk_dir(tmp_path_factory.mktemp("parquet-text")) / "seg.parquet"
    write_sealed(path, table, "parquet", "zstd", adaptive=True)
    return path, table


def test_text_stored_with_a_dictionary_is_decoded_as_one(
    text_segment: tuple[Path, pa.Table],
) -> None:
    """Which columns the reader asks Arrow for as dictionaries: text with a dictionary page."""
    path, table = text_segment
    meta = pq.read_metadata(path)
    names = table.schema.names
    for g in range(meta.num_row_groups):
        chosen = [
            names[i] for i in parquet_chunks.dictionary_leaves(meta.row_group(g), table.schema)
        ]
        assert {"model", "region", "status", "request"} <= set(chosen)
        assert "time" not in chosen and "payload" not in chosen


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("columns", [None, ("request", "model"), ("status",), ("payload",)])
def test_text_read_as_dictionaries_comes_back_as_written(
    text_segment: tuple[Path, pa.Table], direct: bool, columns: tuple[str, ...] | None
) -> None:
    """Same types (no dictionary the writer did not send), values and nulls as written,
    whole row groups or pages across them, the overflowed dictionary included."""
    path, table = text_segment
    reader = _reader(path, direct)
    try:
        assert reader.direct == direct
        assert reader.schema.equals(table.schema)
        for start, count in [(0, ROWS), (4000, 200), (PARQUET_ROW_GROUP - 5, 10_000)]:
            got = reader.read(start, count, columns)
            want = table.slice(start, count)
            want = want if columns is None else want.select(list(columns))
            assert got.schema.equals(want.schema)
            assert got.equals(want)
    finally:
        reader.close()


def test_a_column_the_client_sent_as_a_dictionary_stays_one(
    segment: tuple[Path, pa.Table],
) -> None:
    path, table = segment
    reader = _reader(path, True)
    try:
        got = reader.read(0, ROWS, ("label", "model"))
        assert pa.types.is_dictionary(got.schema.field("label").type)
        assert got.schema.field("model").type == pa.string()
        assert got.equals(table.select(["label", "model"]))
    finally:
        reader.close()
