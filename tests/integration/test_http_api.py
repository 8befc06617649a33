"""The node's HTTP API against a real ``plateau node`` process: plateau's routes, admin, ops."""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from plateau.protocol import (
    ARROW_FILE,
    ARROW_STREAM,
    ITERATION_STATUS_HEADER,
    JSON,
    JSON_ENVELOPE,
    JSON_RECORDS,
    SPAN_END_HEADER,
    SPAN_START_HEADER,
)
from testkit.arrowhttp import ipc_file, ipc_stream
from testkit.nodeproc import NodeProcess, metric_values

_names = itertools.count()


def fresh_topic() -> str:
    return f"api-{next(_names)}"


def sample(n: int, start_time: int = 1_700_000_000_000) -> pa.Table:
    return pa.table(
        {
            "time": pa.array(range(start_time, start_time + n), pa.int64()),
            "key": pa.array([f"k{i}".encode() for i in range(n)]),
            "value": pa.array([f"v{i}" for i in range(n)]),
        }
    )


def read_arrow(response: httpx.Response) -> pa.Table:
    assert response.headers["content-type"].startswith(ARROW_FILE)
    return ipc.open_file(pa.py_buffer(response.content)).read_all()


def records(response: httpx.Response) -> list[dict[str, object]]:
    """plateau's JSON reply: a bare array of records (``pandas.read_json`` reads it)."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == JSON_RECORDS
    body = response.json()
    assert isinstance(body, list)
    return body


def status(response: httpx.Response) -> dict[str, object]:
    """The reply's status (and span or next cursor), as plateau sends it: in a header."""
    value: dict[str, object] = json.loads(response.headers[ITERATION_STATUS_HEADER])
    return value


def append(client: httpx.Client, topic: str, partition: str, table: pa.Table) -> dict[str, int]:
    r = client.post(
        f"/topic/{topic}/partition/{partition}",
        content=ipc_file(table),
        headers={"content-type": ARROW_FILE},
    )
    assert r.status_code == 200, r.text
    span: dict[str, int] = r.json()["span"]
    return span


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One node with a write token for the tests that only add their own topics."""
    proc = NodeProcess(tmp_path_factory.mktemp("api") / "data", token="test-token").start()
    yield proc
    proc.stop()


@pytest.fixture
def client(shared: NodeProcess) -> Iterator[httpx.Client]:
    with shared.client() as c:
        yield c


# --- appends and partition reads ---------------------------------------------------


def test_arrow_file_round_trip(client: httpx.Client) -> None:
    topic, table = fresh_topic(), sample(5)
    assert append(client, topic, "0", table) == {"start": 0, "end": 5}
    assert append(client, topic, "0", table) == {"start": 5, "end": 10}

    r = client.get(
        f"/topic/{topic}/partition/0/records",
        params={"start": 0, "page_size": 5},
        headers={"accept": ARROW_FILE},
    )
    assert r.status_code == 200
    got = read_arrow(r)
    assert got.select(table.column_names).equals(table)
    assert json.loads(r.headers[ITERATION_STATUS_HEADER]) == "RecordLimited"  # plateau's form
    assert (r.headers[SPAN_START_HEADER], r.headers[SPAN_END_HEADER]) == ("0", "5")
    assert json.loads(got.schema.metadata[b"span"]) == {"start": 0, "end": 5}
    assert json.loads(got.schema.metadata[b"status"]) == "RecordLimited"


def test_arrow_stream_append_and_stream_reply(client: httpx.Client) -> None:
    topic, table = fresh_topic(), sample(3)
    r = client.post(
        f"/topic/{topic}/partition/p1",
        content=ipc_stream(table),
        headers={"content-type": ARROW_STREAM},
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"span": {"start": 0, "end": 3}}
    r = client.get(
        f"/topic/{topic}/partition/p1/records",
        params={"start": 0},
        headers={"accept": ARROW_STREAM},
    )
    assert r.headers["content-type"].startswith(ARROW_STREAM)
    got = ipc.open_stream(pa.py_buffer(r.content)).read_all()
    assert got.select(table.column_names).equals(table)


def test_json_reads_are_json_safe(client: httpx.Client) -> None:
    topic, table = fresh_topic(), sample(3)
    append(client, topic, "0", table)
    url = f"/topic/{topic}/partition/0/records"
    for accept in (None, "*/*", JSON, JSON_RECORDS):
        r = client.get(url, params={"start": 1}, headers={"accept": accept} if accept else {})
        rows = records(r)
        assert json.loads(r.headers[ITERATION_STATUS_HEADER]) == "All"  # plateau's: the status
        assert (r.headers[SPAN_START_HEADER], r.headers[SPAN_END_HEADER]) == ("1", "3")
        assert [row["value"] for row in rows] == ["v1", "v2"]
        assert rows[0]["key"] == base64.b64encode(b"k1").decode()  # binary: base64
        assert rows[0]["time"] == 1_700_000_000_001

    # the richer object, only when asked for by name
    r = client.get(url, params={"start": 1}, headers={"accept": JSON_ENVELOPE})
    assert r.headers["content-type"] == JSON_ENVELOPE
    body = r.json()
    assert body["span"] == {"start": 1, "end": 3} and body["status"] == "All"
    assert [row["value"] for row in body["records"]] == ["v1", "v2"]

    r = client.get(url, params={"start": 1}, headers={"accept": "text/csv"})
    assert r.status_code == 406 and JSON in r.json()["message"]


def test_json_appends_objects_array_and_legacy_strings(client: httpx.Client) -> None:
    topic = fresh_topic()
    url = f"/topic/{topic}/partition/0"
    r = client.post(url, json={"records": [{"a": 1, "time": 5}, {"a": 2, "b": "x", "time": 6}]})
    assert r.json() == {"span": {"start": 0, "end": 2}}
    r = client.post(url, json=[{"a": 3, "time": 7}])
    assert r.json() == {"span": {"start": 2, "end": 3}}
    rows = records(client.get(f"{url}/records", params={"start": 0}))
    assert [(row["a"], row["time"]) for row in rows] == [(1, 5), (2, 6)]
    assert rows[1]["b"] == "x"

    r = client.post(f"/topic/{topic}/partition/legacy", json={"records": ["hello", "world"]})
    assert r.json() == {"span": {"start": 0, "end": 2}}
    r = client.get(f"/topic/{topic}/partition/legacy/records", params={"start": 0})
    assert [row["message"] for row in records(r)] == ["hello", "world"]


def test_paging_through_a_partition(client: httpx.Client) -> None:
    topic = fresh_topic()
    append(client, topic, "0", sample(10))
    seen: list[str] = []
    start = 0
    while True:
        r = client.get(
            f"/topic/{topic}/partition/0/records", params={"start": start, "page_size": 4}
        )
        rows = records(r)
        if SPAN_END_HEADER not in r.headers:
            assert rows == []
            break
        seen += [str(row["value"]) for row in rows]
        start = int(r.headers[SPAN_END_HEADER])
    assert seen == [f"v{i}" for i in range(10)]


def test_unknown_partition_of_known_topic_reads_empty(client: httpx.Client) -> None:
    topic = fresh_topic()
    append(client, topic, "0", sample(1))
    r = client.get(f"/topic/{topic}/partition/nothing-here/records", params={"start": 0})
    assert records(r) == [] and r.content == b"[]"
    assert json.loads(r.headers[ITERATION_STATUS_HEADER]) == "All"
    assert SPAN_START_HEADER not in r.headers
    r = client.get(
        f"/topic/{topic}/partition/nothing-here/records",
        params={"start": 0},
        headers={"accept": ARROW_FILE},
    )
    assert read_arrow(r).num_rows == 0
    assert SPAN_START_HEADER not in r.headers


def test_time_filter_on_partition_reads(client: httpx.Client) -> None:
    topic = fresh_topic()
    append(client, topic, "0", sample(5, start_time=1000))  # times 1000..1004 ms
    url = f"/topic/{topic}/partition/0/records"
    r = client.get(url, params={"start": 0, "time.start": "1001", "time.end": "1003"})
    assert [row["time"] for row in records(r)] == [1001, 1002, 1003]
    r = client.get(
        url,
        params={
            "start": 0,
            "time.start": "1970-01-01T00:00:01.002Z",
            "time.end": "1970-01-01T01:00:01.003+01:00",
        },
    )
    assert [row["time"] for row in records(r)] == [1002, 1003]
    r = client.get(url, params={"start": 0, "time.start": "2000"})
    assert records(r) == []


# --- topics and iteration ---------------------------------------------------------


def test_topics_and_topic_spans(client: httpx.Client) -> None:
    topic = fresh_topic()
    append(client, topic, "a", sample(2))
    append(client, topic, "b", sample(3))
    names = [t["name"] for t in client.get("/topics").json()["topics"]]
    assert topic in names
    body = client.get(f"/topic/{topic}").json()
    assert body["partitions"]["a"] == {"start": 0, "end": 2}
    assert body["partitions"]["b"] == {"start": 0, "end": 3}
    assert body["bytes"] > 0


def iterate(
    client: httpx.Client,
    topic: str,
    cursor: dict[str, int] | None = None,
    params: Mapping[str, str | int] | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    content = json.dumps(cursor).encode() if cursor is not None else b""
    r = client.post(f"/topic/{topic}/records", params=params, content=content, headers=headers)
    assert r.status_code == 200, r.text
    return r


def test_topic_iteration_with_cursor(client: httpx.Client) -> None:
    topic = fresh_topic()
    append(client, topic, "a", sample(4))
    append(client, topic, "b", sample(6))
    values: list[str] = []
    cursor: dict[str, int] | None = None
    for _ in range(20):
        r = iterate(client, topic, cursor, {"page_size": 3})
        rows, header = records(r), status(r)
        assert set(header) == {"status", "next"}
        values += [str(row["value"]) for row in rows]
        if not rows:
            assert header["status"] == "All"
            break
        cursor = header["next"]  # type: ignore[assignment]
    enveloped = iterate(client, topic, {}, {"page_size": 3}, headers={"accept": JSON_ENVELOPE})
    assert enveloped.headers["content-type"] == JSON_ENVELOPE
    body = enveloped.json()
    assert {"status": body["status"], "next": body["next"]} == status(enveloped)
    assert len(body["records"]) == 3
    assert cursor is not None
    assert {k: v for k, v in cursor.items() if v} == {"a": 4, "b": 6}
    assert sorted(values) == sorted([f"v{i}" for i in range(4)] + [f"v{i}" for i in range(6)])


def test_topic_iteration_arrow_reply(client: httpx.Client) -> None:
    topic = fresh_topic()
    append(client, topic, "a", sample(3))
    r = client.post(f"/topic/{topic}/records", json={}, headers={"accept": ARROW_FILE})
    got = read_arrow(r)
    assert got.num_rows == 3
    status = json.loads(r.headers[ITERATION_STATUS_HEADER])
    assert status["next"]["a"] == 3
    assert json.loads(got.schema.metadata[b"status"]) == status


def test_partition_filter_both_spellings_and_regex(client: httpx.Client) -> None:
    topic = fresh_topic()
    for name, n in (("a", 1), ("b", 2), ("c1", 3)):
        append(client, topic, name, sample(n))
    r = iterate(client, topic, None, {"partition_filter": "b"})
    assert len(records(r)) == 2
    assert {k for k, v in status(r)["next"].items() if v} == {"b"}  # type: ignore[attr-defined]
    r = iterate(client, topic, None, {"partition_filter[]": "regex:c.*"})
    assert len(records(r)) == 3
    r = client.post(
        f"/topic/{topic}/records?partition_filter=a&partition_filter[]=b", content=b"{}"
    )
    assert len(records(r)) == 3


def test_descending_iteration(client: httpx.Client) -> None:
    topic = fresh_topic()
    append(client, topic, "0", sample(5))
    r = iterate(client, topic, None, {"order": "desc", "page_size": 2})
    assert [row["value"] for row in records(r)] == ["v4", "v3"]


def test_iteration_time_filter(client: httpx.Client) -> None:
    topic = fresh_topic()
    append(client, topic, "0", sample(5, start_time=1000))
    r = iterate(client, topic, {}, {"time.start": "1003", "time.end": "1004"})
    assert [row["time"] for row in records(r)] == [1003, 1004]
    empty = iterate(client, topic, {"0": 5})
    assert records(empty) == [] and status(empty) == {"status": "All", "next": {"0": 5}}


# --- admin -------------------------------------------------------------------------


def test_admin_topic_round_trip(client: httpx.Client) -> None:
    topic = fresh_topic()
    desired = {"partitions": 2, "retention": {"max_bytes": 50_000_000, "max_age_seconds": 3600}}
    r = client.put(f"/admin/topics/{topic}", json=desired)
    assert r.status_code == 201, r.text
    config = r.json()
    assert config["partitions"] == 2
    assert config["retention"] == {"max_bytes": 50_000_000, "max_age_seconds": 3600}
    assert config["segment"]["format"] in ("parquet", "arrow")
    assert (config["owner"], config["claim"], config["previous_owner"]) == (None, "created", None)

    again = client.put(f"/admin/topics/{topic}", json=desired)
    assert again.status_code == 200
    assert again.json() == {**config, "claim": "unowned"}  # same config, ownerless topic

    # Partial: only the segment format changes, the budget stays.
    r = client.put(f"/admin/topics/{topic}", json={"segment": {"format": "arrow"}})
    assert r.status_code == 200
    assert r.json()["segment"]["format"] == "arrow"
    assert r.json()["retention"]["max_bytes"] == 50_000_000

    append(client, topic, "0", sample(4))
    status = client.get(f"/admin/topics/{topic}").json()
    assert status["retention"]["max_bytes"] == 50_000_000
    assert status["usage"]["records"] == 4
    part = status["usage"]["partitions"]["0"]
    assert (part["start"], part["end"], part["records"]) == (0, 4, 4)
    assert {"bytes", "segments"} <= part.keys()

    node = client.get("/admin/node").json()
    assert {
        "capacity_bytes",
        "reserve_bytes",
        "allocated_bytes",
        "used_bytes",
        "free_disk_bytes",
        "topics",
    } <= node.keys()
    assert node["allocated_bytes"] >= 50_000_000

    r = client.delete(f"/admin/topics/{topic}")
    assert r.status_code == 204
    assert r.content == b""
    assert client.get(f"/admin/topics/{topic}").status_code == 404
    assert client.get(f"/topic/{topic}").status_code == 404
    assert topic not in [t["name"] for t in client.get("/topics").json()["topics"]]
    r = client.delete(f"/admin/topics/{topic}")
    assert r.status_code == 404
    assert r.json()["code"] == 404


def test_admin_put_with_empty_body_creates_with_defaults(client: httpx.Client) -> None:
    topic = fresh_topic()
    r = client.put(f"/admin/topics/{topic}")
    assert r.status_code == 201, r.text
    assert r.json()["partitions"] >= 1
    assert client.put(f"/admin/topics/{topic}", json={}).status_code == 200


# --- operations --------------------------------------------------------------------


def test_health_routes(shared: NodeProcess) -> None:
    ok = httpx.get(f"{shared.url}/ok")
    assert ok.status_code == 200 and ok.content == b'{"ok":"true"}'  # plateau client: exact
    assert httpx.get(f"{shared.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{shared.url}/readyz").status_code == 200


def test_metrics_expose_the_node_metrics(client: httpx.Client, shared: NodeProcess) -> None:
    append(client, fresh_topic(), "0", sample(2))
    r = httpx.get(f"{shared.url}/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    for name in (
        "plateau_appended_rows_total",
        "plateau_appended_bytes_total",
        "plateau_rejected_appends_total",
        "plateau_seal_seconds",
        "plateau_retention_deleted_segments_total",
        "plateau_topic_bytes",
    ):
        assert f"# TYPE {name}" in r.text, name


def _stage_counts(url: str) -> dict[str, float]:
    counts = metric_values(url, "plateau_append_stage_seconds_count")
    return {dict(labels)["stage"]: value for labels, value in counts.items()}


def test_every_stage_of_an_acknowledged_append_is_timed(
    client: httpx.Client, shared: NodeProcess
) -> None:
    before = _stage_counts(shared.url)
    append(client, fresh_topic(), "0", sample(2))
    after = _stage_counts(shared.url)
    for stage in ("body", "queue", "decode", "encode", "write", "durable"):
        assert after.get(stage, 0) >= before.get(stage, 0) + 1, stage


def test_docs_and_openapi(shared: NodeProcess) -> None:
    r = httpx.get(f"{shared.url}/docs")
    assert r.status_code == 200
    assert "swagger" in r.text.lower()
    spec = httpx.get(f"{shared.url}/openapi.json").json()
    paths = spec["paths"]
    for path in (
        "/topics",
        "/topic/{topic}",
        "/topic/{topic}/partition/{partition}",
        "/topic/{topic}/partition/{partition}/records",
        "/topic/{topic}/records",
        "/admin/topics/{topic}",
        "/admin/node",
    ):
        assert path in paths, path
    assert paths["/admin/topics/{topic}"]["put"]["summary"]
    assert "TopicConfigRequest" in spec["components"]["schemas"]
    assert "RetentionPatch" in spec["components"]["schemas"]


# --- lifecycle ---------------------------------------------------------------------


def test_graceful_stop_and_restart_keeps_data(tmp_path: Path) -> None:
    proc = NodeProcess(tmp_path / "data").start()
    try:
        with proc.client() as c:
            append(c, "kept", "0", sample(7))
        assert proc.stop() == 0
        proc.start()
        with proc.client() as c:
            r = c.get("/topic/kept/partition/0/records", params={"start": 0})
            assert len(records(r)) == 7
            assert append(c, "kept", "0", sample(1)) == {"start": 7, "end": 8}
    finally:
        proc.stop()


def test_ipv6_bind(tmp_path: Path) -> None:
    # NodeProcess passes --bind 127.0.0.1:PORT first; the later --bind wins.
    proc = NodeProcess(tmp_path / "data")
    proc.extra_args = ["--bind", f"[::1]:{proc.port}"]
    proc.url = f"http://[::1]:{proc.port}"
    proc.start()
    try:
        assert httpx.get(f"{proc.url}/healthz").status_code == 200
    finally:
        proc.stop()
