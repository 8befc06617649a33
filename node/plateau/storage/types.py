"""Typed values of the engine, shared with the server.

Indexes and segment ids are distinct types so that a segment id can never be
passed where a record index is expected (mypy checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

import pyarrow as pa

from plateau.protocol.values import RecordStatus, Span

Index = NewType("Index", int)
"""Position of a record in its partition: dense, from 0, never reused."""

SegmentId = NewType("SegmentId", int)
"""Manifest row id of a segment; unique per node, never reused."""


@dataclass(frozen=True)
class TimeRange:
    """Inclusive bounds in epoch milliseconds; ``None`` is unbounded."""

    start_ms: int | None = None
    end_ms: int | None = None

    def overlaps(self, lo_ms: int, hi_ms: int) -> bool:
        if self.start_ms is not None and hi_ms < self.start_ms:
            return False
        return not (self.end_ms is not None and lo_ms > self.end_ms)


@dataclass
class PartitionRead:
    """Records of one partition read: ``table`` rows are the indexes in ``span`` that matched.

    With a time filter some indexes of ``span`` may be skipped; ``span.end`` is
    where the next read continues. ``archived``: how many of the rows were read
    from the object-storage archive (no longer on the local disk).
    """

    table: pa.Table
    span: Span | None
    status: RecordStatus
    archived: int = 0


@dataclass
class TopicRead:
    """One page of topic iteration; ``next`` is the cursor to send back; ``archived``:
    how many of its rows were read from the object-storage archive."""

    table: pa.Table
    next: dict[str, int]
    status: RecordStatus
    archived: int = 0


@dataclass(frozen=True)
class WritePolicy:
    """How partitions write, from the node's settings (``StorageSettings``)."""

    relaxed: bool = False  # acknowledge before fsync; a timer syncs
    drop_written_pages: bool = True  # POSIX_FADV_DONTNEED after fsync (files.PageDropper)
    direct_writes: bool = True  # open segments written with O_DIRECT (append_file)

    @property
    def direct(self) -> bool:
        """Whether open segments are written with O_DIRECT: relaxed appends are acknowledged
        from the page cache, and O_DIRECT would make them wait."""
        return self.direct_writes and not self.relaxed
