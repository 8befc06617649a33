"""Partition reads served on a connection's own thread answer exactly as through uvicorn.

``server/append_front.py`` serves ``GET /topic/{t}/partition/{p}/records`` on
the connection's thread (the same ``data_plane.read_partition_now`` as the
event loop's route). A user relies on getting the same reply either way: the
same status, body and headers for good reads and for every kind of bad one.
Each request here goes once over a fresh connection (served on its thread)
and once over a connection handed to uvicorn first (a ``GET /healthz`` hands
it over for good), and the two replies are compared.
"""

from __future__ import annotations

import email.utils
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import httpx
import pyarrow as pa
import pytest

from plateau.protocol import (
    ARROW_FILE,
    ARROW_STREAM,
    ITERATION_STATUS_HEADER,
    JSON,
    SPAN_END_HEADER,
    SPAN_START_HEADER,
)
from testkit.arrowhttp import ipc_file
from testkit.nodeproc import NodeProcess, metric_values
from testkit.rawhttp import connect, head, response

TOKEN = "reads-token"
READ_TOKEN = "reader"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
READ = {"Authorization": f"Bearer {READ_TOKEN}"}
COMPARED = ("content-type", ITERATION_STATUS_HEADER, SPAN_START_HEADER, SPAN_END_HEADER)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    env = {"PLATEAU_AUTH__READ_TOKEN": READ_TOKEN}
    proc = NodeProcess(tmp_path_factory.mktemp("reads") / "data", token=TOKEN, env=env).start()
    table = pa.table({"time": pa.array(range(500), pa.int64()), "v": [f"r{i}" for i in range(500)]})
    r = httpx.post(
        f"{proc.url}/topic/t/partition/p",
        content=ipc_file(table),
        headers={**AUTH, "content-type": ARROW_FILE},
    )
    assert r.status_code == 200, r.text
    yield proc
    proc.stop()


def _on_the_loop(node: NodeProcess) -> tuple[socket.socket, IO[bytes]]:
    sock, f = connect(node.port)
    sock.sendall(head("GET", "/healthz", {}))
    assert response(f)[0] == 200  # this connection is uvicorn's from now on
    return sock, f


def _reads_served_on_threads(node: NodeProcess) -> float:
    counts = metric_values(node.url, "plateau_front_reads_total")
    return sum(counts.values())


Reply = tuple[int, dict[str, str], bytes]


def _both(node: NodeProcess, path: str, headers: dict[str, str]) -> list[Reply]:
    replies = []
    for opened in (connect(node.port), _on_the_loop(node)):
        sock, f = opened
        with sock:
            sock.sendall(head("GET", path, headers))
            replies.append(response(f))
    return replies


@pytest.mark.parametrize(
    ("path", "headers", "status"),
    [
        ("/topic/t/partition/p/records?start=0&page_size=100", {"Accept": ARROW_FILE}, 200),
        ("/topic/t/partition/p/records?start=450&page_size=100", {"Accept": ARROW_STREAM}, 200),
        ("/topic/t/partition/p/records?start=10&page_size=3", {"Accept": JSON}, 200),
        ("/topic/t/partition/p/records?start=0&time.start=100&time.end=120", {}, 200),
        ("/topic/t/partition/p/records?start=0&dataset=v", {"Accept": ARROW_FILE}, 200),
        ("/topic/t/partition/p/records?start=0&dataset.bogus=1", {}, 400),
        ("/topic/t/partition/p/records?start=600", {}, 200),  # past the end: no rows
        ("/topic/t/partition/p/records?start=-1", {}, 400),
        ("/topic/t/partition/p/records?start=0&page_size=0", {}, 400),
        ("/topic/t/partition/p/records?start=0", {"Accept": "text/csv"}, 406),
        ("/topic/nope/partition/p/records?start=0", {}, 404),
        ("/topic/bad.name!/partition/p/records?start=0", {}, 400),
    ],
)
def test_a_read_gets_the_same_reply_on_its_thread_as_through_uvicorn(
    node: NodeProcess, path: str, headers: dict[str, str], status: int
) -> None:
    before = _reads_served_on_threads(node)
    (front_status, front_headers, front_body), (loop_status, loop_headers, loop_body) = _both(
        node, path, {**READ, **headers}
    )
    assert _reads_served_on_threads(node) == before + 1  # the fresh connection's read only
    assert front_status == loop_status == status, (front_body, loop_body)
    assert front_body == loop_body
    for name in COMPARED:
        assert front_headers.get(name) == loop_headers.get(name), name
    assert email.utils.parsedate_to_datetime(front_headers["date"])  # as uvicorn sends one


def test_the_read_token_is_checked_on_the_thread(node: NodeProcess) -> None:
    path = "/topic/t/partition/p/records?start=0"
    for headers, status in (({}, 401), ({"Authorization": "Bearer wrong"}, 401)):
        (front, front_headers, body), (loop, _, loop_body) = _both(node, path, headers)
        assert front == loop == status
        assert front_headers["www-authenticate"] == "Bearer"
        assert json.loads(body) == json.loads(loop_body)


def test_reads_and_appends_share_a_connection_in_order(node: NodeProcess) -> None:
    sock, f = connect(node.port)
    read = head("GET", "/topic/t/partition/q/records?start=0", {**READ, "Accept": JSON})
    with sock:
        for i in range(3):
            body = ipc_file(pa.table({"time": pa.array([i], pa.int64()), "v": [f"q{i}"]}))
            sock.sendall(
                head("POST", "/topic/t/partition/q", {**AUTH, "Content-Type": ARROW_FILE}, body)
                + body
                + read
            )
            assert response(f)[0] == 200
            status, _, rows = response(f)
            assert status == 200 and [r["v"] for r in json.loads(rows)] == [
                f"q{j}" for j in range(i + 1)
            ]


def test_connection_close_is_honoured(node: NodeProcess) -> None:
    sock, f = connect(node.port)
    with sock:
        sock.sendall(
            head("GET", "/topic/t/partition/p/records?start=0", {**READ, "Connection": "close"})
        )
        status, headers, _ = response(f)
        assert status == 200 and headers["connection"] == "close"
        assert f.read() == b""  # the node closed its side


def test_turned_off_reads_go_through_uvicorn(tmp_path: Path) -> None:
    env = {"PLATEAU_SERVER__THREADED_APPENDS": "false"}
    proc = NodeProcess(tmp_path / "data", env=env).start()
    try:
        r = httpx.get(f"{proc.url}/topic/t/partition/p/records", params={"start": 0})
        assert r.status_code == 404
        assert _reads_served_on_threads(proc) == 0
    finally:
        proc.stop()


def test_a_reader_that_pauses_mid_reply_gets_the_whole_page(tmp_path: Path) -> None:
    """A reader that stops taking bytes for longer than the keep-alive timeout (uvicorn's
    5 s) still gets its page: a reply's timeout bounds a stall of 30 s, and neither the
    keep-alive timeout nor a fixed total applies to it."""
    proc = NodeProcess(tmp_path / "data").start()
    try:
        rows = 10_000  # a full page of about 6 MB: more than the socket buffers hold
        table = pa.table({"time": pa.array(range(rows), pa.int64()), "v": [b"x" * 600] * rows})
        r = httpx.post(
            f"{proc.url}/topic/big/partition/p",
            content=ipc_file(table),
            headers={"content-type": ARROW_FILE},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        sock = socket.create_connection(("127.0.0.1", proc.port), timeout=60)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        with sock:
            path = f"/topic/big/partition/p/records?start=0&page_size={rows}"
            sock.sendall(head("GET", path, {"Accept": ARROW_FILE, "Connection": "close"}))
            got = [sock.recv(64 * 1024)]
            assert got[0].startswith(b"HTTP/1.1 200")
            time.sleep(6.5)  # past the keep-alive timeout, with most of the reply unsent
            while chunk := sock.recv(1 << 20):  # the node closes after the reply
                got.append(chunk)
        reply = b"".join(got)
        head_end = reply.index(b"\r\n\r\n") + 4
        page = pa.ipc.open_file(pa.py_buffer(reply[head_end:])).read_all()
        assert page.num_rows == rows
        assert _reads_served_on_threads(proc) == 1
    finally:
        proc.stop()
