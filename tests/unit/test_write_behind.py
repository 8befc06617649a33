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
    PythonWriteBehind,
    publish,
    publish_native,
)
from plateau.storage.data.sealed_writer import write_sealed


def watch_writeback(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The (start, length) of every writeback started (``sync_file_range``, still called)."""
    calls: list[tuple[int, int]] = []
    real = durable_io.SYNC_FILE_RANGE
    assert real is not None  # glibc on Linux: the path under test

    def watch(fd: int, start: int, length: int, flags: int) -> int:
        calls.append((start, length))
        return real(fd, start, length, flags)

    monkeypatch.setattr(durable_io, "SYNC_FILE_RANGE", watch)
    return calls


def test_every_byte_arrives_and_writeback_starts_every_few_mib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = watch_writeback(monkeypatch)
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
    assert len(calls) == 5
    assert [start for start, _ in calls] == [0, *(s + n for s, n in calls[:-1])]
    assert all(WRITE_BEHIND_BYTES <= n < WRITE_BEHIND_BYTES + piece for _, n in calls)


def test_native_publish_starts_writeback_between_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``publish_native``: the bytes written natively arrive whole, and writeback is
    started (``sync_file_range``, watched here) at a piece's end once 2 MiB are new."""
    calls = watch_writeback(monkeypatch)
    data = os.urandom(3 * WRITE_BEHIND_BYTES + 999)

    def write(sink: pa.NativeFile, written: Callable[[], None]) -> None:
        for at in range(0, len(data), WRITE_BEHIND_BYTES // 2):
            sink.write(data[at : at + WRITE_BEHIND_BYTES // 2])
            written()

    final = tmp_path / "seg.parquet"
    assert publish_native(final, write, drop_pages=True) == len(data)
    assert final.read_bytes() == data
    assert not (tmp_path / "seg.parquet.tmp").exists()
    assert calls == [(i * WRITE_BEHIND_BYTES, WRITE_BEHIND_BYTES) for i in range(3)]


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
