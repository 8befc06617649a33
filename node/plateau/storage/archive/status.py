"""What the node knows of its archive: which segments are archived, each topic's state.

Two marks per partition, both "the end of the newest archived segment" (a
partition's segments are archived in index order, so a sealed segment is
archived exactly when its end is at or below the mark):

* ``recorded``: its SQLite row is committed (``Manifest.record_archived``);
* ``published``: the topic's manifest object listing it has been written too.

Retention goes by ``published``: a local segment may be deleted only once a
reader planning from the manifest object finds it there. Both start from the
SQLite rows; ``published`` is set once the uploader rewrote the manifest
objects at start.

Lock: ``_lock`` is a leaf (dict reads and writes only; nothing is taken
under it and no I/O happens under it).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from plateau.protocol.archive import ArchiveState
from plateau.protocol.replies import PartitionArchive, TopicArchive
from plateau.protocol.topic_config import TopicConfig
from plateau.storage.catalog.manifest import Manifest, SegmentRow
from plateau.storage.metrics import ARCHIVE_LAG_BYTES, ARCHIVE_LAG_SECONDS, ARCHIVE_LAG_SEGMENTS
from plateau.storage.partition import Partition
from plateau.storage.types import Index

Mark = tuple[str, str]  # (topic, partition)


@dataclass
class TopicState:
    state: ArchiveState = "Current"
    message: str = ""
    failures: int = 0
    retry_at: float = 0.0  # monotonic: no upload for the topic before this
    uploaded: int = 0  # archived segments (SQLite rows)
    deleted_unarchived: int = 0  # since start


@dataclass(frozen=True)
class Lag:
    segments: int
    bytes: int
    seconds: float
    oldest: SegmentRow | None


def lag_of(rows: list[SegmentRow], mark: int, now: float) -> Lag:
    waiting = [r for r in rows if r.end_index > mark]
    oldest = min(waiting, key=lambda r: r.sealed_at, default=None)
    return Lag(
        len(waiting),
        sum(r.bytes for r in waiting),
        max(0.0, now - oldest.sealed_at) if oldest else 0.0,
        oldest,
    )


def readable_span(recorded: tuple[int, int] | None, mark: int) -> tuple[int | None, int | None]:
    """The archived span a reader of the archive finds: the recorded one cut at ``mark``.

    A segment is recorded (SQLite) before the manifest object lists it, and the lag
    counts it until it is listed; cutting the span there keeps one report from
    saying "archived up to N" and "one segment not archived" of the same rows.
    """
    if recorded is None or mark <= recorded[0]:
        return None, None
    return recorded[0], min(recorded[1], mark)


class ArchiveStatus:
    def __init__(self, manifest: Manifest, url: str | None) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._recorded: dict[Mark, Index] = manifest.archived_ends()
        self._published: dict[Mark, Index] = {}
        self._topics: dict[str, TopicState] = {
            t: TopicState(uploaded=n) for t, n in manifest.archived_counts().items()
        }

    def _topic(self, topic: str) -> TopicState:
        state = self._topics.get(topic)
        if state is None:
            state = self._topics[topic] = TopicState()
        return state

    # --- marks ----------------------------------------------------------------
    def recorded(self, topic: str, partition: str) -> int:
        with self._lock:
            return self._recorded.get((topic, partition), -1)

    def published_mark(self, topic: str, partition: str) -> int:
        with self._lock:
            return self._published.get((topic, partition), -1)

    def is_archived(self, row: SegmentRow) -> bool:
        """Whether ``row`` is in the archive and in its manifest object (may leave the disk)."""
        return row.end_index <= self.published_mark(row.topic, row.partition)

    def record(self, topic: str, partition: str, end: Index) -> None:
        with self._lock:
            key = (topic, partition)
            self._recorded[key] = Index(max(self._recorded.get(key, -1), end))
            state = self._topic(topic)
            state.uploaded += 1
            state.failures = 0
            state.retry_at = 0.0
            state.state, state.message = "Current", ""

    def recorded_marks(self, topic: str) -> dict[Mark, Index]:
        with self._lock:
            return {k: v for k, v in self._recorded.items() if k[0] == topic}

    def publish(self, marks: dict[Mark, Index]) -> None:
        """The manifest object now lists everything up to ``marks``."""
        with self._lock:
            for key, end in marks.items():
                self._published[key] = Index(max(self._published.get(key, -1), end))

    def forget(self, topic: str) -> None:
        """A deleted topic: its marks and state go (a new topic of the name starts afresh)."""
        with self._lock:
            for marks in (self._recorded, self._published):
                for key in [k for k in marks if k[0] == topic]:
                    del marks[key]
            self._topics.pop(topic, None)

    # --- state ----------------------------------------------------------------
    def failed(self, topic: str, state: ArchiveState, message: str, retry_max: float) -> float:
        """Count a failure; returns the wait before the topic's next attempt (1 s doubling)."""
        with self._lock:
            s = self._topic(topic)
            s.failures += 1
            delay = min(retry_max, 2.0 ** (s.failures - 1))
            s.retry_at = time.monotonic() + delay
            s.state, s.message = state, message
            return delay

    def waiting(self, topic: str, now: float) -> bool:
        """Whether the topic is backing off after a failure."""
        with self._lock:
            s = self._topics.get(topic)
            return s is not None and s.retry_at > now

    def retry_at(self) -> float:
        """The earliest moment a backing-off topic may try again (0: none waits)."""
        with self._lock:
            return min((s.retry_at for s in self._topics.values() if s.retry_at), default=0.0)

    def deleted_unarchived(self, topic: str) -> None:
        with self._lock:
            self._topic(topic).deleted_unarchived += 1

    def state(self, topic: str) -> TopicState:
        with self._lock:
            s = self._topic(topic)
            return TopicState(**vars(s))

    # --- reports --------------------------------------------------------------
    def export_lag(self, topic: str, partitions: list[Partition]) -> None:
        """Set the topic's lag gauges (the engine's background tick calls this)."""
        now = time.time()
        total = Lag(0, 0, 0.0, None)
        for p in partitions:
            lag = lag_of(p.view().sealed, self.published_mark(topic, p.name), now)
            total = Lag(
                total.segments + lag.segments,
                total.bytes + lag.bytes,
                max(total.seconds, lag.seconds),
                None,
            )
        _export(topic, total)

    def report(
        self,
        topic: str,
        config: TopicConfig,
        partitions: list[Partition],
        spans: dict[str, tuple[int, int]],
        held: bool = False,
    ) -> tuple[TopicArchive, dict[str, PartitionArchive]]:
        """The topic's archive status and each partition's, as ``GET /admin/topics`` shows."""
        now = time.time()
        per: dict[str, PartitionArchive] = {}
        total = Lag(0, 0, 0.0, None)
        for p in partitions:
            mark = self.published_mark(topic, p.name)
            lag = lag_of(p.view().sealed, mark, now)
            start, end = readable_span(spans.get(p.name), mark)
            per[p.name] = PartitionArchive(
                start=start,
                end=end,
                lag_segments=lag.segments,
                lag_bytes=lag.bytes,
                lag_seconds=round(lag.seconds, 3),
            )
            total = Lag(
                total.segments + lag.segments,
                total.bytes + lag.bytes,
                max(total.seconds, lag.seconds),
                None,
            )
        s = self.state(topic)
        state, message = s.state, s.message
        if self.url is None:
            state, message = "Unreachable", "the node has no storage.archive.url"
        elif state == "Current" and held:
            state = "Behind"
            message = "retention waits for uploads: the topic's budget is full"
        elif state == "Current" and total.seconds > config.segment.max_age_seconds + 10:
            state = "Behind"
            message = f"the oldest unarchived segment was sealed {total.seconds:.0f} s ago"
        _export(topic, total)
        return (
            TopicArchive(
                state=state,
                message=message,
                required=config.archive.is_required(),
                url=f"{self.url.rstrip('/')}/{topic}" if self.url else None,
                lag_segments=total.segments,
                lag_bytes=total.bytes,
                lag_seconds=round(total.seconds, 3),
                uploaded_segments=s.uploaded,
                deleted_unarchived=s.deleted_unarchived,
            ),
            per,
        )


def _export(topic: str, lag: Lag) -> None:
    ARCHIVE_LAG_SEGMENTS.labels(topic).set(lag.segments)
    ARCHIVE_LAG_BYTES.labels(topic).set(lag.bytes)
    ARCHIVE_LAG_SECONDS.labels(topic).set(lag.seconds)
