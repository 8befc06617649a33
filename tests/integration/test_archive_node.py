"""The archive as a user of a real ``plateau node`` process sees it over HTTP: 409 without
an archive url, objects and status after appends, 429 ArchiveBehind with Retry-After
when the archive is unreachable and the budget full, and exactly-once after kill -9.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from testkit.nodeproc import NodeProcess, free_port, metric_values
from testkit.s3server import ADMIN, S3Server
from testkit.waiting import wait_until
from tests.integration.test_archive_faults import caught_up
from tests.integration.test_archive_upload import T0, read_manifest


def test_node_refuses_archive_without_url_and_changes_nothing(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data").start()
    try:
        with node.client() as c:
            assert c.put("/admin/topics/t", json={"partitions": 1}).status_code == 201
            r = c.put("/admin/topics/t", json={"archive": {"enabled": True}})
            assert r.status_code == 409, r.text
            body = r.json()
            assert body["reason"] == "ArchiveNotConfigured"
            assert "storage.archive.url" in body["message"]
            assert c.get("/admin/topics/t").json()["archive"]["enabled"] is False
            r = c.put("/admin/topics/new", json={"archive": {"enabled": True}})
            assert r.status_code == 409
            assert c.get("/admin/topics/new").status_code == 404
    finally:
        node.stop()


def test_node_archives_what_it_acknowledges(
    tmp_path: Path, s3server: S3Server, s3root: str
) -> None:
    env = {
        **ADMIN.env(),
        "PLATEAU_STORAGE__ARCHIVE__ENDPOINT": s3server.endpoint,
        "PLATEAU_STORAGE__ARCHIVE__RETRY_MAX_SECONDS": "1",
    }
    node = NodeProcess(tmp_path / "data", env=env, args=["--archive-url", f"s3://{s3root}"]).start()
    try:
        with node.client() as c:
            r = c.put(
                "/admin/topics/ev",
                json={"segment": {"max_rows": 50}, "archive": {"enabled": True}},
            )
            assert r.status_code == 201, r.text
            for i in range(5):
                batch = [{"time": T0 + i * 50 + j, "v": i * 50 + j} for j in range(50)]
                for _ in range(1000):  # 429 while the previous segment seals
                    r = c.post("/topic/ev/partition/0", json=batch)
                    if r.status_code != 429:
                        break
                    time.sleep(0.02)
                assert r.status_code == 200, r.text

            # uploaded_segments counts a segment once its SQLite row is in, the lag until
            # the manifest object lists it: caught_up waits for both
            wait_until(lambda: caught_up(node, 4), "4 segments archived")
            usage = c.get("/admin/topics/ev").json()["usage"]
            assert usage["archive"]["url"] == f"s3://{s3root}/ev"
            assert usage["partitions"]["0"]["archive"]["start"] == 0
            assert usage["partitions"]["0"]["archive"]["end"] == 200
            ok = metric_values(node.url, "plateau_archive_uploads_total")
            assert ok[(("result", "ok"), ("topic", "ev"))] == 4
        doc = read_manifest(s3server.filesystem(), s3root, "ev")
        assert [(s.start, s.end) for s in doc.segments] == [(i * 50, i * 50 + 50) for i in range(4)]
    finally:
        node.stop()


def test_node_sheds_archive_behind_with_retry_after(tmp_path: Path, s3root: str) -> None:
    """Over HTTP: an unreachable archive and a full budget give 429, Retry-After and reason
    ArchiveBehind, while the topic keeps every acknowledged record."""
    env = {
        **ADMIN.env(),
        "PLATEAU_STORAGE__ARCHIVE__ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "PLATEAU_STORAGE__ARCHIVE__RETRY_MAX_SECONDS": "1",
        "PLATEAU_STORAGE__RETENTION_INTERVAL_SECONDS": "0.2",
    }
    node = NodeProcess(tmp_path / "data", env=env, args=["--archive-url", f"s3://{s3root}"]).start()
    try:
        with node.client() as c:
            r = c.put(
                "/admin/topics/ev",
                json={
                    "segment": {"max_rows": 50},
                    "retention": {"max_bytes": 4000},
                    "archive": {"enabled": True},
                },
            )
            assert r.status_code == 201, r.text
            acked = 0
            refused = None
            for _ in range(400):
                batch = [{"time": T0 + acked + j, "v": acked + j} for j in range(50)]
                r = c.post("/topic/ev/partition/0", json=batch)
                if r.status_code == 200:
                    acked += 50
                elif r.json().get("reason") == "ArchiveBehind":
                    refused = r
                    break
                else:
                    assert r.status_code == 429, r.text
                time.sleep(0.01)
            assert refused is not None, "never shed"
            assert refused.status_code == 429
            assert int(refused.headers["retry-after"]) >= 1
            assert "segments" in refused.json()["message"]
            usage = c.get("/admin/topics/ev").json()["usage"]
            assert usage["partitions"]["0"]["start"] == 0  # nothing deleted unarchived
            assert usage["partitions"]["0"]["end"] == acked
            assert usage["archive"]["state"] in ("Behind", "Unreachable")

            def unreachable() -> bool:
                a = c.get("/admin/topics/ev").json()["usage"]["archive"]
                return bool(a["state"] == "Unreachable")

            wait_until(unreachable, "Unreachable")
            lag = metric_values(node.url, "plateau_archive_lag_segments")
            assert lag.get((("topic", "ev"),), 0) >= 1 or usage["archive"]["lag_segments"] >= 1
    finally:
        node.stop()


def test_kill_9_during_uploads_archives_each_segment_once(
    tmp_path: Path, s3server: S3Server, s3root: str
) -> None:
    """A node killed while it uploads: after the restart every sealed segment is in the
    archive exactly once, contiguous, and the manifest object matches what was sent."""
    env = {**ADMIN.env(), "PLATEAU_STORAGE__ARCHIVE__ENDPOINT": s3server.endpoint}
    node = NodeProcess(tmp_path / "data", env=env, args=["--archive-url", f"s3://{s3root}"]).start()
    n = 0
    try:
        with node.client() as c:
            body = {"segment": {"max_rows": 40, "format": "arrow"}, "archive": {"enabled": True}}
            assert c.put("/admin/topics/ev", json=body).status_code == 201
            for _ in range(30):
                batch = [{"time": T0 + n + j, "v": n + j} for j in range(40)]
                for _ in range(1000):
                    r = c.post("/topic/ev/partition/0", json=batch)
                    if r.status_code != 429:
                        break
                    time.sleep(0.01)
                assert r.status_code == 200, r.text
                n += 40
        node.kill()  # uploads in flight, manifest objects half written: whatever it was doing
        node.start()
        with node.client() as c:
            wait_until(lambda: caught_up(node), "archive current after kill -9")
            end = c.get("/admin/topics/ev").json()["usage"]["partitions"]["0"]["archive"]["end"]
    finally:
        node.stop()
    fs = s3server.filesystem()
    doc = read_manifest(fs, s3root, "ev")
    spans = [(s.start, s.end) for s in doc.segments]
    assert spans[0][0] == 0 and spans[-1][1] == end >= n - 40
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # no gap, no overlap
    for seg in doc.segments:
        data = fs.open_input_stream(f"{s3root}/{seg.key}").read()
        with fs.open_input_file(f"{s3root}/{seg.key}") as f:  # what the server reports
            assert f.metadata()["ETag"].decode().strip('"') == seg.etag
        assert pq.read_table(pa.BufferReader(data)).column("v").to_pylist() == list(
            range(seg.start, seg.end)
        )
    listed = fs.get_file_info(pafs.FileSelector(f"{s3root}/ev/partition=0"))
    assert sorted(i.base_name for i in listed) == sorted(
        s.key.rsplit("/", 1)[1] for s in doc.segments
    )
