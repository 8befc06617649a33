"""The open segment of a partition: an Arrow IPC file appended in place, plus its rows in memory.

Both formats append to ``<first>-<id>.open`` as an Arrow IPC *file*
(``ipc_file``): magic, schema, then one message per batch, each as the
client sent it or compressed per column (``column_codecs``), written with
O_DIRECT or through the page cache (``append_file``) and fsynced (group
commit) before the append is acknowledged. For ``arrow`` that file is
the segment: sealing writes the footer and renames it. For ``parquet`` it is
the write-ahead file: sealing writes a Parquet file from the rows kept in
memory and then deletes it. After a crash the messages before a torn tail
are read back as a stream (``recovery.read_open_file``).

The rows are also kept in memory (bounded by ``segment.max_bytes``) so that
readers see the open segment without touching the file.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from plateau.protocol.topic_config import SegmentConfig
from plateau.storage.data.append_file import AppendFile, open_append, open_recycled
from plateau.storage.data.group_commit import GroupCommit
from plateau.storage.data.ipc_file import IpcFileWriter
from plateau.storage.data.ipc_messages import Encoded
from plateau.storage.data.recycle import Recycler
from plateau.storage.types import Index, SegmentId

WRITE_BUFFER = 64 * 1024  # the schema and metadata of a segment; batches are written from the body


def time_bounds_ms(column: pa.ChunkedArray | pa.Array) -> tuple[int, int]:
    """Min and max of a ``time`` column in epoch milliseconds."""
    if pa.types.is_timestamp(column.type):
        column = pc.cast(column, pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64())
    mm = pc.min_max(column)
    return int(mm["min"].as_py()), int(mm["max"].as_py())


class _FileHandle:
    """The open file, shared by the segment and its group commit."""

    def __init__(self) -> None:
        self.file: AppendFile | None = None

    def fsync(self) -> None:
        file = self.file
        if file is not None:
            file.sync()


@dataclass
class OpenSegment:
    """State of one open (or being sealed) segment; mutated only under the partition lock."""

    id: SegmentId
    first_index: Index
    schema: pa.Schema
    config: SegmentConfig
    path: Path
    created: float = field(default_factory=time.monotonic)
    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0
    min_time_ms: int | None = None
    max_time_ms: int | None = None
    drop_pages: bool = True
    charged: int = 0  # bytes of this segment counted in the node's memory budget
    _handle: _FileHandle = field(init=False)
    _writer: IpcFileWriter | None = None
    commit: GroupCommit = field(init=False)

    def __post_init__(self) -> None:
        self._handle = _FileHandle()
        # The commit holds the handle, not the segment: a bound method here would make a
        # reference cycle, and a sealed segment's batches (up to max_bytes) would then
        # live until the cyclic garbage collector happened to run.
        self.commit = GroupCommit(self._handle.fsync)

    @property
    def _file(self) -> AppendFile | None:
        return self._handle.file

    @_file.setter
    def _file(self, value: AppendFile | None) -> None:
        self._handle.file = value

    @classmethod
    def create(
        cls,
        segment_id: SegmentId,
        first_index: Index,
        schema: pa.Schema,
        config: SegmentConfig,
        directory: Path,
        drop_pages: bool = True,
        direct: bool = False,
        recycler: Recycler | None = None,
    ) -> OpenSegment:
        """``recycler``: where a kept write-ahead file may come from (O_DIRECT files only)."""
        path = directory / cls.file_name(first_index, segment_id)
        seg = cls(segment_id, first_index, schema, config, path, drop_pages=drop_pages)
        reused = recycler.take(path) if direct and recycler is not None else False
        seg._file = (open_recycled(path) if reused else None) or open_append(
            path, direct, drop_pages
        )
        try:
            seg._writer = IpcFileWriter(seg._file, schema)
        except BaseException:
            os.close(seg._file.fd)
            raise
        return seg

    @staticmethod
    def file_name(first_index: int, segment_id: int) -> str:
        return f"{first_index:020d}-{segment_id}.open"

    @property
    def end_index(self) -> Index:
        return Index(self.first_index + self.rows)

    @property
    def writable(self) -> bool:
        return self._writer is not None

    def would_overflow(self, rows: int, nbytes: int) -> bool:
        """An empty segment takes any append whole; otherwise the limits apply."""
        if self.rows == 0:
            return False
        return (
            self.rows + rows > self.config.max_rows or self.nbytes + nbytes > self.config.max_bytes
        )

    def too_old(self, now: float) -> bool:
        return self.rows > 0 and now - self.created >= self.config.max_age_seconds

    def append(
        self,
        table: pa.Table,
        messages: Sequence[Encoded],
        bounds: tuple[int, int] | None = None,
        nbytes: int | None = None,
    ) -> int:
        """Write ``table`` (as ``messages``) to the file and memory; returns the sequence to wait
        on for durability. ``bounds``: the table's ``time_bounds_ms``, computed by the caller
        before it took the partition lock (computed here without); ``nbytes``: ``table.nbytes``.

        On a write error the file is cut back to where it was, so the file never
        holds a half batch that a later append would follow.
        """
        assert self._file is not None and self._writer is not None
        batches = table.to_batches()
        pos = self._writer.position
        try:
            self._writer.append(messages)
        except BaseException:
            self._abandon_writer(pos)
            raise
        lo, hi = bounds if bounds is not None else time_bounds_ms(table.column("time"))
        self.min_time_ms = lo if self.min_time_ms is None else min(self.min_time_ms, lo)
        self.max_time_ms = hi if self.max_time_ms is None else max(self.max_time_ms, hi)
        self.batches.extend(batches)
        self.rows += table.num_rows
        self.nbytes += table.nbytes if nbytes is None else nbytes
        self.commit.written(self.rows)
        return self.rows

    def _abandon_writer(self, pos: int) -> None:
        """After a failed write the pyarrow writer's state is unknown: stop using it.

        With ``pos`` the file is cut back to the last complete batch; the segment
        is then sealed by rewriting it from memory, as recovery does.
        """
        file = self._file
        self._writer = None
        self._file = None
        if file is None:
            return
        if pos:
            with contextlib.suppress(OSError):
                os.ftruncate(file.fd, pos)
        with contextlib.suppress(OSError):
            os.close(file.fd)

    def finish_file(self) -> bool:
        """Sync and close the open file; write the footer. False if the writer was abandoned."""
        ok = [False]

        def final() -> None:
            if self._writer is None or self._file is None:
                return
            try:
                self._writer.finish()
                os.close(self._file.fd)
                self._writer = None
                self._file = None
                ok[0] = True
            except OSError:
                # no room for the footer: the caller rewrites from memory, or recovery
                # reads the batches, which were fsynced before they were acknowledged
                self._abandon_writer(0)

        try:
            self.commit.close(final)
        except OSError:
            self._abandon_writer(0)  # the last fsync failed: same as above
        return ok[0]

    def abort(self) -> None:
        """Close without a footer (shutdown after a failure); the file stays for recovery."""
        self._abandon_writer(self._writer.position if self._writer is not None else 0)

    def table(self, rows: int | None = None) -> pa.Table:
        """The first ``rows`` rows (all by default) as one table."""
        table = pa.Table.from_batches(self.batches, schema=self.schema)
        return table if rows is None else table.slice(0, rows)
