"""Every bad input gets a clear 4xx in plateau's ``{"message","code"}`` shape and changes nothing.

Each case runs against a node holding known data; afterwards the topic list
and every partition span must be exactly what they were.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pyarrow as pa
import pytest

from plateau.protocol import ARROW_FILE, ARROW_STREAM, JSON, MAX_PAGE_SIZE, MAX_REQUEST_SIZE_HEADER
from testkit.arrowhttp import ipc_file, ipc_stream
from testkit.nodeproc import NodeProcess

TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


GOOD = pa.table({"time": pa.array([1, 2], pa.int64()), "v": ["a", "b"]})


def state_of(url: str) -> dict[str, Any]:
    """Everything a bad request must leave untouched: topics, spans, sizes, configs."""
    topics = httpx.get(f"{url}/topics").json()["topics"]
    out: dict[str, Any] = {}
    for name in sorted(t["name"] for t in topics):
        out[name] = {
            "spans": httpx.get(f"{url}/topic/{name}").json(),
            "config": httpx.get(f"{url}/admin/topics/{name}", headers=AUTH).json(),
        }
    return out


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(tmp_path_factory.mktemp("bad") / "data", token=TOKEN).start()
    with proc.client() as c:
        for partition in ("0", "1"):
            r = c.post(
                f"/topic/known/partition/{partition}",
                content=ipc_file(GOOD),
                headers={"content-type": ARROW_FILE},
            )
            assert r.status_code == 200, r.text
    yield proc
    proc.stop()


@pytest.fixture
def unchanged(node: NodeProcess) -> Iterator[None]:
    before = state_of(node.url)
    yield
    assert state_of(node.url) == before


def assert_error(r: httpx.Response | Any, status: int) -> dict[str, Any]:
    code = r.status_code if isinstance(r, httpx.Response) else r.status
    raw = r.content if isinstance(r, httpx.Response) else r.read()
    assert code == status, raw
    body: dict[str, Any] = json.loads(raw)
    # a 409 also names the rule that refused it (and an owner conflict, the owner)
    extra = {"reason", "owner"} if status == 409 else set()
    assert {"message", "code"} <= set(body) <= {"message", "code"} | extra, body
    assert status != 409 or isinstance(body["reason"], str), body
    assert body["code"] == status
    assert isinstance(body["message"], str) and body["message"]
    return body


# --- appends ---------------------------------------------------------------------------


@dataclass
class Append:
    name: str
    body: bytes
    content_type: str | None = ARROW_FILE
    status: int = 400
    path: str = "/topic/known/partition/0"
    match: str = ""
    headers: dict[str, str] = field(default_factory=dict)


def _nulls(dtype: pa.DataType) -> bytes:
    return ipc_file(pa.table({"time": pa.array([1], pa.int64()), "bad": pa.nulls(1, dtype)}))


APPENDS = [
    Append("no content type", ipc_file(GOOD), None, 415, match="Content-Type"),
    Append("text/plain", b"hello", "text/plain", 415),
    Append("octet-stream", ipc_file(GOOD), "application/octet-stream", 415),
    Append("empty arrow file", b"", ARROW_FILE, match="empty"),
    Append("empty arrow stream", b"", ARROW_STREAM, match="empty"),
    Append("empty json", b"", JSON, match="empty"),
    Append("garbage as arrow file", b"this is not arrow", match="Arrow"),
    Append("truncated arrow file", ipc_file(GOOD)[:-16], match="Arrow"),
    Append("stream sent as file", ipc_stream(GOOD), ARROW_FILE, match="Arrow"),
    Append("garbage as arrow stream", b"\x01\x02\x03\x04" * 8, ARROW_STREAM, match="Arrow"),
    Append("truncated arrow stream", ipc_stream(GOOD)[:50], ARROW_STREAM, match="Arrow"),
    Append("zero rows", ipc_file(GOOD.slice(0, 0)), match="zero rows"),
    Append("null column", _nulls(pa.null()), match="null"),
    Append("nested null column", _nulls(pa.list_(pa.null())), match="null"),
    Append("struct null column", _nulls(pa.struct([("x", pa.null())])), match="null"),
    Append(
        "duplicate columns",
        ipc_file(pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])),
        match="duplicate",
    ),
    Append("string time column", ipc_file(pa.table({"time": ["noon"]})), match="time"),
    Append(
        "null time values",
        ipc_file(pa.table({"time": pa.array([1, None], pa.int64())})),
        match="time",
    ),
    Append("malformed json", b"{nope", JSON, match="JSON"),
    Append("json zero records", b'{"records": []}', JSON, match="zero rows"),
    Append("json scalar records", b'{"records": [1]}', JSON),
    Append("json null column", b'[{"a": null}]', JSON, match="null"),
    Append("json mixed types", b'[{"a": 1}, {"a": "x"}]', JSON),
    Append("uppercase topic", ipc_file(GOOD), path="/topic/Known/partition/0", match="name"),
    Append("uppercase partition", ipc_file(GOOD), path="/topic/known/partition/P", match="name"),
    Append("dot-dot encoded", ipc_file(GOOD), path="/topic/%2e%2e/partition/0", match="name"),
    Append("slash encoded", ipc_file(GOOD), path="/topic/a%2Fb/partition/0", match="name"),
    Append("slash in partition", ipc_file(GOOD), path="/topic/known/partition/a/b", match="name"),
    Append("129 chars", ipc_file(GOOD), path=f"/topic/{'a' * 129}/partition/0", match="name"),
    Append("leading dot", ipc_file(GOOD), path="/topic/.hidden/partition/0", match="name"),
    Append("space", ipc_file(GOOD), path="/topic/a%20b/partition/0", match="name"),
    Append("no token", ipc_file(GOOD), status=401, headers={"Authorization": ""}),
    Append("wrong token", ipc_file(GOOD), status=401, headers={"Authorization": "Bearer nope"}),
    Append("basic auth", ipc_file(GOOD), status=401, headers={"Authorization": "Basic eDp5"}),
]


@pytest.mark.parametrize("case", APPENDS, ids=[c.name for c in APPENDS])
def test_bad_append(node: NodeProcess, unchanged: None, case: Append) -> None:
    headers = {**AUTH, **case.headers}
    if case.content_type is not None:
        headers["content-type"] = case.content_type
    headers = {k: v for k, v in headers.items() if v}
    # http.client keeps the path exactly as written (httpx would normalise it).
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
    try:
        conn.request("POST", case.path, body=case.body, headers=headers)
        response = conn.getresponse()
        status = response.status
        www_auth = response.getheader("www-authenticate")
        body = assert_error(response, case.status)
    finally:
        conn.close()
    assert status == case.status
    if case.match:
        assert case.match.lower() in body["message"].lower(), body
    if case.status == 401:
        assert www_auth == "Bearer"


@pytest.mark.parametrize("path", ["/topic/../partition/0", "/topic/known/partition/.."])
def test_raw_dot_dot_path(node: NodeProcess, unchanged: None, path: str) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
    try:
        conn.request(
            "POST", path, body=ipc_file(GOOD), headers={**AUTH, "content-type": ARROW_FILE}
        )
        assert_error(conn.getresponse(), 400)
    finally:
        conn.close()


def test_rejections_are_counted(node: NodeProcess) -> None:
    text = httpx.get(f"{node.url}/metrics").text
    for reason in ("invalid", "unauthorized"):
        assert f'plateau_rejected_appends_total{{reason="{reason}"}}' in text


# --- reads -----------------------------------------------------------------------------

READS = [
    ("missing start", "/topic/known/partition/0/records", {}, 400),
    ("negative start", "/topic/known/partition/0/records", {"start": "-1"}, 400),
    ("text start", "/topic/known/partition/0/records", {"start": "x"}, 400),
    ("page_size 0", "/topic/known/partition/0/records", {"start": "0", "page_size": "0"}, 400),
    (
        "page_size too big",
        "/topic/known/partition/0/records",
        {"start": "0", "page_size": str(MAX_PAGE_SIZE + 1)},
        400,
    ),
    (
        "bad time.start",
        "/topic/known/partition/0/records",
        {"start": "0", "time.start": "yesterday"},
        400,
    ),
    (
        "naive time",
        "/topic/known/partition/0/records",
        {"start": "0", "time.start": "2024-01-02T03:04:05"},
        400,
    ),
    (
        "end before start",
        "/topic/known/partition/0/records",
        {"start": "0", "time.start": "2024-01-02T00:00:00Z", "time.end": "2024-01-01T00:00:00Z"},
        400,
    ),
    ("unknown topic", "/topic/unknown/partition/0/records", {"start": "0"}, 404),
    ("bad topic name", "/topic/BAD/partition/0/records", {"start": "0"}, 400),
    ("bad partition name", "/topic/known/partition/BAD/records", {"start": "0"}, 400),
    ("unknown topic spans", "/topic/unknown", {}, 404),
    ("bad topic spans", "/topic/Bad", {}, 400),
    ("no route", "/nothing/here", {}, 404),
]


@pytest.mark.parametrize(
    ("path", "params", "status"), [r[1:] for r in READS], ids=[r[0] for r in READS]
)
def test_bad_read(
    node: NodeProcess, unchanged: None, path: str, params: dict[str, str], status: int
) -> None:
    body = assert_error(httpx.get(f"{node.url}{path}", params=params), status)
    if status == 400 and "start" in params and len(params) > 1:
        assert any(name in body["message"] for name in params), body


def test_method_not_allowed_is_json(node: NodeProcess, unchanged: None) -> None:
    assert_error(httpx.delete(f"{node.url}/topics"), 405)


ITERATIONS: list[tuple[str, bytes, dict[str, str], int]] = [
    ("cursor array", b"[]", {}, 400),
    ("cursor string", b'"x"', {}, 400),
    ("cursor malformed", b"{", {}, 400),
    ("negative index", b'{"0": -1}', {}, 400),
    ("float index", b'{"0": 1.5}', {}, 400),
    ("string index", b'{"0": "1"}', {}, 400),
    ("bool index", b'{"0": true}', {}, 400),
    ("bad partition in cursor", b'{"../x": 1}', {}, 400),
    ("bad order", b"{}", {"order": "sideways"}, 400),
    ("page_size too big", b"{}", {"page_size": "100000"}, 400),
    ("bad filter name", b"{}", {"partition_filter": "A/B"}, 400),
    ("bad filter regex", b"{}", {"partition_filter[]": "regex:("}, 400),
    ("bad time", b"{}", {"time.end": "soon"}, 400),
]


@pytest.mark.parametrize(
    ("body", "params", "status"), [i[1:] for i in ITERATIONS], ids=[i[0] for i in ITERATIONS]
)
def test_bad_iteration(
    node: NodeProcess, unchanged: None, body: bytes, params: dict[str, str], status: int
) -> None:
    r = httpx.post(f"{node.url}/topic/known/records", params=params, content=body)
    assert_error(r, status)


def test_iterating_unknown_topic_is_404(node: NodeProcess, unchanged: None) -> None:
    assert_error(httpx.post(f"{node.url}/topic/unknown/records", content=b"{}"), 404)


# --- admin -----------------------------------------------------------------------------

ADMIN_BODIES = [
    ("malformed", b'{"partitions": ', "malformed JSON"),
    ("not an object", b"[1, 2]", ""),
    ("unknown field", b'{"partitons": 2}', "partitons"),
    ("unknown nested field", b'{"retention": {"max_byte": 1}}', "max_byte"),
    ("negative budget", b'{"retention": {"max_bytes": -1}}', "max_bytes"),
    ("zero partitions", b'{"partitions": 0}', "partitions"),
    ("wrong type", b'{"partitions": "many"}', "partitions"),
    ("bad format", b'{"segment": {"format": "csv"}}', "format"),
]


@pytest.mark.parametrize(
    ("body", "match"), [a[1:] for a in ADMIN_BODIES], ids=[a[0] for a in ADMIN_BODIES]
)
def test_bad_admin_put(node: NodeProcess, unchanged: None, body: bytes, match: str) -> None:
    r = httpx.put(
        f"{node.url}/admin/topics/known",
        content=body,
        headers={**AUTH, "content-type": JSON},
    )
    message = assert_error(r, 400)["message"]
    assert match in message


ADMIN_CALLS: list[tuple[str, Callable[[str, dict[str, str]], httpx.Response]]] = [
    ("put", lambda url, h: httpx.put(f"{url}/admin/topics/known", json={}, headers=h)),
    (
        "put malformed",
        lambda url, h: httpx.put(f"{url}/admin/topics/known", content=b"{", headers=h),
    ),
    ("get", lambda url, h: httpx.get(f"{url}/admin/topics/known", headers=h)),
    ("delete", lambda url, h: httpx.delete(f"{url}/admin/topics/known", headers=h)),
    ("node", lambda url, h: httpx.get(f"{url}/admin/node", headers=h)),
]


@pytest.mark.parametrize("call", [c[1] for c in ADMIN_CALLS], ids=[c[0] for c in ADMIN_CALLS])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}], ids=["none", "wrong"])
def test_admin_needs_the_token(
    node: NodeProcess,
    unchanged: None,
    call: Callable[[str, dict[str, str]], httpx.Response],
    headers: dict[str, str],
) -> None:
    r = call(node.url, headers)
    assert_error(r, 401)
    assert r.headers["www-authenticate"] == "Bearer"


def test_admin_unknown_topic(node: NodeProcess, unchanged: None) -> None:
    assert_error(httpx.get(f"{node.url}/admin/topics/unknown", headers=AUTH), 404)
    assert_error(httpx.delete(f"{node.url}/admin/topics/unknown", headers=AUTH), 404)
    assert_error(httpx.get(f"{node.url}/admin/topics/Bad", headers=AUTH), 400)
    assert_error(httpx.put(f"{node.url}/admin/topics/a%2Fb", headers=AUTH), 400)


# --- size limit ------------------------------------------------------------------------

LIMIT = 4096


@pytest.fixture(scope="module")
def small_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    env = {"PLATEAU_SERVER__MAX_REQUEST_BYTES": str(LIMIT)}
    proc = NodeProcess(tmp_path_factory.mktemp("small") / "data", env=env).start()
    with proc.client() as c:
        r = c.post("/topic/known/partition/0", json=[{"v": 1}])
        assert r.status_code == 200, r.text
    yield proc
    proc.stop()


def _big_table() -> bytes:
    body = ipc_file(pa.table({"v": ["x" * 100] * 100}))
    assert len(body) > LIMIT
    return body


def test_oversize_body_with_content_length(small_node: NodeProcess) -> None:
    before = state_of(small_node.url)
    r = httpx.post(
        f"{small_node.url}/topic/known/partition/0",
        content=_big_table(),
        headers={"content-type": ARROW_FILE},
    )
    assert_error(r, 413)
    assert r.headers[MAX_REQUEST_SIZE_HEADER] == str(LIMIT)
    assert state_of(small_node.url) == before
    text = httpx.get(f"{small_node.url}/metrics").text
    assert 'plateau_rejected_appends_total{reason="too_large"}' in text


def test_oversize_chunked_body(small_node: NodeProcess) -> None:
    before = state_of(small_node.url)
    body = _big_table()

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(body), 1000):
            yield body[i : i + 1000]

    r = httpx.post(
        f"{small_node.url}/topic/known/partition/0",
        content=chunks(),
        headers={"content-type": ARROW_FILE},
    )
    assert "content-length" not in r.request.headers
    assert_error(r, 413)
    assert r.headers[MAX_REQUEST_SIZE_HEADER] == str(LIMIT)
    assert state_of(small_node.url) == before


def test_lying_content_length_header_is_refused(small_node: NodeProcess) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", small_node.port, timeout=30)
    try:
        conn.putrequest("POST", "/topic/known/partition/0")
        conn.putheader("content-type", ARROW_FILE)
        conn.putheader("content-length", str(10 * LIMIT))
        conn.endheaders()  # no body sent: the node must answer from the header alone
        response = conn.getresponse()
        assert response.getheader(MAX_REQUEST_SIZE_HEADER) == str(LIMIT)
        assert_error(response, 413)
    finally:
        conn.close()


def test_body_under_the_limit_is_fine(small_node: NodeProcess) -> None:
    body = ipc_file(pa.table({"v": ["x" * 10] * 10}))
    assert len(body) <= LIMIT
    r = httpx.post(
        f"{small_node.url}/topic/known/partition/0",
        content=body,
        headers={"content-type": ARROW_FILE},
    )
    assert r.status_code == 200, r.text


# --- budgets ---------------------------------------------------------------------------


def test_budget_that_does_not_fit_is_409_and_changes_nothing(tmp_path: Any) -> None:
    proc = NodeProcess(tmp_path / "data", token=TOKEN, args=["--capacity-bytes", "1000000000"])
    proc.start()
    try:
        url = f"{proc.url}/admin/topics/budgeted"
        r = httpx.put(url, json={"retention": {"max_bytes": 100_000_000}}, headers=AUTH)
        assert r.status_code == 201, r.text
        before = state_of(proc.url)
        r = httpx.put(url, json={"retention": {"max_bytes": 10_000_000_000}}, headers=AUTH)
        body = assert_error(r, 409)
        assert "budget" in body["message"].lower() or "capacity" in body["message"].lower()
        assert body["reason"] == "OverBudget"
        r = httpx.put(
            f"{proc.url}/admin/topics/other",
            json={"retention": {"max_bytes": 10_000_000_000}},
            headers=AUTH,
        )
        assert_error(r, 409)
        assert state_of(proc.url) == before
    finally:
        proc.stop()
