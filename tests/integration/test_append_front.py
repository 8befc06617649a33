"""Appends served on a thread per connection, everything else by uvicorn, on one port.

``server/append_front.py``: a real node on loopback, spoken to over raw
sockets where the test needs to control what is on a connection (keep-alive,
pipelining, ``Expect``, a client that goes away mid-body). What a user relies
on: every append gets the same answer it got through the event loop, every
other request on the same connection still works, in order, and nothing half
received is stored.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import pyarrow as pa
import pytest

from plateau.protocol import ARROW_FILE, ARROW_STREAM, MAX_REQUEST_SIZE_HEADER
from testkit import rawhttp
from testkit.arrowhttp import ipc_file, ipc_stream
from testkit.nodeproc import NodeProcess, metric_values
from testkit.rawhttp import head, response

TOKEN = "front-token"
ON = {"PLATEAU_SERVER__THREADED_APPENDS": "true"}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def table(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {"time": pa.array(range(start, start + n), pa.int64()), "v": [f"r{i}" for i in range(n)]}
    )


def append_request(
    topic: str, partition: str, body: bytes, extra: dict[str, str] | None = None
) -> bytes:
    headers = {**AUTH, "Content-Type": ARROW_FILE, **(extra or {})}
    return head("POST", f"/topic/{topic}/partition/{partition}", headers, body) + body


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        tmp_path_factory.mktemp("front") / "data",
        token=TOKEN,
        env={**ON, "PLATEAU_SERVER__MAX_REQUEST_BYTES": str(4 << 20)},
    ).start()
    yield proc
    proc.stop()


def connect(node: NodeProcess) -> tuple[socket.socket, IO[bytes]]:
    return rawhttp.connect(node.port)


def span(node: NodeProcess, topic: str, partition: str) -> dict[str, int] | None:
    r = httpx.get(f"{node.url}/topic/{topic}")
    if r.status_code == 404:  # no such topic: nothing was ever stored in it
        return None
    return r.json()["partitions"].get(partition)  # type: ignore[no-any-return]


def metric(node: NodeProcess, name: str) -> float:
    for line in httpx.get(f"{node.url}/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_appends_and_reads_share_a_keep_alive_connection_in_order(node: NodeProcess) -> None:
    sock, f = connect(node)
    with sock:
        sock.sendall(append_request("mixed", "p", ipc_file(table(3))))
        status, _, body = response(f)
        assert status == 200 and json.loads(body) == {"span": {"start": 0, "end": 3}}
        # served here, on a thread: the connection is counted while it is open
        assert metric(node, "plateau_append_connections") == 1
        sock.sendall(head("GET", "/topic/mixed", {}))  # not an append: uvicorn serves it
        status, _, body = response(f)
        assert status == 200 and json.loads(body)["partitions"]["p"] == {"start": 0, "end": 3}
        sock.sendall(append_request("mixed", "p", ipc_file(table(2, 3))))  # uvicorn's now
        status, _, body = response(f)
        assert status == 200 and json.loads(body) == {"span": {"start": 3, "end": 5}}
    rows = httpx.get(
        f"{node.url}/topic/mixed/partition/p/records",
        params={"start": 0, "limit": 10},
        headers={"accept": "application/json"},
    ).json()
    assert [r["time"] for r in rows] == [0, 1, 2, 3, 4]


def test_pipelined_requests_are_answered_in_order(node: NodeProcess) -> None:
    sock, f = connect(node)
    with sock:
        sock.sendall(
            append_request("pipe", "p", ipc_file(table(1)))
            + append_request("pipe", "p", ipc_stream(table(2)), {"Content-Type": ARROW_STREAM})
            + head("GET", "/topic/pipe", {})
            + append_request("pipe", "p", ipc_file(table(4)))
        )
        replies = [response(f) for _ in range(4)]
    assert [s for s, _, _ in replies] == [200, 200, 200, 200]
    assert json.loads(replies[0][2])["span"] == {"start": 0, "end": 1}
    assert json.loads(replies[1][2])["span"] == {"start": 1, "end": 3}
    assert json.loads(replies[2][2])["partitions"]["p"] == {"start": 0, "end": 3}
    assert json.loads(replies[3][2])["span"] == {"start": 3, "end": 7}


@pytest.mark.parametrize(
    ("headers", "body", "status", "message"),
    [
        ({"Content-Type": ARROW_FILE}, "good", 401, "missing bearer token"),
        ({**AUTH, "Content-Type": "text/csv"}, "good", 415, "Content-Type 'text/csv'"),
        ({**AUTH, "Content-Type": ARROW_FILE}, "junk", 400, "malformed Arrow IPC file body"),
    ],
)
def test_bad_appends_get_the_same_errors_and_store_nothing(
    node: NodeProcess, headers: dict[str, str], body: str, status: int, message: str
) -> None:
    payload = ipc_file(table(2)) if body == "good" else b"not arrow at all"
    before = span(node, "errs", "p")
    sock, f = connect(node)
    with sock:
        sock.sendall(head("POST", "/topic/errs/partition/p", headers, payload) + payload)
        got, reply_headers, reply = response(f)
        assert got == status
        assert reply_headers["content-type"] == "application/json"
        error = json.loads(reply)
        assert error["code"] == status and message in error["message"]
        if status == 401:
            assert reply_headers["www-authenticate"] == "Bearer"
        # the body was read whole: the connection takes the next append
        sock.sendall(append_request("errs2", "p", ipc_file(table(1))))
        assert response(f)[0] == 200
    assert span(node, "errs", "p") == before


def test_bad_names_get_400(node: NodeProcess) -> None:
    sock, f = connect(node)
    with sock:
        sock.sendall(append_request("bad.topic!", "p", ipc_file(table(1))))
        status, _, body = response(f)
    assert status == 400 and "invalid topic name" in json.loads(body)["message"]


def test_too_large_gets_413_before_the_body_and_the_connection_closes(node: NodeProcess) -> None:
    sock, f = connect(node)
    with sock:
        big = 5 << 20
        headers = {**AUTH, "Content-Type": ARROW_FILE, "Content-Length": str(big)}
        sock.sendall(head("POST", "/topic/big/partition/p", headers))  # no body sent
        status, reply_headers, _ = response(f)
        assert status == 413
        assert reply_headers[MAX_REQUEST_SIZE_HEADER.lower()] == str(4 << 20)
        assert reply_headers["connection"] == "close"
        assert f.read() == b""  # closed: the unread body cannot pass for a request
    assert span(node, "big", "p") is None


def test_expect_100_continue(node: NodeProcess) -> None:
    payload = ipc_file(table(5))
    sock, f = connect(node)
    with sock:
        sock.sendall(
            head(
                "POST",
                "/topic/expect/partition/p",
                {**AUTH, "Content-Type": ARROW_FILE, "Expect": "100-continue"},
                payload,
            )
        )
        assert response(f)[0] == 100  # the go-ahead, before any of the body is sent
        sock.sendall(payload)
        status, _, body = response(f)
    assert status == 200 and json.loads(body)["span"] == {"start": 0, "end": 5}


def test_chunked_appends_go_through_the_event_loop(node: NodeProcess) -> None:
    payload = ipc_file(table(3))
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload)
    headers = {**AUTH, "Content-Type": ARROW_FILE, "Transfer-Encoding": "chunked"}
    sock, f = connect(node)
    with sock:
        sock.sendall(head("POST", "/topic/chunked/partition/p", headers, payload) + chunked)
        status, _, body = response(f)
    assert status == 200 and json.loads(body)["span"] == {"start": 0, "end": 3}


def test_a_client_gone_mid_body_stores_nothing(node: NodeProcess) -> None:
    payload = ipc_file(table(2000))
    with socket.create_connection(("127.0.0.1", node.port)) as sock:
        request = append_request("gone", "p", payload)
        sock.sendall(request[: len(request) - 100])
    with httpx.Client(base_url=node.url) as c:  # the node goes on serving
        r = c.post(
            "/topic/gone2/partition/p",
            content=ipc_file(table(1)),
            headers={**AUTH, "content-type": ARROW_FILE},
        )
        assert r.status_code == 200
    deadline = time.monotonic() + 10
    while metric(node, "plateau_append_connections") > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert span(node, "gone", "p") is None


def test_connections_past_the_limit_are_served_by_the_event_loop(tmp_path: Path) -> None:
    env = {**ON, "PLATEAU_SERVER__APPEND_CONNECTIONS": "1"}
    proc = NodeProcess(tmp_path / "data", token=TOKEN, env=env).start()
    try:
        opened = [connect(proc) for _ in range(3)]
        for i, (sock, f) in enumerate(opened):
            sock.sendall(append_request("limit", f"p{i}", ipc_file(table(2))))
            assert response(f)[0] == 200
        assert metric(proc, "plateau_append_connections") == 1
        for sock, _ in opened:
            sock.close()
        assert [span(proc, "limit", f"p{i}") for i in range(3)] == [{"start": 0, "end": 2}] * 3
    finally:
        proc.stop()


@pytest.mark.parametrize(("setting", "threads"), [(None, 1), ("true", 1), ("false", 0)])
def test_on_by_default_and_off_when_turned_off(
    tmp_path: Path, setting: str | None, threads: int
) -> None:
    """Off, every append goes through the event loop: no connection gets a thread."""
    env = {} if setting is None else {"PLATEAU_SERVER__THREADED_APPENDS": setting}
    proc = NodeProcess(tmp_path / "data", token=TOKEN, env=env).start()
    try:
        sock, f = connect(proc)
        with sock:
            sock.sendall(append_request("on", "p", ipc_file(table(2))))
            assert response(f)[0] == 200
            assert metric(proc, "plateau_append_connections") == threads
    finally:
        proc.stop()


def _writer(
    url: str, partition: str, n: int, acked: list[int], errors: list[str], stop: threading.Event
) -> None:
    with httpx.Client(base_url=url, timeout=60) as c:
        for i in range(n):
            if stop.is_set():
                return
            try:
                r = c.post(
                    f"/topic/load/partition/{partition}",
                    content=ipc_file(table(100, i * 100)),
                    headers={**AUTH, "content-type": ARROW_FILE},
                )
                if r.status_code != 200:
                    errors.append(f"{r.status_code} {r.text}")
                    return
                acked.append(r.json()["span"]["end"])
                if i % 5 == 0:  # reads on the same connection now and then
                    got = c.get(  # on this thread (READ_SLOTS)
                        f"/topic/load/partition/{partition}/records",
                        params={"start": i * 100, "page_size": 100},
                        headers={"accept": "application/json"},
                    )
                    if got.status_code != 200 or [r["time"] for r in got.json()] != list(
                        range(i * 100, i * 100 + 100)
                    ):
                        errors.append(f"read {got.status_code} {got.text[:200]}")
                        return
                if i == n - 5:  # near the end, the connection handed to uvicorn
                    got = c.get("/topic/load")
                    if got.status_code != 200:
                        errors.append(f"read {got.status_code} {got.text}")
                        return
            except httpx.HTTPError as exc:  # the node stopping
                errors.append(repr(exc))
                return


def _start_writers(
    url: str, writers: int, appends: int
) -> tuple[dict[str, list[int]], list[str], threading.Event, list[threading.Thread]]:
    """``writers`` threads, each appending to its own partition ``w<i>``, started."""
    acked: dict[str, list[int]] = {f"w{i}": [] for i in range(writers)}
    errors: list[str] = []
    stop = threading.Event()
    threads = [
        threading.Thread(target=_writer, args=(url, p, appends, acked[p], errors, stop))
        for p in acked
    ]
    for t in threads:
        t.start()
    return acked, errors, stop, threads


@pytest.mark.parametrize("slots", [1, 4])
def test_stress_many_writers_and_readers_nothing_lost_no_stall(tmp_path: Path, slots: int) -> None:
    """8 writers x 40 appends with reads between, through one node, ``slots`` appends in the
    engine at once (``server.append_concurrency``); every acknowledged row is read back, and
    it all ends within the time limit (a stalled thread fails the join)."""
    env = {**ON, "PLATEAU_SERVER__APPEND_CONCURRENCY": str(slots)}
    proc = NodeProcess(tmp_path / "data", token=TOKEN, env=env).start()
    try:
        acked, errors, _, threads = _start_writers(proc.url, 8, 40)
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads), "a writer stalled"
        assert errors == []
        for p, ends in acked.items():
            assert ends == [100 * (i + 1) for i in range(40)]
            assert span(proc, "load", p) == {"start": 0, "end": 4000}
        assert metric(proc, "plateau_append_gate_waiting") == 0
        assert metric(proc, "plateau_front_reads_total") == 8 * 8  # every read on a thread
    finally:
        proc.stop()


def test_sigterm_under_load_keeps_every_acknowledged_append(tmp_path: Path) -> None:
    proc = NodeProcess(tmp_path / "data", token=TOKEN, env=ON).start()
    acked, _, stop, threads = _start_writers(proc.url, 4, 10_000)
    time.sleep(1.5)
    proc.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
    assert proc.proc.wait(60) == 0  # type: ignore[union-attr]
    stop.set()
    for t in threads:
        t.join(60)
    assert sum(len(v) for v in acked.values()) > 0
    again = NodeProcess(tmp_path / "data", token=TOKEN, env=ON).start()
    try:
        for p, ends in acked.items():
            if ends:
                got: Any = span(again, "load", p)
                assert got is not None and got["end"] >= ends[-1]
    finally:
        again.stop()


def _stage_counts(node: NodeProcess) -> dict[str, float]:
    counts = metric_values(node.url, "plateau_append_stage_seconds_count")
    return {dict(labels)["stage"]: value for labels, value in counts.items()}


def test_every_stage_of_a_threaded_append_is_timed(
    node: NodeProcess,
) -> None:
    before = _stage_counts(node)
    sock, f = connect(node)
    with sock:
        sock.sendall(append_request("stages", "p", ipc_file(table(2))))
        assert response(f)[0] == 200
    after = _stage_counts(node)
    # queue: the wait for one of server.append_concurrency slots (no hop to another thread)
    for stage in ("body", "queue", "decode", "encode", "write", "durable"):
        assert after.get(stage, 0) >= before.get(stage, 0) + 1, stage


@pytest.mark.parametrize("value", ["0", "many"])
def test_append_concurrency_must_be_a_positive_count(tmp_path: Path, value: str) -> None:
    env = {**ON, "PLATEAU_SERVER__APPEND_CONCURRENCY": value}
    proc = NodeProcess(tmp_path / "data", env=env)
    with pytest.raises(RuntimeError, match="append_concurrency"):
        proc.start(timeout=10)
    assert proc.proc is not None and proc.proc.returncode == 2
