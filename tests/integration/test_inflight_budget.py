"""The in-flight body budget, against a real node: a burst of writers waits, then gets 429,
never an OOM.

One append is held half-sent on a raw socket, so the node holds its declared
length in the budget for as long as the test wants (``GET /admin/node`` shows
when it does, and how many appends wait for room); no timing is involved.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
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


WAIT_S = 0.3  # how long a body that does not fit waits for room (the node's setting)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    yield from _node(tmp_path, WAIT_S)


@pytest.fixture
def patient_node(tmp_path: Path) -> Iterator[NodeProcess]:
    yield from _node(tmp_path, 60)


def _node(tmp_path: Path, wait_s: float) -> Iterator[NodeProcess]:
    env = {
        "PLATEAU_SERVER__MAX_INFLIGHT_BYTES": str(BUDGET),
        "PLATEAU_SERVER__INFLIGHT_WAIT_SECONDS": str(wait_s),
    }
    proc = NodeProcess(tmp_path / "data", env=env).start()
    yield proc
    proc.stop()


def _bodies(c: httpx.Client) -> dict[str, int]:
    part: dict[str, int] = c.get("/admin/node").json()["memory"]["parts"]["bodies"]
    return part


def _wait_for(c: httpx.Client, what: str, done: Callable[[dict[str, int]], bool]) -> None:
    deadline = time.monotonic() + 30
    while not done(_bodies(c)):
        assert time.monotonic() < deadline, f"the node never {what}: {_bodies(c)}"
        time.sleep(0.01)


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
        _wait_for(c, "reserved the held body", lambda b: b["used"] >= len(held_body))
        asked = time.monotonic()
        second = append(c, "t", "0", body_of(1000, tag=2))
        assert second.status_code == 429, second.text
        assert time.monotonic() - asked >= WAIT_S  # it waited for room first
        assert int(second.headers[RETRY_AFTER_HEADER]) >= 1
        message = second.json()["message"]
        assert "max_inflight_bytes" in message and str(BUDGET) in message
        assert _bodies(c)["waiting"] == 0  # and left the line
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


def test_an_append_that_does_not_fit_waits_and_is_stored_when_room_frees(
    patient_node: NodeProcess,
) -> None:
    held_body = ipc_file(body_of(2000, tag=1))
    with patient_node.client() as c:
        held = HalfSent(patient_node, "t", "0", held_body)
        _wait_for(c, "reserved the held body", lambda b: b["used"] >= len(held_body))
        replies: list[httpx.Response] = []
        with patient_node.client() as other:
            waiter = threading.Thread(
                target=lambda: replies.append(append(other, "t", "0", body_of(1000, tag=2)))
            )
            waiter.start()
            try:
                _wait_for(c, "queued the second append", lambda b: b["waiting"] == 1)
                assert not replies  # not refused: waiting, its body unread
                status, reply = held.finish()
            finally:
                waiter.join(timeout=60)
            assert not waiter.is_alive(), "the waiting append never finished"
        assert status == 200, reply
        assert len(replies) == 1 and replies[0].status_code == 200, replies[0].text
        assert replies[0].json()["span"] == {"start": 2000, "end": 3000}
        assert _bodies(c) == {"used": 0, "limit": BUDGET, "waiting": 0}


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
