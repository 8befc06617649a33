"""The in-flight body budget, against a real node: a burst of writers gets 429, not an OOM.

One append is held half-sent on a raw socket, so the node holds its declared
length in the budget for as long as the test wants (``GET /admin/node`` shows
when it does); no timing is involved.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from plateau.protocol import ARROW_FILE, RETRY_AFTER_HEADER
from testkit.arrowhttp import append, ipc_file
from testkit.nodeproc import NodeProcess, metric_values

BUDGET = 300_000


def body_of(rows: int, tag: int) -> pa.Table:
    return pa.table(
        {"v": pa.array([os.urandom(100) for _ in range(rows)]), "tag": pa.array([tag] * rows)}
    )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        tmp_path / "data", env={"PLATEAU_SERVER__MAX_INFLIGHT_BYTES": str(BUDGET)}
    ).start()
    yield proc
    proc.stop()


class HalfSent:
    """An append whose headers and first half of the body are sent; ``finish`` sends the rest."""

    def __init__(self, node: NodeProcess, topic: str, partition: str, body: bytes) -> None:
        self.sock = socket.create_connection(("127.0.0.1", node.port), timeout=30)
        head = (
            f"POST /topic/{topic}/partition/{partition} HTTP/1.1\r\n"
            f"host: 127.0.0.1\r\ncontent-type: {ARROW_FILE}\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        ).encode()
        half = len(body) // 2
        self.sock.sendall(head + body[:half])
        self.rest = body[half:]

    def finish(self) -> tuple[int, dict[str, object]]:
        self.sock.sendall(self.rest)
        data = b""
        while chunk := self.sock.recv(65536):
            data += chunk
        self.sock.close()
        head, _, payload = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        return status, json.loads(payload)


def test_append_past_the_inflight_budget_is_refused_whole_and_retryable(node: NodeProcess) -> None:
    held_body = ipc_file(body_of(2000, tag=1))  # ~230 KB of the 300 KB budget
    assert BUDGET // 2 < len(held_body) < BUDGET
    with node.client() as c:
        assert append(c, "t", "0", body_of(10, tag=0)).status_code == 200
        held = HalfSent(node, "t", "0", held_body)
        # wait until the node has read the headers and reserved the declared length (shown
        # in its memory budget); appending before that could race the held request for it
        deadline = time.monotonic() + 30
        while c.get("/admin/node").json()["memory"]["parts"]["bodies"]["used"] < len(held_body):
            assert time.monotonic() < deadline, "the node never reserved the held body"
            time.sleep(0.01)
        second = append(c, "t", "0", body_of(1000, tag=2))
        assert second.status_code == 429, second.text
        assert int(second.headers[RETRY_AFTER_HEADER]) >= 1
        message = second.json()["message"]
        assert "max_inflight_bytes" in message and str(BUDGET) in message
        before = c.get("/topic/t").json()["partitions"]["0"]
        rejected = metric_values(node.url, "plateau_rejected_appends_total")
        assert rejected.get((("reason", "busy"),), 0) >= 1

        status, reply = held.finish()
        assert status == 200, reply
        span = reply["span"]
        assert isinstance(span, dict) and span["start"] == before["end"]
        assert span["end"] - span["start"] == 2000

        retried = append(c, "t", "0", body_of(1000, tag=2))
        assert retried.status_code == 200, retried.text
        tags = pa.ipc.open_file(
            c.get(
                "/topic/t/partition/0/records",
                params={"start": 0, "page_size": 10000},
                headers={"accept": ARROW_FILE},
            ).content
        ).read_all()["tag"]
        # the refused append left nothing behind: only acknowledged rows are stored
        stored = tags.to_pylist()
        assert stored[-3000:-1000] == [1] * 2000 and stored[-1000:] == [2] * 1000
        assert len(stored) == retried.json()["span"]["end"]


def test_a_lone_body_larger_than_the_budget_is_taken(node: NodeProcess) -> None:
    big = body_of(5000, tag=3)
    assert len(ipc_file(big)) > BUDGET
    with node.client() as c:
        r = append(c, "t", "0", big)
        assert r.status_code == 200, r.text
        assert r.json()["span"] == {"start": 0, "end": 5000}


def test_inflight_budget_must_be_positive(tmp_path: Path) -> None:
    proc = NodeProcess(tmp_path / "data", env={"PLATEAU_SERVER__MAX_INFLIGHT_BYTES": "0"})
    with pytest.raises(RuntimeError, match="max_inflight_bytes"):
        proc.start(timeout=10)
    assert proc.proc is not None and proc.proc.returncode == 2
