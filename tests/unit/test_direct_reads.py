"""Sealed arrow segments read with O_DIRECT: the footer's block offsets, and the reader."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from plateau.storage.data.arrow_footer import (
    Block,
    batch_header,
    batch_metadata,
    record_batch_blocks,
)
from plateau.storage.data.decoded_cache import DecodedCache
from plateau.storage.data.direct_io import open_direct, read_bytes_direct
from plateau.storage.data.sealed_reader import SegmentReader
from plateau.storage.data.sealed_writer import write_sealed
from tests.unit.test_engine_reads import _resident_pages

NESTED = pa.table(
    {
        "time": pa.array(range(300), pa.int64()),
        "tags": pa.array([[f"t{i}", None] if i % 3 else None for i in range(300)]),
        "point": pa.array([{"x": i, "y": float(i) / 3} for i in range(300)]),
        "blob": pa.array([os.urandom(i % 50) for i in range(300)], pa.binary()),
    }
)


def _file(path: Path, table: pa.Table, compression: str | None, batch_rows: int) -> None:
    options = ipc.IpcWriteOptions(compression=compression)
    with ipc.new_file(str(path), table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=batch_rows)


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
@pytest.mark.parametrize("batch_rows", [1, 7, 300])
def test_footer_blocks_are_the_record_batches(
    tmp_path: Path, compression: str | None, batch_rows: int
) -> None:
    path = tmp_path / "f.arrow"
    _file(path, NESTED, compression, batch_rows)
    fd = os.open(path, os.O_RDONLY)
    try:
        blocks = record_batch_blocks(fd)
        reader = ipc.open_file(str(path))
        assert len(blocks) == reader.num_record_batches
        for i, block in enumerate(blocks):
            message = ipc.read_message(pa.py_buffer(os.pread(fd, block.length, block.offset)))
            assert ipc.read_record_batch(message, reader.schema).equals(reader.get_batch(i))
    finally:
        os.close(fd)


@pytest.mark.parametrize("compression", [None, "lz4"])
@pytest.mark.parametrize("batch_rows", [1, 7, 300])
def test_batch_row_counts_come_from_the_metadata_alone(
    tmp_path: Path, compression: str | None, batch_rows: int
) -> None:
    path = tmp_path / "f.arrow"
    options = ipc.IpcWriteOptions(compression=compression)
    with ipc.new_file(str(path), NESTED.schema, options=options) as writer:
        writer.write_batch(NESTED.to_batches()[0].slice(0, 0))  # an empty batch too
        writer.write_table(NESTED, max_chunksize=batch_rows)
    reader = ipc.open_file(str(path))
    expected = [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
    assert expected[0] == 0 and sum(expected) == NESTED.num_rows
    fd = os.open(path, os.O_RDONLY)
    try:
        blocks = record_batch_blocks(fd)
        headers = [batch_header(meta) for meta in batch_metadata(fd, blocks)]
        assert [h.rows for h in headers] == expected
        assert {h.codec for h in headers} == ({None} if compression is None else {0})
        broken = [Block(b.offset + 8, b.meta_length, 0) for b in blocks]
        with pytest.raises(ValueError):
            [batch_header(meta) for meta in batch_metadata(fd, broken)]  # not a message start
    finally:
        os.close(fd)


def test_a_file_without_batches_has_no_blocks(tmp_path: Path) -> None:
    path = tmp_path / "f.arrow"
    _file(path, NESTED.schema.empty_table(), None, 10)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert record_batch_blocks(fd) == []
    finally:
        os.close(fd)


def _bad_root(data: bytes) -> bytes:
    footer_size = int.from_bytes(data[-10:-6], "little")
    start = len(data) - 10 - footer_size
    return data[:start] + (2**31).to_bytes(4, "little") + data[start + 4 :]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:-3],  # torn trailer
        lambda data: data[:-10] + (10**9).to_bytes(4, "little") + data[-6:],  # footer too long
        lambda data: data[:6] + bytes(100),  # no footer at all
        _bad_root,  # the footer's root table points outside it
    ],
)
def test_a_broken_footer_is_a_value_error(tmp_path: Path, damage: object) -> None:
    good = tmp_path / "good.arrow"
    _file(good, NESTED, None, 100)
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(damage(good.read_bytes()))  # type: ignore[operator]
    fd = os.open(bad, os.O_RDONLY)
    try:
        with pytest.raises(ValueError):
            record_batch_blocks(fd)
    finally:
        os.close(fd)


def _disk_dir(tmp_path: Path) -> Path:
    """``tmp_path`` must allow O_DIRECT (a disk filesystem, not tmpfs) for these tests."""
    probe = tmp_path / "probe"
    probe.write_bytes(b"x" * 4096)
    fd = open_direct(probe)
    if fd is None:
        if os.environ.get("CI") == "true":
            raise AssertionError(f"{tmp_path} does not support O_DIRECT; CI needs a disk tmp dir")
        pytest.skip(f"{tmp_path} is on a filesystem without O_DIRECT (tmpfs?)")
    os.close(fd)
    return tmp_path


def drop_cached(path: Path) -> None:
    """Drop ``path``'s pages from the page cache, so that what a read leaves there shows."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_read_bytes_direct_returns_exactly_the_unaligned_range(tmp_path: Path) -> None:
    path = _disk_dir(tmp_path) / "f"
    data = os.urandom(3 * 4096 + 123)
    path.write_bytes(data)
    fd = open_direct(path)
    assert fd is not None
    try:
        for offset, length in [(0, 1), (1, 4096), (4095, 2), (5000, 7000), (0, len(data))]:
            assert (
                read_bytes_direct(fd, offset, length).to_pybytes() == data[offset : offset + length]
            )
        with pytest.raises(OSError):
            read_bytes_direct(fd, len(data) - 10, 20)  # past the end: a short read
    finally:
        os.close(fd)


def test_a_direct_scan_reads_every_row_and_leaves_no_pages_cached(tmp_path: Path) -> None:
    values = pa.Array.from_buffers(pa.binary(100), 10_000, [None, pa.py_buffer(os.urandom(10**6))])
    batch = pa.table({"x": pa.array(range(10_000), pa.int64()), "v": values})
    table = pa.concat_tables([batch] * 16)
    path = _disk_dir(tmp_path) / "seg.arrow"
    write_sealed(path, table, "arrow", "lz4")
    drop_cached(path)
    pages = _resident_pages(path)
    reader = SegmentReader(path, "arrow", DecodedCache(4 << 20), drop_pages=False, direct=True)
    try:
        assert reader.direct
        got = [reader.read(start, 10_000) for start in range(0, reader.rows, 10_000)]
        assert pa.concat_tables(got).equals(table)
        # only what counting the rows read (the first column) went through the page cache
        size_pages = path.stat().st_size // 4096
        assert _resident_pages(path) - pages < size_pages // 8
    finally:
        reader.close()


def _assert_read_buffered(path: Path, table: pa.Table) -> None:
    reader = SegmentReader(path, "arrow", DecodedCache(1 << 20), direct=True)
    try:
        assert not reader.direct
        assert reader.read(0, table.num_rows).equals(table)
    finally:
        reader.close()


def test_dictionary_columns_and_tmpfs_are_read_through_the_page_cache(tmp_path: Path) -> None:
    dictionary = pa.table({"k": pa.array(["a", "b", "a"] * 100).dictionary_encode()})
    path = _disk_dir(tmp_path) / "dict.arrow"
    write_sealed(path, dictionary, "arrow", "lz4")
    _assert_read_buffered(path, dictionary)
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as d:
        path = Path(d) / "seg.arrow"
        write_sealed(path, NESTED, "arrow", "lz4")
        if open_direct(path) is not None:
            return  # this machine's /dev/shm takes O_DIRECT: nothing to fall back from
        _assert_read_buffered(path, NESTED)
