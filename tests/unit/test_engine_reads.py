"""Reads over long histories: sealed segments opened only as reached, decoded runs cached."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import mmap
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prometheus_client import REGISTRY

from plateau.protocol.topic_config import TopicConfigRequest
from plateau.protocol.values import Order, RecordStatus, Span
from plateau.storage.data.decoded_cache import DecodedCache
from plateau.storage.data.durable_io import PageDropper
from plateau.storage.data.reader_cache import ReaderCache
from plateau.storage.data.sealed_reader import SegmentReader
from plateau.storage.data.sealed_writer import write_sealed
from plateau.storage.engine import Engine
from plateau.storage.types import SegmentId
from tests.conftest import EngineFactory
from tests.unit.conftest import append_retrying, wait_for


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"x": pa.array(range(lo, hi), pa.int64())})


def sealed_history(make_engine: EngineFactory, fmt: str, segments: int) -> tuple[Engine, int]:
    e = make_engine()
    e.put_topic(
        "t",
        TopicConfigRequest.model_validate(
            {"partitions": 2, "segment": {"format": fmt, "max_rows": 100}}
        ),
    )
    for p in ("0", "1"):
        for i in range(segments):
            append_retrying(e, "t", p, rows(i * 100, (i + 1) * 100))
    total = segments * 100
    usage = e.topic_usage
    wait_for(lambda: all(usage("t").partitions[p].segments >= segments - 1 for p in ("0", "1")))
    return e, total


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_iteration_from_a_cursor_opens_only_segments_it_reads(
    make_engine: EngineFactory, fmt: str
) -> None:
    e, total = sealed_history(make_engine, fmt, 20)
    page = e.iterate_topic("t", {"0": total - 150, "1": total - 150}, 100)
    assert page.table.column("x").to_pylist() == list(range(total - 150, total - 100)) * 2
    assert page.next == {"0": total - 100, "1": total - 100}
    # the last 150 rows of each partition lie in its last two segments
    assert e._cache.open_readers() <= 4


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_small_pages_across_sealed_segments_return_every_row_once(
    make_engine: EngineFactory, fmt: str
) -> None:
    e, total = sealed_history(make_engine, fmt, 6)
    cursor: dict[str, int] = {}
    seen: dict[str, list[int]] = {"0": [], "1": []}
    while True:
        page = e.iterate_topic("t", cursor, 30)
        start = dict(cursor)
        values = page.table.column("x").to_pylist()
        for p in ("0", "1"):
            got = page.next[p] - start.get(p, 0)
            seen[p].extend(values[:got])
            values = values[got:]
        cursor = page.next
        if page.status == RecordStatus.ALL:
            break
    assert seen == {"0": list(range(total)), "1": list(range(total))}


def test_descending_pages_stop_at_a_schema_change_between_sealed_segments(
    make_engine: EngineFactory,
) -> None:
    e = make_engine()
    e.put_topic("t", TopicConfigRequest.model_validate({"segment": {"max_rows": 50}}))
    for i in range(4):
        append_retrying(e, "t", "0", rows(i * 50, (i + 1) * 50))
    append_retrying(e, "t", "0", pa.table({"y": pa.array(["a"] * 50)}))
    for i in range(5, 7):
        append_retrying(e, "t", "0", rows(i * 50, (i + 1) * 50))
    wait_for(lambda: e.topic_usage("t").partitions["0"].segments >= 6)
    first = e.iterate_topic("t", {}, 100, Order.DESC)
    assert first.table.column("x").to_pylist() == list(range(349, 249, -1))
    assert first.next == {"0": 250}
    second = e.iterate_topic("t", first.next, 100, Order.DESC)
    assert second.table.column("y").to_pylist() == ["a"] * 50
    assert second.status == RecordStatus.SCHEMA_CHANGE
    third = e.iterate_topic("t", second.next, 120, Order.DESC)
    assert third.table.column("x").to_pylist() == list(range(199, 79, -1))
    assert third.status == RecordStatus.RECORD_LIMITED
    assert e.read_partition("t", "0", 0, 1000).span == Span(0, 200)


def test_decoded_cache_keeps_within_its_budget_least_recent_out() -> None:
    table = pa.table({"v": pa.array(range(1000), pa.int64())})  # 8000 bytes
    cache = DecodedCache(20_000)
    cache.put("a", 0, table)
    cache.put("b", 0, table)
    assert cache.get("a", 0) is not None  # "a" is now the most recently used
    assert cache.get("a", 1) is None  # another chunk of the same segment is not cached
    cache.put("c", 3, table)  # over budget: "b", least recently used, goes
    assert cache.get("b", 0) is None
    assert cache.get("a", 0) is not None and cache.get("c", 3) is not None
    cache.put("big", 0, pa.concat_tables([table] * 3))  # larger than the budget: not kept
    assert cache.get("big", 0) is None and cache.get("c", 3) is not None
    cache.put("c", 4, table.slice(0, 100))  # 800 bytes: fits beside "a" and "c"/3
    cache.drop("c")  # a closed or deleted segment: all its chunks go
    assert cache.get("c", 3) is None and cache.get("c", 4) is None
    assert cache.get("a", 0) is not None


def _chunks_decoded(how: str) -> float:
    return float(REGISTRY.get_sample_value("plateau_read_chunks_decoded_total", {"how": how}) or 0)


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_a_forward_read_finds_the_next_chunks_decoded_ahead(tmp_path: Path, fmt: str) -> None:
    """Reading forward, the chunks past the one read are decoded in the background, and
    reading them then decodes nothing on demand; the rows are the same either way."""
    batch = rows(0, 70_000)  # parquet: two row groups of 65,536 and 4,464 rows
    table = pa.concat_tables([batch, rows(70_000, 140_000)])
    path = tmp_path / f"seg.{fmt}"
    write_sealed(path, table, fmt, "lz4")
    cache = ReaderCache(decoded_bytes=64 << 20)
    try:
        reader = cache.get(SegmentId(1), path, fmt)
        assert reader.chunks >= 2
        assert reader.read(0, 10).column("x").to_pylist() == list(range(10))
        wait_for(lambda: all((reader.key, c) in cache._decoded for c in range(reader.chunks)))
        demand = _chunks_decoded("demand")
        got = reader.read(10, table.num_rows)
        assert got.column("x").equals(table.column("x").slice(10))
        assert _chunks_decoded("demand") == demand
    finally:
        cache.close()


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_a_forward_read_lets_go_of_the_chunks_it_went_past(tmp_path: Path, fmt: str) -> None:
    """A partition read going forward never needs a chunk behind it again: once a page ends
    past a chunk, the decoded cache no longer holds it (the read pool reuses its memory);
    the chunk the page ends in stays, and a read that is not forward keeps what it read."""
    # arrow: 3 batches; parquet: row groups of 65,536, 65,536 and 8,928 rows
    table = pa.concat_tables([rows(0, 70_000), rows(70_000, 100_000), rows(100_000, 140_000)])
    path = tmp_path / f"seg.{fmt}"
    write_sealed(path, table, fmt, "lz4")
    cache = ReaderCache(decoded_bytes=64 << 20)
    try:
        reader = cache.get(SegmentId(1), path, fmt)
        ends = reader._starts[1:]
        cut = ends[0]
        got = reader.read(cut - 10, 20, forward=True)  # across the first chunk's end
        assert got.column("x").to_pylist() == list(range(cut - 10, cut + 10))
        assert (reader.key, 0) not in cache._decoded  # went past it
        assert (reader.key, 1) in cache._decoded  # the page ends inside it
        got = reader.read(cut + 10, ends[1] - cut - 10, forward=True)  # ends exactly at a chunk end
        assert got.column("x").to_pylist() == list(range(cut + 10, ends[1]))
        assert (reader.key, 1) not in cache._decoded
        reader.read(ends[1], 5)  # not forward (a reverse page): what it read stays
        assert (reader.key, 2) in cache._decoded
        reader.read(ends[1] - 5, 10)
        assert (reader.key, 1) in cache._decoded and (reader.key, 2) in cache._decoded
    finally:
        cache.close()


def test_a_descending_topic_scan_decodes_each_chunk_once(make_engine: EngineFactory) -> None:
    """Pages of a descending iteration go backwards through a row group: none of them
    lets the row group go while pages before it still need it."""
    e = make_engine()
    e.put_topic(
        "t",
        TopicConfigRequest.model_validate(
            {"partitions": 1, "segment": {"format": "parquet", "max_rows": 200_000}}
        ),
    )
    append_retrying(e, "t", "0", rows(0, 140_000))
    e.close()
    e = make_engine()  # reopened: the open segment sealed, read back from its file
    demand = _chunks_decoded("demand")
    cursor: dict[str, int] = {}
    seen = []
    while True:
        page = e.iterate_topic("t", cursor, 10_000, Order.DESC)
        seen += page.table.column("x").to_pylist()
        cursor = page.next
        if page.status == RecordStatus.ALL:
            break
    assert seen == list(range(139_999, -1, -1))
    assert _chunks_decoded("demand") - demand <= 3  # 3 row groups: each decoded at most once


def test_nearing_a_segments_end_opens_and_decodes_the_next_segment(
    make_engine: EngineFactory,
) -> None:
    e = make_engine()
    e.put_topic("t", TopicConfigRequest.model_validate({"segment": {"max_rows": 1000}}))
    for i in range(3):
        append_retrying(e, "t", "0", rows(i * 1000, (i + 1) * 1000))
    wait_for(lambda: len(e._topic("t").partitions["0"].view().sealed) >= 2)
    demand, ahead = _chunks_decoded("demand"), _chunks_decoded("ahead")
    result = e.read_partition("t", "0", 0, 10)  # near the first segment's end (it is small)
    assert result.span == Span(0, 10)
    wait_for(lambda: _chunks_decoded("ahead") >= ahead + 1)
    got = e.read_partition("t", "0", 1000, 10)  # the second segment: decoded ahead
    assert got.table.column("x").to_pylist() == list(range(1000, 1010))
    assert _chunks_decoded("demand") == demand + 1  # only the very first chunk waited


def _resident_pages(path: Path) -> int:
    """Pages of ``path`` in the page cache (mincore(2) on a mapping of it)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    # a private writable mapping, so ctypes can take its address; no page is touched
    prot = mmap.PROT_READ | mmap.PROT_WRITE
    with (
        path.open("rb") as f,
        mmap.mmap(f.fileno(), size, flags=mmap.MAP_PRIVATE, prot=prot) as m,
    ):
        address = ctypes.c_char.from_buffer(m)
        vec = (ctypes.c_ubyte * pages)()
        try:
            if libc.mincore(ctypes.addressof(address), size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del address
        return sum(v & 1 for v in vec)


@pytest.mark.parametrize("drop", [True, False])
def test_synced_pages_leave_the_page_cache_only_when_asked(tmp_path: Path, drop: bool) -> None:
    path = tmp_path / "f"
    dropper = PageDropper(drop)
    with path.open("wb", buffering=0) as f:
        f.write(os.urandom(1 << 20))
        dropper.sync(f.fileno())
        f.write(os.urandom(100_000))  # more, then a second sync drops only the new pages
        dropper.sync(f.fileno())
    resident = _resident_pages(path)
    if drop:
        assert resident <= 1  # the partial last page stays: the next write extends it
    else:
        assert resident == (path.stat().st_size + mmap.PAGESIZE - 1) // mmap.PAGESIZE


def test_opening_a_cold_arrow_segment_reads_little_of_it(tmp_path: Path) -> None:
    """A history read's first page must not wait for the whole segment to come off disk."""
    values = pa.Array.from_buffers(pa.binary(100), 10_000, [None, pa.py_buffer(os.urandom(10**6))])
    batch = pa.table({"x": pa.array(range(10_000), pa.int64()), "v": values})
    path = tmp_path / "seg.arrow"  # 16 batches of about 1 MB, incompressible
    write_sealed(path, pa.concat_tables([batch] * 16), "arrow", "lz4")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    assert _resident_pages(path) == 0
    reader = SegmentReader(path, "arrow")
    try:
        assert reader.rows == 160_000
        pages = (path.stat().st_size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        assert _resident_pages(path) < pages // 4
        assert reader.read(155_000, 3).column("x").to_pylist() == [5000, 5001, 5002]
    finally:
        reader.close()


@pytest.mark.parametrize("drop", [True, False])
def test_a_history_scan_leaves_the_page_cache_as_it_found_it(tmp_path: Path, drop: bool) -> None:
    """Read once, decoded, dropped: a scan of old arrow segments leaves no pages behind."""
    fmt = "arrow"
    values = pa.Array.from_buffers(pa.binary(100), 10_000, [None, pa.py_buffer(os.urandom(10**6))])
    batch = pa.table({"x": pa.array(range(10_000), pa.int64()), "v": values})
    path = tmp_path / f"seg.{fmt}"
    table = pa.concat_tables([batch] * 16)
    write_sealed(path, table, fmt, "lz4")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    pages = (path.stat().st_size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    reader = SegmentReader(path, fmt, DecodedCache(4 << 20), drop_pages=drop)
    try:
        got = [reader.read(start, 10_000) for start in range(0, reader.rows, 10_000)]
        assert pa.concat_tables(got).column("x").equals(table.column("x"))
        resident = _resident_pages(path)
    finally:
        reader.close()
    if drop:
        assert resident < pages // 8, (resident, pages)
    else:
        assert resident > pages // 2, (resident, pages)


def _descriptors_of(path: Path) -> int:
    count = 0
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):  # a descriptor closed while we look
            count += fd.readlink() == path
    return count


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_an_evicted_reader_releases_its_file(tmp_path: Path, fmt: str) -> None:
    """Retention evicts a deleted segment's reader without closing it (a read may be in flight):
    once the last reference goes, no descriptor may keep the deleted file's space in use."""
    path = tmp_path / f"seg.{fmt}"
    write_sealed(path, rows(0, 1000), fmt, "lz4")
    cache = ReaderCache()
    try:
        reader = cache.get(SegmentId(1), path, fmt)
        assert reader.read(0, 3).column("x").to_pylist() == [0, 1, 2]
        assert _descriptors_of(path) >= 1
        cache.evict(SegmentId(1))
        del reader
        gc.collect()
        assert _descriptors_of(path) == 0
    finally:
        cache.close()


def test_closing_the_cache_closes_its_readers(tmp_path: Path) -> None:
    path = tmp_path / "seg.arrow"
    write_sealed(path, rows(0, 1000), "arrow", "lz4")
    cache = ReaderCache()
    reader = cache.get(SegmentId(1), path, "arrow")
    reader.read(0, 10)
    cache.close()
    assert _descriptors_of(path) == 0


def test_parquet_dictionaries_only_for_columns_whose_values_repeat(tmp_path: Path) -> None:
    n = 20_000
    table = pa.table(
        {
            "time": pa.array(range(n), pa.int64()),
            "key": [f"key-{i % 50}" for i in range(n)],
            "payload": [os.urandom(32) for _ in range(n)],
        }
    )
    path = tmp_path / "seg.parquet"
    write_sealed(path, table, "parquet", "zstd")
    meta = pq.ParquetFile(path).metadata.row_group(0)
    dictionary = {
        meta.column(i).path_in_schema: meta.column(i).has_dictionary_page for i in range(3)
    }
    assert dictionary == {"time": False, "key": True, "payload": False}
    assert pq.read_table(path).equals(table)


def test_open_parquet_readers_hold_no_raw_row_groups(tmp_path: Path) -> None:
    """An open reader must not keep the raw bytes of the row group it last read (pyarrow's
    pre-buffering does): with 32 open readers that was 256 MiB beside the decoded cache."""
    values = pa.Array.from_buffers(
        pa.binary(100), 20_000, [None, pa.py_buffer(os.urandom(2 * 10**6))]
    )
    table = pa.table({"x": pa.array(range(20_000), pa.int64()), "v": values})
    readers = []
    try:
        before = pa.total_allocated_bytes()
        for i in range(4):
            path = tmp_path / f"seg{i}.parquet"
            write_sealed(path, table, "parquet", "zstd")
            reader = SegmentReader(path, "parquet", DecodedCache(0))
            readers.append(reader)
            assert reader.read(0, 10).column("x").to_pylist() == list(range(10))
        gc.collect()
        held = pa.total_allocated_bytes() - before
        assert held < 1 << 20, held  # 4 row groups of 2 MB would be 8 MB
    finally:
        for reader in readers:
            reader.close()


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_a_small_topic_page_of_a_large_chunk_holds_only_its_own_rows(
    make_engine: EngineFactory, fmt: str
) -> None:
    """A topic page cut from a large decoded chunk (a parquet row group, an arrow batch)
    is copied, so it does not keep the whole chunk alive outside the read cache (a topic
    page takes a few rows of many partitions); every kind of column comes back equal.
    A partition read is not copied: the server encodes it into its reply at once, and
    that copy of a 10,000-row page of a 65,536-row row group cost a tenth of a read."""
    n = 20_000
    table = pa.table(
        {
            "x": pa.array(range(n), pa.int64()),
            "s": pa.array([f"value {i}" for i in range(n)]),
            "l": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int32())),
            "st": pa.array([{"a": i, "b": str(i)} for i in range(n)]),
            "d": pa.array(["red", "green", "blue", "green"] * (n // 4)).dictionary_encode(),
        }
    )
    e = make_engine()
    e.put_topic(
        "t",
        TopicConfigRequest.model_validate({"segment": {"format": fmt, "max_rows": n}}),
    )
    append_retrying(e, "t", "0", table)
    append_retrying(e, "t", "0", table.slice(0, 1))  # rolls the full segment to the sealer
    wait_for(lambda: e.topic_usage("t").partitions["0"].segments >= 1)
    want = table.slice(5_000, 500)
    page = e.iterate_topic("t", {"0": 5_000}, 500).table
    assert page.select(table.column_names).to_pylist() == want.to_pylist()  # (+ the time)
    assert page.get_total_buffer_size() < 2 * page.nbytes
    read = e.read_partition("t", "0", 5_000, 500, None, None).table
    assert read.select(table.column_names).to_pylist() == want.to_pylist()
    assert read.get_total_buffer_size() > 4 * read.nbytes  # a slice of the decoded chunk
