"""Files written through ``publish`` or ``publish_native`` start their writeback as written."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plateau.storage.data import durable_io
from plateau.storage.data.durable_io import (
    WRITE_BEHIND_BYTES,
    WRITE_BEHIND_IN_FLIGHT,
    PythonWriteBehind,
    publish,
    publish_native,
)
from plateau.storage.data.sealed_writer import write_sealed

WAIT = 1 | 4  # SYNC_FILE_RANGE_WAIT_BEFORE | WAIT_AFTER: the caller waits for the range


def watch_sync_file_range(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """(start, length, flags) of every ``sync_file_range`` call (each still made)."""
    calls: list[tuple[int, int, int]] = []
    real = durable_io.SYNC_FILE_RANGE
    assert real is not None  # glibc on Linux: the path under test

    def watch(fd: int, start: int, length: int, flags: int) -> int:
        calls.append((start, length, flags))
        return real(fd, start, length, flags)

    monkeypatch.setattr(durable_io, "SYNC_FILE_RANGE", watch)
    return calls


def started(calls: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """(start, length) of the writebacks started without waiting for them."""
    return [(start, n) for start, n, flags in calls if not flags & WAIT]


def test_every_byte_arrives_and_writeback_starts_every_few_mib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = watch_sync_file_range(monkeypatch)
    data = os.urandom(5 * WRITE_BEHIND_BYTES + 12345)
    piece = 100_000  # pyarrow writes in pieces like these

    def write(f: BinaryIO) -> None:
        assert isinstance(f, PythonWriteBehind)
        view = memoryview(data)
        for at in range(0, len(data), piece):
            f.write(view[at : at + piece])

    size = publish(tmp_path / "seg.parquet", write, drop_pages=True)
    assert size == len(data)
    assert (tmp_path / "seg.parquet").read_bytes() == data
    assert not (tmp_path / "seg.parquet.tmp").exists()
    # five writebacks, back to back, each started at the first piece's end past 2 MiB more
    windows = started(calls)
    assert len(windows) == 5
    assert [start for start, _ in windows] == [0, *(s + n for s, n in windows[:-1])]
    assert all(WRITE_BEHIND_BYTES <= n < WRITE_BEHIND_BYTES + piece for _, n in windows)


def test_native_publish_starts_writeback_between_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``publish_native``: the bytes written natively arrive whole, and writeback is
    started (``sync_file_range``, watched here) at a piece's end once 2 MiB are new."""
    calls = watch_sync_file_range(monkeypatch)
    data = os.urandom(3 * WRITE_BEHIND_BYTES + 999)

    def write(sink: pa.NativeFile, written: Callable[[], None]) -> None:
        for at in range(0, len(data), WRITE_BEHIND_BYTES // 2):
            sink.write(data[at : at + WRITE_BEHIND_BYTES // 2])
            written()

    final = tmp_path / "seg.parquet"
    assert publish_native(final, write, drop_pages=True) == len(data)
    assert final.read_bytes() == data
    assert not (tmp_path / "seg.parquet.tmp").exists()
    # 6 MiB: under WRITE_BEHIND_IN_FLIGHT, so the writer never waited
    assert calls == [
        (i * WRITE_BEHIND_BYTES, WRITE_BEHIND_BYTES, durable_io._SYNC_FILE_RANGE_WRITE)
        for i in range(3)
    ]


def test_a_long_file_waits_for_its_older_windows_and_keeps_the_queue_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``WRITE_BEHIND_IN_FLIGHT`` bytes under writeback, the writer waits (on the
    real ``sync_file_range``, watched) for all but the newest window before writing more:
    at every piece's end, at most that many bytes plus one window are still in flight,
    each wait covers only bytes whose writeback was started, and the waits run in order."""
    calls = watch_sync_file_range(monkeypatch)
    piece = 3 * 1024 * 1024  # a random-values Parquet row group is about 9 MiB
    data = os.urandom(12 * piece + 5)
    in_flight: list[int] = []

    def write(sink: pa.NativeFile, written: Callable[[], None]) -> None:
        for at in range(0, len(data), piece):
            sink.write(data[at : at + piece])
            written()
            settled = max((s + n for s, n, flags in calls if flags & WAIT), default=0)
            in_flight.append(sink.tell() - settled)

    final = tmp_path / "seg.parquet"
    assert publish_native(final, write, drop_pages=True) == len(data)
    assert final.read_bytes() == data
    waits = [(s, n) for s, n, flags in calls if flags & WAIT]
    assert waits, "36 MiB written without the writer ever waiting"
    assert [s for s, _ in waits] == [0, *(s + n for s, n in waits[:-1])]  # in order, no gap
    for i, (s, n, flags) in enumerate(calls):
        if flags & WAIT:
            assert s + n <= max(a + b for a, b, f in calls[:i] if not f & WAIT)
    assert max(in_flight) <= WRITE_BEHIND_IN_FLIGHT + piece
    assert [s for s, _ in started(calls)] == [0, *(s + n for s, n in started(calls)[:-1])]


def test_a_failed_native_write_leaves_no_file(tmp_path: Path) -> None:
    def write(sink: pa.NativeFile, written: Callable[[], None]) -> None:
        sink.write(b"half a file")
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        publish_native(tmp_path / "seg.parquet", write, drop_pages=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_sealed_files_are_written_by_row_group_and_read_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """A sealed segment of several row groups: every row back, writeback started on the way."""
    calls: list[int] = []
    real = durable_io.SYNC_FILE_RANGE
    assert real is not None

    def watch(fd: int, start: int, length: int, flags: int) -> int:
        calls.append(length)
        return real(fd, start, length, flags)

    monkeypatch.setattr(durable_io, "SYNC_FILE_RANGE", watch)
    rows = 3 * 65_536 + 17
    table = pa.table(
        {
            "time": pa.array(range(rows), pa.int64()),
            "noise": pa.array(np.frombuffer(os.urandom(rows * 8), dtype=np.int64)),
        }
    )
    table = pa.Table.from_batches(table.to_batches(max_chunksize=50_000))
    final = tmp_path / f"seg.{fmt}"
    size = write_sealed(final, table, fmt, "none", drop_pages=True)
    assert size == final.stat().st_size
    if fmt == "parquet":
        back = pq.read_table(final)
        assert pq.read_metadata(final).num_row_groups == 4
    else:
        back = pa.ipc.open_file(final).read_all()
    assert back.equals(table)
    assert calls  # 3 MiB of random ints: writeback started at least once
