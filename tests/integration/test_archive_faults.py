"""The archive's faults (issue 27), each against a real SeaweedFS and a real node process.

* The S3 server stopped for 60 s during sustained ingest (the one long test): appends
  go on, then shed with 429 ArchiveBehind once the budget is full; uploads resume; the
  lag returns to normal; every acknowledged record is in the history exactly once.
* ``kill -9`` of the node during a multipart upload, and between an upload and the
  manifest object's update (before and after its SQLite row): after the restart each
  segment is in the bucket once, under its one key, and the manifest object lists
  exactly the archived segments.
* Wrong keys, a read-only bucket, a missing bucket, a full bucket: the topic's state
  and the failures metric say so, the node keeps serving and keeps its local data, and
  it restarts cleanly into the same state (no crash loop).

The kill windows are hit without hooks in the node: a TCP proxy between the node and
the S3 server (``testkit.s3gate.Gate``) holds the node's next request once a chosen
request has gone through, so the node is killed at a known point of its upload; the S3
server itself stays real. This module runs its own S3 server: the outage test stops it.
Spark reading while the node uploads and retention deletes locally is
tests/spark/test_spark_archive.py's (a real PySpark session lives there).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from plateau.protocol import ARROW_FILE, SPAN_END_HEADER
from plateau.protocol.archive import ArchiveManifest, manifest_key, parse_segment_name
from testkit.nodeproc import NodeProcess, metric_values
from testkit.s3gate import Gate
from testkit.s3server import ADMIN, READER, S3Keys, S3Server, weed_binary

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("faults-s3"), weed_binary()).start()
    try:
        yield server
    finally:
        server.remove()


_buckets = iter(range(1, 1000))


@pytest.fixture
def bucket(s3: S3Server) -> str:
    if s3.proc is None:  # a failed outage test left it down
        s3.start()
    return s3.create_bucket(f"faults-{next(_buckets):03d}")


def start_node(
    tmp_path: Path, endpoint: str, bucket: str, keys: S3Keys = ADMIN, **env: str
) -> NodeProcess:
    extra = {
        **keys.env(),
        "PLATEAU_STORAGE__ARCHIVE__ENDPOINT": endpoint,
        "PLATEAU_STORAGE__ARCHIVE__RETRY_MAX_SECONDS": "2",
        "PLATEAU_STORAGE__RETENTION_INTERVAL_SECONDS": "0.2",
        **env,
    }
    args = ["--archive-url", f"s3://{bucket}/pfx"]
    return NodeProcess(tmp_path / "data", env=extra, args=args).start()


def archive_of(node: NodeProcess, topic: str = "ev") -> dict[str, Any]:
    usage = httpx.get(f"{node.url}/admin/topics/{topic}", timeout=10).json()["usage"]
    return {**usage["archive"], "partitions": usage["partitions"]}


def wait_for(
    check: Callable[[], bool],
    timeout: float,
    what: str | Callable[[], str],
    node: NodeProcess | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    seen = f"; archive: {archive_of(node)}; node log: {node.log()[-1500:]}" if node else ""
    what = what if isinstance(what, str) else what()
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{seen}")


def caught_up(node: NodeProcess, segments: int | None = None) -> bool:
    a = archive_of(node)
    done = a["state"] == "Current" and a["lag_segments"] == 0
    return done and (segments is None or a["uploaded_segments"] == segments)


def random_rows(n: int, first_id: int) -> bytes:
    """An Arrow IPC file of ``n`` rows: time, a unique id and 100 random bytes (incompressible)."""
    table = pa.table(
        {
            "time": pa.array(range(T0 + first_id, T0 + first_id + n), pa.int64()),
            "id": pa.array(range(first_id, first_id + n), pa.int64()),
            "blob": pa.array([os.urandom(100) for _ in range(n)], pa.binary()),
        }
    )
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue())


def post(c: httpx.Client, partition: str, body: bytes) -> httpx.Response:
    """Append, waiting out the partition's 429 while its previous segment is being sealed
    (a 429 ArchiveBehind is returned: the archive is what the tests look at)."""
    headers = {"content-type": ARROW_FILE}
    deadline = time.monotonic() + 30
    while True:
        r = c.post(f"/topic/ev/partition/{partition}", content=body, headers=headers)
        if r.status_code != 429 or "ArchiveBehind" in r.text or time.monotonic() > deadline:
            return r
        time.sleep(0.05)


def listing(s3: S3Server, bucket: str) -> dict[str, list[tuple[int, int]]]:
    """The bucket's segment objects of topic ``ev``: spans by partition, as keys name them."""
    sel = pafs.FileSelector(f"{bucket}/pfx/ev", recursive=True, allow_not_found=True)
    spans: dict[str, list[tuple[int, int]]] = {}
    for info in s3.filesystem().get_file_info(sel):
        if info.type != pafs.FileType.File or "/partition=" not in info.path:
            continue
        span = parse_segment_name(info.base_name)
        assert span is not None, f"unexpected object {info.path}"
        spans.setdefault(info.path.split("partition=")[1].split("/")[0], []).append(span)
    return {p: sorted(s) for p, s in spans.items()}


def manifest(s3: S3Server, bucket: str) -> ArchiveManifest:
    with s3.filesystem().open_input_stream(f"{bucket}/pfx/{manifest_key('ev')}") as f:
        return ArchiveManifest.model_validate_json(f.read())


def assert_archived_once(s3: S3Server, bucket: str, node: NodeProcess) -> None:
    """Every object one span, spans of a partition contiguous from 0 and disjoint, and the
    manifest object lists exactly those (and the node counts as many)."""
    spans = listing(s3, bucket)
    for p, s in spans.items():
        assert s[0][0] == 0 and all(a[1] == b[0] for a, b in itertools.pairwise(s)), (p, s)
    doc = manifest(s3, bucket)
    listed = {p: [(x.start, x.end) for x in segs] for p, segs in doc.by_partition().items()}
    assert listed == spans
    assert archive_of(node)["uploaded_segments"] == sum(len(s) for s in spans.values())


def make_topic(node: NodeProcess, partitions: int = 1, **segment: object) -> None:
    config = {
        "partitions": partitions,
        "segment": {"format": "parquet", **segment},
        "retention": {"max_bytes": 64 << 20},
        "archive": {"enabled": True},
    }
    with node.client() as c:
        r = c.put("/admin/topics/ev", json=config)
        assert r.status_code == 201, r.text


def read_ids(node: NodeProcess, partition: str, end: int) -> tuple[list[int], int]:
    """Ids at indexes [0, end) through the node's reads (archive below its disk, then local),
    and how many of them the node said came from the archive."""
    ids: list[int] = []
    archived = 0
    with httpx.Client(base_url=node.url, timeout=60) as c:
        while len(ids) < end:
            r = c.get(
                f"/topic/ev/partition/{partition}/records",
                params={"start": len(ids), "page_size": 10_000},
                headers={"accept": ARROW_FILE},
            )
            assert r.status_code == 200, r.text
            table = ipc.open_file(pa.BufferReader(r.content)).read_all()
            assert int(r.headers[SPAN_END_HEADER]) == len(ids) + table.num_rows
            assert table.num_rows > 0, f"no progress at {len(ids)}"
            ids += table.column("id").to_pylist()
            archived += int(r.headers.get("x-archived-records", "0"))
    return ids, archived


def uploads_ok(node: NodeProcess) -> float:
    got = metric_values(node.url, "plateau_archive_uploads_total")
    return got.get((("result", "ok"), ("topic", "ev")), 0.0)


def test_kill_during_a_multipart_upload_archives_the_segment_once(
    tmp_path: Path, s3: S3Server, bucket: str
) -> None:
    gate = Gate(s3.ports["s3"])
    # a 14 MB segment goes up in two parts (pyarrow's parts are 10 MiB): hold the second
    gate.hold_when = lambda line, seen: line.startswith("PUT") and "partNumber=2" in line
    node = start_node(tmp_path, gate.endpoint, bucket)
    try:
        make_topic(node, max_rows=120_000)
        with node.client() as c:
            for first in (0, 60_000):
                assert post(c, "0", random_rows(60_000, first)).status_code == 200
            assert post(c, "0", random_rows(1, 120_000)).status_code == 200  # seals [0, 120000)
        wait_for(gate.held.is_set, 60, "the upload's second part")
        node.kill()
        assert listing(s3, bucket) == {}  # never completed: no object, not even a partial one
        gate.release()
        node.start()
        # recovery seals the 1-row open segment too: [0, 120000) and [120000, 120001)
        spans = [(0, 120_000), (120_000, 120_001)]
        wait_for(lambda: caught_up(node, 2), 90, "the segments archived after the restart", node)
        assert listing(s3, bucket) == {"0": spans}
        assert_archived_once(s3, bucket, node)
        assert uploads_ok(node) == 2  # the big one again from the start, to the same key
        obj = f"{bucket}/pfx/{manifest(s3, bucket).segments[0].key}"
        table = pq.read_table(obj, filesystem=s3.filesystem())
        assert table.column("id").to_pylist() == list(range(120_000))
    finally:
        node.stop()
        gate.close()


def _completed(seen: list[str]) -> bool:
    """Whether the segment's multipart upload was completed (POST ...?uploadId=)."""
    return any(  # the key as sent: "=" is percent-encoded
        s.startswith("POST") and "/partition%3D0/" in s and "uploadId=" in s for s in seen
    )


@pytest.mark.parametrize("window", ["uploaded-not-recorded", "recorded-not-published"])
def test_kill_between_upload_and_manifest_update(
    tmp_path: Path, s3: S3Server, bucket: str, window: str
) -> None:
    """Killed once the object is complete: before the node verified and recorded it (its
    next request, the verification, is held), or after its SQLite row but before the
    manifest object listing it is written (that write is held)."""
    gate = Gate(s3.ports["s3"])
    if window == "uploaded-not-recorded":
        gate.hold_when = lambda line, seen: _completed(seen[:-1])
    else:
        gate.hold_when = lambda line, seen: "_plateau_archive.json" in line and _completed(seen)
    node = start_node(tmp_path, gate.endpoint, bucket)
    try:
        make_topic(node, max_rows=1000)
        with node.client() as c:
            assert post(c, "0", random_rows(1000, 0)).status_code == 200
            assert post(c, "0", random_rows(1, 1000)).status_code == 200  # seals [0, 1000)
        wait_for(gate.held.is_set, 60, lambda: f"the {window} window (requests: {gate.seen})")
        node.kill()
        assert listing(s3, bucket) == {"0": [(0, 1000)]}  # the object is there...
        try:
            listed = [(s.start, s.end) for s in manifest(s3, bucket).segments]
        except FileNotFoundError:
            listed = []
        assert listed == []  # ...and the manifest object does not list it
        gate.release()
        node.start()
        # recovery seals the 1-row open segment [1000, 1001) too
        wait_for(lambda: caught_up(node, 2), 90, "the archive current after the restart", node)
        wait_for(lambda: len(manifest(s3, bucket).segments) == 2, 30, "the manifest object")
        assert listing(s3, bucket) == {"0": [(0, 1000), (1000, 1001)]}
        assert_archived_once(s3, bucket, node)
        # not recorded: uploaded again to its key; recorded: only the manifest object rewritten
        assert uploads_ok(node) == (2 if window == "uploaded-not-recorded" else 1)
        ids, _ = read_ids(node, "0", 1001)
        assert ids == list(range(1001))
    finally:
        node.stop()
        gate.close()


def fill_bucket(s3: S3Server, bucket: str) -> None:
    """A full bucket, SeaweedFS's way: a 1 MB quota, 2 MB in it, the quota enforced (which
    makes the bucket refuse writes, as ``s3.bucket.quota.enforce`` does for a bucket over
    its quota)."""
    s3.shell(f"s3.bucket.quota -name={bucket} -op=set -sizeMB=1")
    with s3.filesystem().open_output_stream(f"{bucket}/filler") as out:
        out.write(os.urandom(2 << 20))
    # the bucket's size reaches the filer's statistics within a moment
    wait_for(lambda: "read only" in s3.shell("s3.bucket.quota.enforce -apply"), 30, "enforced")


@pytest.mark.parametrize(
    ("fault", "state"),
    [
        ("wrong keys", "Unauthorized"),
        ("read-only keys", "Unauthorized"),
        ("missing bucket", "BucketNotFound"),
        ("full bucket", "Behind"),  # SeaweedFS refuses with a 500 InternalError: retried
    ],
)
def test_refused_archive_is_reported_and_the_node_keeps_serving(
    tmp_path: Path, s3: S3Server, bucket: str, fault: str, state: str
) -> None:
    keys, target = ADMIN, bucket
    if fault == "wrong keys":
        keys = S3Keys("nobody", "wrong-secret")
    elif fault == "read-only keys":
        keys = READER
    elif fault == "missing bucket":
        target = f"{bucket}-missing"
    else:
        fill_bucket(s3, bucket)
    node = start_node(tmp_path, s3.endpoint, target, keys)
    try:
        make_topic(node, max_rows=100)
        with node.client() as c:
            for i in range(4):  # three sealed segments and an open one
                r = post(c, "0", random_rows(100 if i < 3 else 1, i * 100))
                assert r.status_code == 200, r.text

        def reported(lag: int = 3) -> bool:
            a = archive_of(node)
            return bool(a["state"] == state and a["lag_segments"] == lag)

        wait_for(reported, 60, f"state {state}", node)
        a = archive_of(node)
        assert a["message"] and a["uploaded_segments"] == 0
        part = a["partitions"]["0"]
        assert (part["start"], part["end"], part["segments"]) == (0, 301, 4)  # all kept
        failures = metric_values(node.url, "plateau_archive_failures_total")
        assert failures[(("reason", state), ("topic", "ev"))] >= 1
        # it keeps serving: reads of everything, and appends (the budget is far from full)
        ids, _ = read_ids(node, "0", 301)
        assert ids == list(range(301))
        with node.client() as c:
            assert post(c, "0", random_rows(1, 301)).status_code == 200
        # backing off, not looping: a few attempts in 3 s (retry_max_seconds is 2)
        before = sum(metric_values(node.url, "plateau_archive_failures_total").values())
        time.sleep(3)
        after = sum(metric_values(node.url, "plateau_archive_failures_total").values())
        assert after - before <= 4, (before, after)
        assert listing(s3, bucket) == {}
        if fault == "missing bucket":  # never created, though SeaweedFS would on a PUT
            info = s3.filesystem().get_file_info(target)
            assert info.type == pafs.FileType.NotFound
        # and it restarts cleanly into the same state, with its data
        assert node.stop() == 0
        node.start()
        # the open segment was sealed at the stop: four wait now
        wait_for(lambda: reported(4), 60, f"state {state} after a restart", node)
        assert archive_of(node)["partitions"]["0"]["end"] == 302
    finally:
        node.stop()


class Producer:
    """Appends 200-row batches of unique ids to each partition until stopped, keeping what
    was acknowledged and what was shed (429 ArchiveBehind)."""

    def __init__(self, node: NodeProcess, partitions: int, per_second: float) -> None:
        self.node, self.interval = node, 1.0 / per_second
        self.acked: dict[str, set[int]] = {str(p): set() for p in range(partitions)}
        self.sent: set[int] = set()
        self.shed = self.errors = 0
        self._ids = itertools.count(0, 200)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(p,), daemon=True) for p in self.acked
        ]

    def start(self) -> Producer:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def _run(self, partition: str) -> None:
        with httpx.Client(base_url=self.node.url, timeout=30) as c:
            while not self._stop.wait(self.interval):
                first = next(self._ids)
                self.sent.update(range(first, first + 200))
                try:
                    r = post(c, partition, random_rows(200, first))
                except httpx.HTTPError:
                    self.errors += 1
                    continue
                if r.status_code == 200:
                    self.acked[partition].update(range(first, first + 200))
                elif r.status_code == 429 and r.json().get("reason") == "ArchiveBehind":
                    self.shed += 1
                    assert int(r.headers["retry-after"]) >= 1
                else:
                    self.errors += 1


@pytest.mark.slow
def test_s3_down_for_a_minute_during_sustained_ingest(
    tmp_path: Path, s3: S3Server, bucket: str
) -> None:
    node = start_node(tmp_path, s3.endpoint, bucket)
    max_age = 2
    try:
        with node.client() as c:
            config = {
                "partitions": 2,
                "segment": {"format": "parquet", "max_rows": 2000, "max_age_seconds": max_age},
                "retention": {"max_bytes": 2_000_000},  # about 8 s of this ingest
                "archive": {"enabled": True},
            }
            assert c.put("/admin/topics/ev", json=config).status_code == 201
        producer = Producer(node, partitions=2, per_second=10).start()  # 2 x 240 KB/s
        wait_for(lambda: archive_of(node)["uploaded_segments"] >= 4, 60, "uploads", node)
        before = archive_of(node)["uploaded_segments"]
        s3.stop()
        states: set[str] = set()
        down_until = time.monotonic() + 60
        while time.monotonic() < down_until:
            states.add(archive_of(node)["state"])
            time.sleep(1)
        shed_while_down = producer.shed
        s3.start()
        time.sleep(10)  # ingest goes on with the archive back
        producer.stop()
        wait_for(lambda: caught_up(node), 120, "the archive caught up", node)
        a = archive_of(node)
        assert a["lag_seconds"] <= max_age + 10 and a["uploaded_segments"] > before
        assert "Unreachable" in states, states
        assert shed_while_down > 0, "the budget never filled: appends were not shed"
        assert producer.errors == 0
        # every acknowledged record once in the history (archive below the disk, then local)
        spans = listing(s3, bucket)
        history_from_archive = 0
        for p, acked in producer.acked.items():
            end = a["partitions"][p]["end"]
            ids, archived = read_ids(node, p, end)
            history_from_archive += archived
            assert len(ids) == len(set(ids)), f"partition {p}: an id twice"
            assert acked <= set(ids), f"partition {p}: acknowledged ids missing"
            assert set(ids) <= producer.sent
            # the archive's objects hold exactly the history's records at their indexes
            for first, stop in spans[p]:
                key = f"{bucket}/pfx/ev/partition={p}/{first:020d}-{stop - 1:020d}.parquet"
                table = pq.read_table(key, filesystem=s3.filesystem(), columns=["id"])
                assert table.column("id").to_pylist() == ids[first:stop]
        assert history_from_archive > 0  # retention moved history into the archive alone
        assert_archived_once(s3, bucket, node)
    finally:
        node.stop()
        if s3.proc is None:
            s3.start()
