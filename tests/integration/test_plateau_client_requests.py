"""The node driven with the exact requests plateau's own Rust client sends.

Taken from plateau's ``client/src/lib.rs``: URLs joined the way it joins them
(``append_records`` leaves a bare ``?`` and sends its query twice), query
strings as ``serde_qs`` writes them (lists as percent-encoded indexed
brackets, ``None`` left out), the iteration body ``null`` for "from the
start", and the replies read the way it reads them (``/ok`` compared whole,
the iteration-status header parsed as ``{status, next}``). Sent with
``http.client`` so that nothing normalises the request on the way.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from plateau.protocol import ARROW_FILE, ITERATION_STATUS_HEADER, JSON, JSON_RECORDS
from testkit.arrowhttp import ipc_file
from testkit.nodeproc import NodeProcess
from tests.unit.test_focus import inference_logs

STATUSES = {"All", "SchemaChange", "RecordLimited", "ByteLimited"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(Path(tmp_path_factory.mktemp("rust-client")) / "data").start()
    yield proc
    proc.stop()


def send(
    node: NodeProcess,
    method: str,
    target: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=30)
    try:
        conn.request(method, target, body=body, headers=headers or {})
        reply = conn.getresponse()
        return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
    finally:
        conn.close()


def arrow(body: bytes) -> pa.Table:
    return pa.ipc.open_file(pa.py_buffer(body)).read_all()


def test_the_rust_clients_calls(node: NodeProcess) -> None:
    # healthcheck: the body must be exactly this JSON value
    status, _, body = send(node, "GET", "/ok")
    assert status == 200 and json.loads(body) == {"ok": "true"}

    # append_records: "topic/" + "t/" + "partition/" + "0", serde_qs(InsertQuery) set as
    # the query and appended again by .query(): empty, or time twice
    data = ipc_file(inference_logs())
    headers = {"content-type": ARROW_FILE, "content-length": str(len(data))}
    for n, target in enumerate(
        [
            "/topic/rust/partition/0?",
            "/topic/rust/partition/0?time=2024-01-02T03%3A04%3A05Z&time=2024-01-02T03%3A04%3A05Z",
        ]
    ):
        status, _, body = send(node, "POST", target, data, headers)
        assert status == 200, body
        assert json.loads(body) == {"span": {"start": 6 * n, "end": 6 * (n + 1)}}

    # get_topics, get_partitions
    status, _, body = send(node, "GET", "/topics")
    assert status == 200 and {"name": "rust"} in json.loads(body)["topics"]
    status, _, body = send(node, "GET", "/topic/rust")
    reply = json.loads(body)
    assert reply["partitions"] == {"0": {"start": 0, "end": 12}} and reply["bytes"] > 0

    # get_records (Arrow): serde_qs(RecordQuery), None fields left out
    status, headers, body = send(
        node,
        "GET",
        "/topic/rust/partition/0/records?start=0&page_size=1000",
        headers={"accept": ARROW_FILE},
    )
    assert status == 200 and headers["content-type"] == ARROW_FILE
    assert arrow(body).num_rows == 12
    focused = (
        "/topic/rust/partition/0/records?start=2&page_size=3"
        "&dataset%5B0%5D=inputs&dataset%5B1%5D=outputs"
        "&dataset.exclude%5B0%5D=outputs.classes&dataset.separator=."
    )
    status, headers, body = send(node, "GET", focused, headers={"accept": ARROW_FILE})
    assert status == 200, body
    table = arrow(body)
    assert table.column_names == ["inputs.tensor", "inputs.label", "outputs.score"]
    assert table.column("inputs.label").to_pylist() == ["img-2", "img-3", "img-4"]

    # get_records (JSON): plateau's bare array
    status, headers, body = send(
        node,
        "GET",
        "/topic/rust/partition/0/records?start=10&dataset%5B0%5D=time",
        headers={"accept": JSON},
    )
    assert headers["content-type"] == JSON_RECORDS
    assert json.loads(body) == [{"time": 1004}, {"time": 1005}]


def iterate(node: NodeProcess, query: str, position: Any) -> tuple[pa.Table, dict[str, Any]]:
    """Iterate<ArrowIterationReply>::iterate_path: the position as the JSON body."""
    status, headers, body = send(
        node,
        "POST",
        f"/topic/rust-it/records?{query}",
        json.dumps(position).encode(),
        {"content-type": JSON, "accept": ARROW_FILE},
    )
    assert status == 200, body
    reply: dict[str, Any] = json.loads(headers[ITERATION_STATUS_HEADER])  # TopicIterationStatus
    assert set(reply) == {"status", "next"} and reply["status"] in STATUSES
    assert all(isinstance(v, int) for v in reply["next"].values())
    return arrow(body), reply


def test_the_rust_clients_topic_iteration(node: NodeProcess) -> None:
    data = ipc_file(inference_logs())
    for partition in ("a", "b", "c"):
        target = f"/topic/rust-it/partition/{partition}?"
        assert send(node, "POST", target, data, {"content-type": ARROW_FILE})[0] == 200

    # serde_qs(TopicIterationQuery): order lowercase, partition_filter indexed; body null
    query = "page_size=4&order=asc&partition_filter%5B0%5D=a&partition_filter%5B1%5D=c"
    table, status = iterate(node, query, None)
    rows, position = table.num_rows, status["next"]
    while status["status"] != "All":
        table, status = iterate(node, query, position)
        rows, position = rows + table.num_rows, status["next"]
    assert rows == 12 and {k for k, v in position.items() if v} == {"a", "c"}
    # created by its first append, the topic has the partitions appends named, no more
    assert set(position) <= {"a", "b", "c"}
    _, _, body = send(node, "GET", "/topic/rust-it")
    assert set(json.loads(body)["partitions"]) == {"a", "b", "c"}

    # page_bytes: a smaller page than page_size allows, then the rest
    table, status = iterate(node, "page_size=100&page_bytes=1", None)
    assert 0 < table.num_rows < 18 and status["status"] == "ByteLimited"

    # a focused iteration, serde_qs style
    table, status = iterate(node, "page_size=100&dataset%5B0%5D=time", {})
    assert table.column_names == ["time"] and table.num_rows == 18
    assert status["status"] == "All"
