"""Spark over a topic's whole history, archive then node (real PySpark with Spark's S3A
connector, a real SeaweedFS, a real node that uploads its sealed segments and lets
retention delete them locally): ``read_topic(archive=...)`` in url and path mode gives
every appended index exactly once with the topic's columns and meta columns, also within
offset, time and partition bounds; plain ``spark.read.parquet`` of the archive works on
its own; a stream from ``earliest`` starts in the archive, goes on at the node and
neither loses nor repeats a record across a restart from its checkpoint; reads while
the node uploads and deletes locally never miss or double an index.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

import plateau.spark
from plateau.client import PlateauClient
from plateau.protocol.archive import ArchiveManifest, manifest_key
from plateau.spark.options import OptionError
from testkit.nodeproc import NodeProcess
from testkit.s3server import ADMIN, S3Keys, S3Server
from tests.spark.conftest import IN_CI
from tests.spark.topics import STEP_MS, T0_MS, expected_time, rows, value, wait_sealed

TOPIC = "hist"
PARTS = ["0", "1"]
SEGMENT = 100
SEALED = 800  # per partition, in 100-row appends: 8 segments
OPEN = 37  # appended after, unsealed: only the node has them
BUCKET = "spark-archive"
S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"


@pytest.fixture(scope="module")
def s3(s3server: S3Server) -> S3Server:
    """The session's SeaweedFS (tests/conftest.py), with this module's bucket."""
    s3server.create_bucket(BUCKET)
    return s3server


@pytest.fixture(scope="module")
def archived_node(
    s3: S3Server, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NodeProcess]:
    """A node whose topic's early segments are only in the archive (retention deleted
    them locally once uploaded), later ones on both, the last ones local only."""
    try:
        spark._jvm.org.apache.spark.util.Utils.classForName(S3A_CLASS, True, False)
    except Exception:
        why = f"{S3A_CLASS} is not on Spark's class path (tools/fetch-s3a-jars)"
        if IN_CI:
            pytest.fail(f"CI=true never skips: {why}")
        pytest.skip(why)
    env = {
        "PLATEAU_STORAGE__ARCHIVE__URL": f"s3://{BUCKET}/pfx",
        "PLATEAU_STORAGE__ARCHIVE__ENDPOINT": s3.endpoint,
        "PLATEAU_STORAGE__RETENTION_INTERVAL_SECONDS": "0.2",
        **ADMIN.env(),
    }
    node = NodeProcess(tmp_path_factory.mktemp("node") / "data", env=env).start()
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, val in s3a_settings(s3).items():
        conf.set(key, val)
    with PlateauClient(node.url) as c:
        c.put_topic(
            TOPIC, partitions=len(PARTS), segment_format="parquet", segment_max_rows=SEGMENT,
            segment_max_age_seconds=3600, max_bytes=10_000, archive={"enabled": True},
        )  # fmt: skip
        for start in range(0, SEALED, SEGMENT):  # in turns: retention takes the oldest first
            for p in PARTS:
                append(c, p, start, start + SEGMENT)
        wait_archived(c)
        for p in PARTS:
            append(c, p, SEALED, SEALED + OPEN)
    yield node
    node.stop()


def s3a_settings(s3: S3Server, bucket: str = BUCKET, keys: S3Keys = ADMIN) -> dict[str, str]:
    """S3A's per-bucket settings for the loopback SeaweedFS (as ``plateau spark-conf`` prints
    them for a node's archive)."""
    base = f"fs.s3a.bucket.{bucket}."
    return {
        base + "endpoint": s3.endpoint,
        base + "path.style.access": "true",
        base + "connection.ssl.enabled": "false",
        base + "endpoint.region": "us-east-1",
        base + "access.key": keys.access_key,
        base + "secret.key": keys.secret_key,
        base + "aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
    }


def append(c: PlateauClient, p: str, start: int, end: int, topic: str = TOPIC) -> None:
    for _ in range(600):
        try:
            span = c.append(topic, p, rows(p, start, end))
            assert span.start == start, (span, start)
            return
        except Exception as e:  # ArchiveBehind / busy: the uploader catches up
            if "429" not in str(e) and "Busy" not in type(e).__name__:
                raise
            time.sleep(0.1)
    raise AssertionError("appends stayed refused")


def wait_archived(c: PlateauClient, timeout: float = 90) -> None:
    """Every sealed segment uploaded, and retention deleted the early ones locally."""
    deadline = time.monotonic() + timeout
    while True:
        usage = c.get_topic(TOPIC).usage  # its partitions' spans are the local disk's
        archive = usage.archive
        done = (
            archive is not None
            and archive.lag_segments == 0
            and all(usage.partitions[p].start >= 3 * SEGMENT for p in PARTS)
        )
        if done:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not archived: {usage}")
        time.sleep(0.2)


def manifest(s3: S3Server) -> ArchiveManifest:
    with s3.filesystem(ADMIN).open_input_stream(f"{BUCKET}/pfx/{manifest_key(TOPIC)}") as f:
        return ArchiveManifest.model_validate_json(f.read())


def check_rows(df: Any, expect: dict[str, range]) -> None:
    """Every index of ``expect`` once, with its values and meta columns."""
    got = df.select("_partition", "_index", "v", "s", "_time").collect()
    seen: dict[str, list[int]] = {p: [] for p in expect}
    for r in got:
        assert r["v"] == value(r["_partition"], r["_index"]), r
        assert r["s"] == f"r{r['_index']}", r
        assert r["_time"].replace(tzinfo=None) == expected_time(r["_index"]).replace(tzinfo=None), r
        seen[r["_partition"]].append(r["_index"])
    assert {p: sorted(i) for p, i in seen.items()} == {p: list(r) for p, r in expect.items()}


def full(end: int = SEALED + OPEN) -> dict[str, range]:
    return {p: range(0, end) for p in PARTS}


def test_history_is_archive_then_node(archived_node: NodeProcess, s3: S3Server, spark: Any) -> None:
    """The setup holds: the first indexes exist only in the archive, the node has the rest."""
    archived = manifest(s3).by_partition()
    with PlateauClient(archived_node.url) as c:
        local = c.get_topic(TOPIC).usage.partitions
    for p in PARTS:
        assert archived[p][0].start == 0
        assert local[p].start > 0  # deleted locally: only the archive has them
        assert archived[p][-1].end > local[p].start  # some on both: read once
    df = plateau.spark.read_topic(
        spark, url=archived_node.url, topic=TOPIC, archive=f"s3a://{BUCKET}/pfx"
    )
    # the archived part is Spark's own scan of the objects, not the node serving them
    assert any(f.startswith(f"s3a://{BUCKET}/pfx/{TOPIC}/partition=") for f in df.inputFiles())
    check_rows(df, full())
    totals = df.agg(F.count("*").alias("n"), F.sum("v").alias("v")).first()
    assert totals is not None
    assert totals["n"] == len(PARTS) * (SEALED + OPEN)
    assert totals["v"] == sum(value(p, i) for p in PARTS for i in range(SEALED + OPEN))


def test_path_mode_reads_archive_and_volume(archived_node: NodeProcess, spark: Any) -> None:
    """Path mode: the volume's sealed segments and the archive in one Parquet scan."""
    df = plateau.spark.read_topic(
        spark, path=str(archived_node.data_dir), topic=TOPIC, archive=f"s3a://{BUCKET}/pfx"
    )
    check_rows(df, full(SEALED))  # path mode sees sealed segments only


def test_bounds(archived_node: NodeProcess, spark: Any) -> None:
    """Offsets, times and partitions cut the history as they cut a node's data."""
    archive = f"s3a://{BUCKET}/pfx"
    df = plateau.spark.read_topic(
        spark, url=archived_node.url, topic=TOPIC, archive=archive, partitions="1",
        startingOffsets=json.dumps({"1": 150}), endingOffsets=json.dumps({"1": SEALED + 10}),
    )  # fmt: skip
    check_rows(df, {"1": range(150, SEALED + 10)})
    df = plateau.spark.read_topic(
        spark, path=str(archived_node.data_dir), topic=TOPIC, archive=archive,
        startingTimestamp=str(T0_MS + 250 * STEP_MS), endingTimestamp=str(T0_MS + 650 * STEP_MS),
    )  # fmt: skip
    check_rows(df, {p: range(250, 650) for p in PARTS})


def test_plain_spark_reads_the_archive(archived_node: NodeProcess, spark: Any) -> None:
    """Any engine reads the archive without plateau: partition discovery gives 'partition'."""
    df = spark.read.parquet(f"s3a://{BUCKET}/pfx/{TOPIC}")
    counts = {str(r["partition"]): r["count"] for r in df.groupBy("partition").count().collect()}
    assert set(counts) == set(PARTS)
    assert all(n >= 3 * SEGMENT and n % SEGMENT == 0 for n in counts.values()), counts


def test_stream_from_earliest_starts_in_archive(
    archived_node: NodeProcess, spark: Any, tmp_path: Path
) -> None:
    """A stream from 'earliest' over the volume (path mode, where the first indexes are
    gone) reads them from the archive, then the node's segments; restarted from its
    checkpoint it goes on where it stopped: every index once."""
    out = tmp_path / "out"

    def run(limit: int) -> None:
        df = plateau.spark.read_stream(
            spark, path=str(archived_node.data_dir), topic=TOPIC,
            archive=f"s3a://{BUCKET}/pfx", startingOffsets="earliest",
            maxRecordsPerTrigger=str(limit),
        )  # fmt: skip
        query = (
            df.select("_partition", "_index", "v", "s", "_time")
            .writeStream.format("parquet")
            .option("path", str(out / "sink"))
            .option("checkpointLocation", str(out / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()

    run(700)  # several micro-batches: from the archive, across to the volume
    check_rows(spark.read.parquet(str(out / "sink")), full(SEALED))
    more = SEALED + SEGMENT
    with PlateauClient(archived_node.url) as c:
        for p in PARTS:  # a segment seals when the next append would overfill it
            append(c, p, SEALED + OPEN, more)
            append(c, p, more, more + 1)
    wait_sealed(archived_node.data_dir, TOPIC, dict.fromkeys(PARTS, more))
    run(100_000)  # restarted from the checkpoint: only what is new
    check_rows(spark.read.parquet(str(out / "sink")), full(more))


def test_reads_while_the_node_uploads_and_deletes(archived_node: NodeProcess, spark: Any) -> None:
    """Reads while appends seal segments, the uploader archives them and retention deletes
    them locally: each read has every index from 0 to at least what was acknowledged
    before it started, none twice, none missing."""
    topic = "live"
    stop = threading.Event()
    acked = dict.fromkeys(PARTS, 0)
    errors: list[BaseException] = []

    def appender() -> None:
        try:
            with PlateauClient(archived_node.url) as c:
                while not stop.is_set():
                    for p in PARTS:
                        start = acked[p]
                        append(c, p, start, start + SEGMENT, topic)
                        acked[p] = start + SEGMENT
        except BaseException as e:
            errors.append(e)

    with PlateauClient(archived_node.url) as c:
        c.put_topic(
            topic, partitions=len(PARTS), segment_format="parquet", segment_max_rows=SEGMENT,
            segment_max_age_seconds=3600, max_bytes=8_000, archive={"enabled": True},
        )  # fmt: skip
    thread = threading.Thread(target=appender, daemon=True)
    thread.start()
    try:
        while min(acked.values()) == 0 and not errors:  # an empty topic has no columns yet
            time.sleep(0.05)
        reads = archived_reads = 0
        while reads < 3 or min(acked.values()) < 8 * SEGMENT or not archived_reads:
            before = dict(acked)
            df = plateau.spark.read_topic(
                spark, url=archived_node.url, topic=topic, archive=f"s3a://{BUCKET}/pfx",
                columns="_partition,_index,v",
            )  # fmt: skip
            archived_reads += any(f.startswith("s3a://") for f in df.inputFiles())
            got: dict[str, list[int]] = {p: [] for p in PARTS}
            for r in df.collect():
                assert r["v"] == value(r["_partition"], r["_index"]), r
                got[r["_partition"]].append(r["_index"])
            for p in PARTS:
                indexes = sorted(got[p])
                assert indexes == list(range(len(indexes))), (p, "a gap or a repeat")
                assert len(indexes) >= before[p], (p, len(indexes), before[p])
            reads += 1
            assert not errors, errors
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive(), "the appender stalled"
    assert not errors, errors


def test_python_source_takes_archive_options(
    archived_node: NodeProcess, s3: S3Server, spark: Any
) -> None:
    """``format("plateau")`` reads the archive with the ``archive.*`` options (pyarrow's S3
    client in the Python workers): path mode, where the first indexes are archive-only."""
    df = (
        spark.read.format("plateau")
        .option("path", str(archived_node.data_dir))
        .option("topic", TOPIC)
        .option("archive", f"s3://{BUCKET}/pfx")
        .option("archive.endpoint", s3.endpoint)
        .option("archive.pathStyle", "true")
        .option("archive.accessKey", ADMIN.access_key)
        .option("archive.secretKey", ADMIN.secret_key)
        .option("endingOffsets", json.dumps(dict.fromkeys(PARTS, SEALED)))
        .load()
    )
    check_rows(df, full(SEALED))


def test_refused_credentials_name_the_archive(
    archived_node: NodeProcess, s3: S3Server, spark: Any
) -> None:
    """Keys the S3 server refuses: the read fails at once, naming option 'archive'."""
    bucket = "spark-archive-refused"
    s3.create_bucket(bucket)
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, val in s3a_settings(s3, bucket, S3Keys("nobody", "wrong-secret")).items():
        conf.set(key, val)
    refused = r"option 'archive': cannot read .*(403|Forbidden|Denied)"
    with pytest.raises(OptionError, match=refused):
        plateau.spark.read_topic(
            spark, url=archived_node.url, topic=TOPIC, archive=f"s3a://{bucket}/pfx"
        )
