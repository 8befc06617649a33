"""A partition's history below its local disk: which archived segments hold it.

``ArchiveReads`` is what the engine asks when a read goes below a partition's local
start: the ``ArchivedRun`` of segments there (found by bisection in the partition's
whole archived list, those known expired left out), each opened for reading through
``reads.ArchiveReader``. ``ArchivedSegments`` keeps the manifest's list per topic
between reads and loads it again only when the uploader recorded more.

Lock order: ``ArchivedSegments._lock`` is a leaf (``plateau.storage.catalog.locks``),
held only to read or replace its dict; the manifest is queried holding no lock of
this module.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow.fs as pafs

from plateau.protocol.archive import ArchivedSegment
from plateau.storage.archive.reads import ArchivedFile, ArchiveReader


def _ends(seg: ArchivedSegment) -> int:
    return seg.end


def _starts(seg: ArchivedSegment) -> int:
    return seg.start


@dataclass(frozen=True)
class ArchivedRun:
    """A partition's archived segments below its local start (``segments[lo:hi]``, oldest
    first), found by bisection: the list holds the partition's whole archived history.

    Those known expired are left out; one may still turn out gone when read (``open``
    returns None: skip it).
    """

    topic: str
    partition: str
    segments: list[ArchivedSegment]
    lo: int
    hi: int
    local_start: int
    reader: ArchiveReader

    @property
    def start(self) -> int:
        return self.segments[self.lo].start

    def after(self, pos: int) -> list[ArchivedSegment]:
        """The segments holding indexes at or after ``pos``."""
        first = bisect.bisect_right(self.segments, pos, self.lo, self.hi, key=_ends)
        return self.segments[first : self.hi]

    def before(self, upper: int) -> list[ArchivedSegment]:
        """The segments holding indexes below ``upper``, newest first."""
        last = bisect.bisect_left(self.segments, upper, self.lo, self.hi, key=_starts)
        return self.segments[self.lo : last][::-1]

    def open(self, seg: ArchivedSegment) -> ArchivedFile | None:
        at = bisect.bisect_left(self.segments, seg.start, self.lo, self.hi, key=_starts)
        older, later = self.segments[self.lo : at], self.segments[at + 1 : self.hi]
        return self.reader.open(self.topic, seg, older, later)


class ArchivedSegments:
    """The manifest's archived segments of each topic by partition, kept between reads.

    A partition's list is loaded again (the topic's, one query) when the newest archived
    end the uploader recorded (``mark``) differs from the list's: a segment archived and
    then removed locally since must be found, or its indexes would be skipped; a
    deleted topic's marks are gone, so a new topic of the name loads afresh.
    """

    def __init__(
        self,
        load: Callable[[str], list[ArchivedSegment]],
        mark: Callable[[str, str], int],
    ) -> None:
        self._load = load
        self._mark = mark
        self._lock = threading.Lock()  # a leaf: the dict only; the manifest is asked without
        self._topics: dict[str, dict[str, list[ArchivedSegment]]] = {}

    def of(self, topic: str, partition: str) -> list[ArchivedSegment]:
        """``partition``'s archived segments by start index."""
        mark = max(self._mark(topic, partition), 0)
        with self._lock:
            known = self._topics.get(topic)
        segs = None if known is None else known.get(partition, [])
        if segs is not None and (segs[-1].end if segs else 0) == mark:
            return segs
        loaded: dict[str, list[ArchivedSegment]] = {}
        for seg in self._load(topic):
            loaded.setdefault(seg.partition, []).append(seg)
        for run in loaded.values():
            run.sort(key=_starts)
        with self._lock:
            self._topics[topic] = loaded
        return loaded.get(partition, [])


class ArchiveReads:
    """What the engine asks of the archive when a read goes below the local disk."""

    def __init__(
        self,
        fs: Callable[[], pafs.FileSystem],
        root: str,
        cache_bytes: int,
        load: Callable[[str], list[ArchivedSegment]],
        mark: Callable[[str, str], int],
    ) -> None:
        self.reader = ArchiveReader(fs, root, cache_bytes)
        self.segments = ArchivedSegments(load, mark)

    def run(self, topic: str, partition: str, local_start: int) -> ArchivedRun | None:
        """The partition's archived segments below ``local_start`` (None: nothing there)."""
        if local_start <= 0:
            return None
        gone = self.reader.expired_below(topic, partition)
        segs = self.segments.of(topic, partition)
        lo = bisect.bisect_right(segs, gone, key=_ends)
        hi = bisect.bisect_left(segs, local_start, lo, key=_starts)
        if lo >= hi:
            return None
        return ArchivedRun(topic, partition, segs, lo, hi, local_start, self.reader)
