"""What the node knows of its archive: a segment may leave the disk only once its manifest
object lists it (not merely once its SQLite row exists), failures back off 1 s doubling
to the ceiling, a success clears the state, and the archived span shown is the one the
lag agrees with (a CI run once saw "archived to 5000" beside "1 segment behind")."""

from __future__ import annotations

import time
from pathlib import Path

from plateau.protocol.archive import ArchivedSegment
from plateau.storage.archive.status import ArchiveStatus, lag_of, readable_span
from plateau.storage.catalog.manifest import Manifest, SegmentRow
from plateau.storage.types import Index, SegmentId


def row(first: int, end: int, partition: str = "0") -> SegmentRow:
    return SegmentRow(
        SegmentId(first + 1), "t", partition, "arrow", Index(first), Index(end), 10, 0, 0, "x", 0.0
    )


def test_published_not_recorded_lets_a_segment_go(tmp_path: Path) -> None:
    m = Manifest(tmp_path / "m.sqlite")
    seg = ArchivedSegment(
        partition="0", start=0, end=10, min_time_ms=0, max_time_ms=0, bytes=1, key="k",
        etag="0" * 32, schema=[], archived_at=0.0,
    )  # fmt: skip
    m.record_archived(seg, "t")
    status = ArchiveStatus(m, "s3://b/p")  # a restart: SQLite knows it, no manifest object yet
    assert status.recorded("t", "0") == 10
    assert not status.is_archived(row(0, 10))
    status.publish(status.recorded_marks("t"))
    assert status.is_archived(row(0, 10)) and not status.is_archived(row(10, 20))
    assert not status.is_archived(row(0, 10, partition="1"))
    assert status.state("t").uploaded == 1
    status.forget("t")
    assert not status.is_archived(row(0, 10)) and status.recorded("t", "0") == -1
    m.close()


def test_failures_back_off_doubling_to_the_ceiling_and_success_clears(tmp_path: Path) -> None:
    m = Manifest(tmp_path / "m.sqlite")
    status = ArchiveStatus(m, "s3://b/p")
    delays = [status.failed("t", "Unreachable", "down", 5.0) for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert status.waiting("t", time.monotonic()) and not status.waiting("other", time.monotonic())
    assert status.state("t").state == "Unreachable" and status.state("t").message == "down"
    status.record("t", "0", Index(10))
    s = status.state("t")
    assert (s.state, s.message, s.failures) == ("Current", "", 0)
    assert not status.waiting("t", time.monotonic())
    m.close()


def test_the_span_shown_ends_where_the_manifest_object_does(tmp_path: Path) -> None:
    m = Manifest(tmp_path / "m.sqlite")
    status = ArchiveStatus(m, "s3://b/p")
    sealed = [row(0, 10), row(10, 20)]
    for end in (10, 20):
        status.record("t", "0", Index(end))  # uploaded and recorded, not yet listed
    mark = status.published_mark("t", "0")
    assert readable_span((0, 20), mark) == (None, None)
    assert lag_of(sealed, mark, 0.0).segments == 2
    status.publish({("t", "0"): Index(10)})  # the object lists the first segment only
    mark = status.published_mark("t", "0")
    assert readable_span((0, 20), mark) == (0, 10)
    assert lag_of(sealed, mark, 0.0).segments == 1
    status.publish(status.recorded_marks("t"))
    mark = status.published_mark("t", "0")
    assert readable_span((0, 20), mark) == (0, 20) and lag_of(sealed, mark, 0.0).segments == 0
    assert readable_span(None, mark) == (None, None)  # nothing recorded: nothing shown
    m.close()
