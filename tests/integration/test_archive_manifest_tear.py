"""The archive manifest read while the node replaces it (real SeaweedFS on loopback).

The node rewrites ``<prefix>/<topic>/_plateau_archive.json`` in place after each
upload. SeaweedFS serves a GET racing that PUT torn (one version's length with the
other's bytes: about one read in eight under constant rewrites here), which once
failed a Spark stream with "not a plateau archive manifest". The Python readers
(``format("plateau")`` with ``archive``) must read a whole manifest every time, and
a manifest that is truly bad must still fail clearly.
"""

from __future__ import annotations

import threading
import time

import pytest

from plateau.protocol.archive import ArchivedSegment, ArchiveManifest, manifest_key
from plateau.spark import archive_reading
from plateau.spark.options import OptionError, SourceOptions, parse
from testkit.s3server import ADMIN, S3Server

TOPIC = "torn"
READS = 400


def _options(s3: S3Server, bucket: str) -> SourceOptions:
    return parse(
        {
            "topic": TOPIC,
            "path": "/nonexistent",  # the node's side is not read here
            "archive": f"s3a://{bucket}/pfx",
            "archive.endpoint": s3.endpoint,
            "archive.pathstyle": "true",
            "archive.accesskey": ADMIN.access_key,
            "archive.secretkey": ADMIN.secret_key,
        }
    )


def _manifest(segments: int) -> bytes:
    """A manifest of ``segments`` segments: each version a different length, as the
    node's are (one more segment, another ``updated_at``)."""
    doc = ArchiveManifest(
        topic=TOPIC,
        updated_at=time.time(),
        segments=[
            ArchivedSegment(
                partition="0",
                start=i * 100,
                end=(i + 1) * 100,
                min_time_ms=i,
                max_time_ms=i + 1,
                bytes=1000 + i,
                key=f"{TOPIC}/partition=0/{i:020d}.parquet",
                etag=f"etag-{i}",
                archived_at=time.time(),
            )
            for i in range(segments)
        ],
    )
    return doc.model_dump_json(by_alias=True, indent=1).encode()


def test_reads_racing_rewrites_always_see_a_whole_manifest(
    s3server: S3Server, s3bucket: str
) -> None:
    """A writer replaces the manifest as fast as it can (as the node does, one PUT each)
    while the reader loads it: every load is one of the versions written, whole."""
    fs = s3server.filesystem()
    path = f"{s3bucket}/pfx/{manifest_key(TOPIC)}"
    versions = [_manifest(n) for n in (3, 4, 5, 6)]
    with fs.open_output_stream(path) as out:
        out.write(versions[0])
    stop = threading.Event()
    writes = [0]

    def rewrite() -> None:
        while not stop.is_set():
            with fs.open_output_stream(path) as out:
                out.write(versions[writes[0] % len(versions)])
            writes[0] += 1

    writer = threading.Thread(target=rewrite, daemon=True)
    writer.start()
    options = _options(s3server, s3bucket)
    seen: set[int] = set()
    try:
        for _ in range(READS):
            manifest = archive_reading.load_manifest(options)
            assert manifest.topic == TOPIC
            n = len(manifest.segments)
            assert [s.start for s in manifest.segments] == [i * 100 for i in range(n)]
            seen.add(n)
    finally:
        stop.set()
        writer.join(timeout=30)
    assert not writer.is_alive(), "the writer stalled"
    assert writes[0] > READS // 4, f"only {writes[0]} rewrites raced {READS} reads"
    assert len(seen) > 1, "the reads never saw the manifest change: nothing raced"


def test_a_manifest_that_stays_bad_fails_clearly(s3server: S3Server, s3bucket: str) -> None:
    """Not torn but broken: after the retries, an error naming the option and the object."""
    fs = s3server.filesystem()
    path = f"{s3bucket}/pfx/{manifest_key(TOPIC)}"
    with fs.open_output_stream(path) as out:
        out.write(b'{"version": 1, "topic": "torn"')
    started = time.monotonic()
    with pytest.raises(OptionError, match=r"option 'archive': s3://.*is not a plateau archive"):
        archive_reading.load_manifest(_options(s3server, s3bucket))
    assert time.monotonic() - started < 10, "the retries took too long"


def test_no_manifest_yet_is_an_empty_history(s3server: S3Server, s3bucket: str) -> None:
    """Nothing uploaded yet: read the node only, no error and no retries."""
    manifest = archive_reading.load_manifest(_options(s3server, s3bucket))
    assert manifest.topic == TOPIC and manifest.segments == []
