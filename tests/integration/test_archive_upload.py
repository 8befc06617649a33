"""The archive uploader against a real S3 server (SeaweedFS): what a user of an archived
topic relies on. Every sealed segment appears under its deterministic key as Parquet
that any reader opens, with the topic's manifest object listing exactly the uploaded
segments and their SHA-256; status says Current; a restart uploads nothing again; an
archive-required topic keeps its footprint and sheds appends (429 ArchiveBehind) when
the archive is unreachable; without required, retention goes on and counts.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from plateau.protocol.archive import ArchiveManifest, manifest_key, segment_key
from plateau.protocol.errors import ArchiveBehind, Busy
from plateau.protocol.topic_config import (
    ArchivePatch,
    RetentionPatch,
    SegmentPatch,
    TopicConfigRequest,
)
from plateau.storage.config import ArchiveSettings
from plateau.storage.engine import Engine
from plateau.storage.metrics import ARCHIVE_DELETED_UNARCHIVED, ARCHIVE_FAILURES, ARCHIVE_UPLOADS
from testkit.nodeproc import free_port
from testkit.s3server import ADMIN, READER, S3Keys, S3Server
from testkit.waiting import wait_until
from tests.conftest import EngineFactory

T0 = 1_700_000_000_000


@pytest.fixture
def s3env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ADMIN.env().items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def make_engine(make_engine: EngineFactory, s3env: None) -> EngineFactory:
    """The shared factory (tests/conftest.py) with an archive and a fast retention pass."""

    def make(archive: ArchiveSettings, **kwargs: object) -> Engine:
        return make_engine(archive=archive, **{"retention_interval_seconds": 0.2, **kwargs})

    return make


def unreachable(root: str) -> ArchiveSettings:
    """An archive whose endpoint refuses connections (a closed port)."""
    closed = f"http://127.0.0.1:{free_port()}"
    return ArchiveSettings(url=f"s3://{root}", endpoint=closed, retry_max_seconds=1.0)


def archive_settings(server: S3Server, root: str) -> ArchiveSettings:
    url = f"s3://{root}"
    return ArchiveSettings(url=url, endpoint=server.endpoint, retry_max_seconds=1.0)


def topic(
    fmt: str, *, max_rows: int = 100, max_bytes: int = 1 << 30, **archive: bool
) -> TopicConfigRequest:
    return TopicConfigRequest(
        partitions=2,
        segment=SegmentPatch(format=fmt, max_rows=max_rows),  # type: ignore[arg-type]
        retention=RetentionPatch(max_bytes=max_bytes),
        archive=ArchivePatch(enabled=True, **archive),
    )


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "time": pa.array([1_700_000_000_000 + i for i in range(start, start + n)], pa.int64()),
            "v": pa.array(range(start, start + n), pa.int64()),
            "s": pa.array([f"row-{i % 7}" for i in range(start, start + n)]),
        }
    )


def append(e: Engine, name: str, partition: str, table: pa.Table) -> None:
    """Append, waiting out the partition's load shedding while its last seal runs."""
    for _ in range(2000):
        try:
            e.append(name, partition, table)
            return
        except ArchiveBehind:
            raise
        except Busy:
            time.sleep(0.01)
    raise AssertionError("partition stayed busy")


def current(e: Engine, name: str, segments: int) -> bool:
    """Whether ``segments`` segments are archived and the manifest object lists them all.

    The count matters: a segment is sealed in the background after the append that
    rolled it over, and until then no lag counts it, so "Current with no lag" alone
    is true before the last seal (and before the first) as well as after it.
    """
    usage = e.topic_usage(name)
    a = usage.archive
    assert a is not None
    return a.state == "Current" and a.lag_segments == 0 and a.uploaded_segments == segments


def read_manifest(fs: pafs.FileSystem, root: str, name: str) -> ArchiveManifest:
    with fs.open_input_stream(f"{root}/{manifest_key(name)}") as f:
        return ArchiveManifest.model_validate_json(f.read())


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_sealed_segments_are_archived_as_parquet_with_a_manifest(
    make_engine: EngineFactory, s3server: S3Server, s3root: str, fmt: str
) -> None:
    e = make_engine(archive_settings(s3server, s3root))
    e.put_topic("ev", topic(fmt))
    for p in ("0", "1"):
        for i in range(3):
            append(e, "ev", p, rows(100, i * 100))
        append(e, "ev", p, rows(1, 300))  # seals [200, 300)
    wait_until(lambda: current(e, "ev", 6), "archive current")
    fs = s3server.filesystem()
    doc = read_manifest(fs, s3root, "ev")
    got = [(s.partition, s.start, s.end) for s in doc.segments]
    assert got == [(p, i * 100, i * 100 + 100) for p in ("0", "1") for i in range(3)]
    for seg in doc.segments:
        assert seg.key == segment_key("ev", seg.partition, seg.start, seg.end)
        data = fs.open_input_stream(f"{s3root}/{seg.key}").read()
        with fs.open_input_file(f"{s3root}/{seg.key}") as f:  # what the server reports
            assert f.metadata()["ETag"].decode().strip('"') == seg.etag
        assert len(data) == seg.bytes
        table = pq.read_table(pa.BufferReader(data))  # plain pyarrow: no plateau needed
        assert table.column("v").to_pylist() == list(range(seg.start, seg.end))
        assert [f.name for f in seg.schema_fields] == ["time", "v", "s"]
    # the SQLite rows are the manifest object's list
    assert e._manifest.archived_segments("ev") == doc.segments
    usage = e.topic_usage("ev")
    assert usage.archive is not None and usage.archive.uploaded_segments == 6
    assert usage.partitions["0"].archive is not None
    assert (usage.partitions["0"].archive.start, usage.partitions["0"].archive.end) == (0, 300)


def test_restart_uploads_nothing_already_recorded(
    make_engine: EngineFactory, s3server: S3Server, s3root: str
) -> None:
    settings = archive_settings(s3server, s3root)
    e = make_engine(settings)
    e.put_topic("ev", topic("parquet"))
    for i in range(4):
        append(e, "ev", "0", rows(100, i * 100))
    # [200, 300) may still be sealing (not yet counted as lag) when the first three are
    # archived: wait for all three, or the restart would rightly upload it too
    wait_until(
        lambda: current(e, "ev", 3),
        "archive current",
    )
    e.close()
    before = ARCHIVE_UPLOADS.labels("ev", "ok")._value.get()
    e2 = make_engine(settings)
    append(e2, "ev", "0", rows(100, 400))
    append(e2, "ev", "0", rows(1, 500))  # seals [400, 500)
    wait_until(
        lambda: current(e2, "ev", 5),
        "archive current after restart",
    )
    # [300, 400) was sealed by close() and [400, 500) after the restart: nothing else
    assert ARCHIVE_UPLOADS.labels("ev", "ok")._value.get() - before == 2
    doc = read_manifest(s3server.filesystem(), s3root, "ev")
    assert [(s.start, s.end) for s in doc.segments] == [(i * 100, i * 100 + 100) for i in range(5)]


def test_required_archive_holds_the_footprint_and_sheds_appends(
    make_engine: EngineFactory, s3server: S3Server, s3root: str
) -> None:
    dead = unreachable(s3root)
    e = make_engine(dead)
    one = rows(100)
    e.put_topic("ev", topic("arrow", max_bytes=20_000))
    refused: ArchiveBehind | None = None
    for i in range(200):
        try:
            append(e, "ev", "0", rows(100, i * 100))
        except ArchiveBehind as exc:
            refused = exc
            break
        time.sleep(0.01)
    assert refused is not None, "appends were never shed"
    assert "segments" in refused.message and "behind" in refused.message
    assert refused.status == 429 and refused.retry_after >= 1
    usage = e.topic_usage("ev")
    assert usage.partitions["0"].start == 0  # nothing deleted unarchived
    assert usage.archive is not None and usage.archive.lag_segments > 0

    def reported() -> bool:
        a = e.topic_usage("ev").archive
        return a is not None and a.state == "Unreachable"

    wait_until(reported, "Unreachable")
    with pytest.raises(ArchiveBehind, match="Unreachable"):  # the message now says why
        e.append("ev", "0", rows(100, 100_000))
    assert usage.bytes < 20_000 + 4 * one.nbytes


def test_without_required_retention_goes_on_and_counts(
    make_engine: EngineFactory, s3server: S3Server, s3root: str
) -> None:
    dead = unreachable(s3root)
    e = make_engine(dead)
    e.put_topic("loose", topic("arrow", max_bytes=20_000, required=False))
    before = ARCHIVE_DELETED_UNARCHIVED.labels("loose")._value.get()
    for i in range(30):
        append(e, "loose", "0", rows(100, i * 100))
    wait_until(lambda: e.topic_usage("loose").partitions["0"].start > 0, "retention")
    assert ARCHIVE_DELETED_UNARCHIVED.labels("loose")._value.get() > before
    usage = e.topic_usage("loose")
    assert usage.archive is not None and usage.archive.deleted_unarchived > 0
    assert usage.archive.required is False


def test_uploader_stress_many_small_segments_archived_exactly_once(
    make_engine: EngineFactory, s3server: S3Server, s3root: str
) -> None:
    """Several topics sealing small segments fast, four uploads at once: every segment is
    archived once (a second upload of one would count twice), in each partition's order,
    within a bounded time (a stalled uploader fails here, not in production)."""
    e = make_engine(archive_settings(s3server, s3root).model_copy(update={"upload_concurrency": 4}))
    names = ["s0", "s1", "s2", "s3"]
    for n in names:
        e.put_topic(n, topic("arrow" if n != "s1" else "parquet", max_rows=20))
    per_partition = 25
    errors: list[BaseException] = []

    def produce(name: str) -> None:
        try:
            for i in range(per_partition):
                for p in ("0", "1"):
                    append(e, name, p, rows(20, i * 20))
            for p in ("0", "1"):
                append(e, name, p, rows(1, per_partition * 20))  # seals the last full one
        except BaseException as exc:
            errors.append(exc)

    before = {n: ARCHIVE_UPLOADS.labels(n, "ok")._value.get() for n in names}
    started = time.monotonic()
    threads = [threading.Thread(target=produce, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    expected = [(p, i * 20, i * 20 + 20) for p in ("0", "1") for i in range(per_partition)]
    fs = s3server.filesystem()

    def done() -> bool:
        return all(
            [(s.partition, s.start, s.end) for s in e._manifest.archived_segments(n)] == expected
            for n in names
        ) and all(current(e, n, len(expected)) for n in names)

    wait_until(done, "every segment archived", timeout=90)
    assert time.monotonic() - started < 90
    for n in names:
        assert ARCHIVE_UPLOADS.labels(n, "ok")._value.get() - before[n] == len(expected)

        def listed(n: str = n) -> bool:
            doc = read_manifest(fs, s3root, n)
            return [(s.partition, s.start, s.end) for s in doc.segments] == expected

        wait_until(listed, f"{n}'s manifest object")


def creds_file(tmp_path: Path, keys: S3Keys) -> Path:
    f = tmp_path / "aws-credentials"
    f.write_text(
        f"[plateau]\naws_access_key_id = {keys.access_key}\n"
        f"aws_secret_access_key = {keys.secret_key}\n"
    )
    return f


@pytest.mark.parametrize(
    ("keys", "bucket", "state"),
    [
        (S3Keys("nobody", "wrong"), None, "Unauthorized"),
        (READER, None, "Unauthorized"),  # a read-only bucket
        (ADMIN, "plateau-no-such-bucket", "BucketNotFound"),
    ],
)
def test_archive_faults_are_reported_and_keep_local_data(
    make_engine: EngineFactory,
    tmp_path: Path,
    s3server: S3Server,
    s3root: str,
    keys: S3Keys,
    bucket: str | None,
    state: str,
) -> None:
    settings = ArchiveSettings(
        url=f"s3://{bucket}/pfx" if bucket else f"s3://{s3root}",
        endpoint=s3server.endpoint,
        credentials_file=creds_file(tmp_path, keys),
        profile="plateau",
        retry_max_seconds=1.0,
    )
    e = make_engine(settings)
    e.put_topic("ev", topic("parquet", max_bytes=1))  # every sealed segment is over budget
    for i in range(3):
        try:
            append(e, "ev", "0", rows(100, i * 100))
        except ArchiveBehind as exc:  # the first seal filled the budget: nothing deleted
            assert "behind" in exc.message

    def reported() -> bool:
        a = e.topic_usage("ev").archive
        return a is not None and a.state == state

    wait_until(reported, state)
    with pytest.raises(ArchiveBehind, match=state):  # the refusal says why
        e.append("ev", "0", rows(1, 10_000))
    usage = e.topic_usage("ev")
    assert usage.partitions["0"].start == 0  # nothing deleted unarchived
    assert usage.archive is not None and usage.archive.lag_segments >= 1
    failures = ARCHIVE_FAILURES.labels("ev", state)._value.get()
    assert failures >= 1
    if bucket is not None:  # the node never creates a bucket, though SeaweedFS would on PUT
        info = s3server.filesystem().get_file_info(bucket)
        assert info.type == pafs.FileType.NotFound


def test_manifest_object_is_rewritten_from_sqlite_at_start(
    make_engine: EngineFactory, s3server: S3Server, s3root: str
) -> None:
    settings = archive_settings(s3server, s3root)
    e = make_engine(settings)
    e.put_topic("ev", topic("arrow"))
    for i in range(3):
        append(e, "ev", "0", rows(100, i * 100))
    wait_until(lambda: current(e, "ev", 2), "archive current")  # [200, 300) seals at close
    e.close()
    fs = s3server.filesystem()
    fs.delete_file(f"{s3root}/{manifest_key('ev')}")  # as if lost before a crash
    e2 = make_engine(settings)

    def listed() -> bool:
        try:
            doc = read_manifest(fs, s3root, "ev")
        except FileNotFoundError:
            return False
        return [(s.start, s.end) for s in doc.segments] == [(0, 100), (100, 200), (200, 300)]

    wait_until(listed, "the manifest object rewritten")
    assert e2._manifest.archived_segments("ev") == read_manifest(fs, s3root, "ev").segments


def test_missing_credentials_file_is_reported_not_a_crash(
    make_engine: EngineFactory, tmp_path: Path, s3server: S3Server, s3root: str
) -> None:
    missing = tmp_path / "not-yet-mounted"
    settings = archive_settings(s3server, s3root).model_copy(update={"credentials_file": missing})
    e = make_engine(settings)  # starts: the Secret may be mounted later
    e.put_topic("ev", topic("arrow"))
    append(e, "ev", "0", rows(100))
    append(e, "ev", "0", rows(1, 100))

    def reported() -> bool:
        a = e.topic_usage("ev").archive
        return a is not None and a.state == "Unauthorized" and str(missing) in a.message

    wait_until(reported, "Unauthorized")
    missing.write_text(
        f"[default]\naws_access_key_id = {ADMIN.access_key}\n"
        f"aws_secret_access_key = {ADMIN.secret_key}\n"
    )
    wait_until(lambda: current(e, "ev", 1), "archived once the file is there")
