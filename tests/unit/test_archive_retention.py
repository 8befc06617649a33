"""Retention with the archive (pure planning), the S3 error classes, credentials files,
and the manifest's archived rows (schema migration, topic deletion)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from plateau.protocol.archive import ArchivedSegment, ArchiveField
from plateau.protocol.topic_config import RetentionConfig
from plateau.storage.archive.store import ArchiveError, classify, read_credentials
from plateau.storage.catalog.manifest import SCHEMA_VERSION, Manifest, SegmentRow
from plateau.storage.retention import plan, plan_archived
from plateau.storage.types import Index, SegmentId


def seg(i: int, nbytes: int = 100, t: int = 0, partition: str = "0") -> SegmentRow:
    return SegmentRow(
        SegmentId(i), "t", partition, "arrow", Index(i * 10), Index(i * 10 + 10),
        nbytes, t, t, f"x/{i}", 0.0,
    )  # fmt: skip


def test_required_archive_deletes_only_archived_segments_and_says_what_it_holds() -> None:
    rows = [seg(1), seg(2), seg(3), seg(4)]
    archived = {1}
    out = plan_archived(rows, RetentionConfig(max_bytes=150), 0, lambda r: r.id in archived)
    assert [d.row.id for d in out.deletions] == [1]
    assert [r.id for r in out.held] == [2, 3]  # due, not archived: kept
    assert out.held_bytes == 200
    archived.update({2, 3})
    out = plan_archived(rows, RetentionConfig(max_bytes=150), 0, lambda r: r.id in archived)
    assert [d.row.id for d in out.deletions] == [1, 2, 3] and out.held == []


def test_an_archived_segment_of_another_partition_still_goes() -> None:
    rows = [seg(1, partition="a"), seg(2, partition="b"), seg(3, partition="a")]
    out = plan_archived(rows, RetentionConfig(max_bytes=100), 0, lambda r: r.partition == "b")
    assert [d.row.id for d in out.deletions] == [2]
    assert [r.id for r in out.held] == [1]


def test_age_retention_waits_for_the_archive_too() -> None:
    rows = [seg(1, t=0), seg(2, t=0)]
    config = RetentionConfig(max_bytes=10_000, max_age_seconds=1)
    out = plan_archived(rows, config, 5_000, lambda r: r.id == 1)
    assert [(d.row.id, d.reason) for d in out.deletions] == [(1, "age")]
    assert out.held == []  # within the byte budget: nothing to shed for


def test_without_archive_the_plan_is_unchanged() -> None:
    rows = [seg(3, 100), seg(1, 100), seg(2, 100)]
    assert [d.row.id for d in plan(rows, RetentionConfig(max_bytes=150), 0)] == [1, 2]


@pytest.mark.parametrize(
    ("message", "state"),
    [
        ("AWS Error ACCESS_DENIED during CreateMultipartUpload operation", "Unauthorized"),
        ("AWS Error INVALID_ACCESS_KEY_ID during PutObject", "Unauthorized"),
        ("AWS Error SIGNATURE_DOES_NOT_MATCH during PutObject", "Unauthorized"),
        ("AWS Error NO_SUCH_BUCKET during PutObject", "BucketNotFound"),
        ("AWS Error NETWORK_CONNECTION: curlCode: 7, Could not connect to server", "Unreachable"),
        ("AWS Error SLOW_DOWN during UploadPart", "Behind"),
    ],
)
def test_s3_errors_are_classified_into_topic_states(message: str, state: str) -> None:
    err = classify(OSError(message))
    assert err.state == state
    assert message in err.message


def test_credentials_file_profiles(tmp_path: Path) -> None:
    f = tmp_path / "credentials"
    f.write_text(
        "[default]\naws_access_key_id = A\naws_secret_access_key = B\n"
        "[other]\naws_access_key_id = C\naws_secret_access_key = D\naws_session_token = E\n"
    )
    assert read_credentials(f, "default") == ("A", "B", None)
    assert read_credentials(f, "other") == ("C", "D", "E")
    with pytest.raises(ArchiveError, match="no profile"):
        read_credentials(f, "missing")
    with pytest.raises(ArchiveError, match="cannot read"):
        read_credentials(tmp_path / "nope", "default")


def archived(partition: str, start: int, end: int) -> ArchivedSegment:
    return ArchivedSegment(
        partition=partition, start=start, end=end, min_time_ms=1, max_time_ms=2, bytes=10,
        key=f"t/partition={partition}/{start}", etag="ab" * 16,
        schema=[ArchiveField(name="time", type="int64", nullable=False)], archived_at=1.5,
    )  # fmt: skip


def test_archived_rows_round_trip_and_go_with_the_topic(tmp_path: Path) -> None:
    m = Manifest(tmp_path / "m.sqlite")
    from plateau.protocol.topic_config import TopicConfig

    m.put_topic("t", TopicConfig(), None, ["0", "1"])
    for s in (archived("1", 0, 5), archived("0", 10, 20), archived("0", 0, 10)):
        m.record_archived(s, "t")
    m.record_archived(archived("0", 0, 10), "t")  # a repeat replaces, never duplicates
    got = m.archived_segments("t")
    assert [(s.partition, s.start) for s in got] == [("0", 0), ("0", 10), ("1", 0)]
    assert got[0] == archived("0", 0, 10)
    assert m.archived_spans("t") == {"0": (0, 20), "1": (0, 5)}
    assert m.archived_ends() == {("t", "0"): 20, ("t", "1"): 5}
    m.delete_topic("t", {"0": Index(20), "1": Index(5)})
    assert m.archived_segments("t") == []
    m.close()


def as_written_by(path: Path, version: int, change: str) -> None:
    """Make the manifest at ``path`` look as an older node (schema ``version``) left it."""
    db = sqlite3.connect(path)
    db.execute(change)
    db.execute(f"PRAGMA user_version = {version}")
    db.commit()
    db.close()


def test_a_version_1_manifest_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "m.sqlite"
    Manifest(path).close()
    as_written_by(path, 1, "DROP TABLE archived")
    m = Manifest(path)
    m.record_archived(archived("0", 0, 1), "t")
    assert len(m.archived_segments("t")) == 1
    m.close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    db.close()


def test_a_version_2_manifest_keeps_its_archived_rows(tmp_path: Path) -> None:
    """Version 2 recorded a SHA-256 the node computed; 3 records the server's ETag in the
    same column: rows archived before the upgrade are still known as archived."""
    path = tmp_path / "m.sqlite"
    m = Manifest(path)
    m.record_archived(archived("0", 0, 7), "t")
    m.close()
    as_written_by(path, 2, "ALTER TABLE archived RENAME COLUMN etag TO sha256")
    m = Manifest(path)
    assert m.archived_segments("t") == [archived("0", 0, 7)]
    m.record_archived(archived("0", 7, 9), "t")
    assert m.archived_spans("t") == {"0": (0, 9)}
    m.close()
