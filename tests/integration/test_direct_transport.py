"""``DirectTransport`` (Spark's url mode reads through it) against a real node on loopback.

``PlateauClient`` on this transport sends without ``httpx.Client`` (its own
query encoding, headers and JSON bodies), so what is checked here is that it
gets the same replies and the same failures as on ``httpx``'s own transport:
pages (with time bounds and a data focus in the query), errors by status,
POST and PUT bodies, a node that cannot be reached or does not answer, a
kept connection the node closed, and threads sharing one client.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pyarrow as pa
import pytest

from plateau.client import (
    AuthError,
    BadRequestError,
    ConnectionFailed,
    NotFoundError,
    PlateauClient,
    RetryPolicy,
)
from plateau.client.direct import DirectTransport
from plateau.protocol.focus import DataFocus
from testkit.nodeproc import NodeProcess

ROWS = 5_000
KEEP_ALIVE_S = 5.0  # uvicorn's default: the node closes a connection idle this long
T0_MS = 1_700_000_000_000


def table(first: int, rows: int) -> pa.Table:
    return pa.table({"seq": pa.array(range(first, first + rows), pa.int64()),
                     "time": pa.array(range(T0_MS + first, T0_MS + first + rows), pa.int64()),
                     "blob": [b"x" * (i % 300) for i in range(rows)]})  # fmt: skip


@pytest.fixture
def direct(node: NodeProcess) -> Iterator[PlateauClient]:
    with PlateauClient(node.url, token=node.token, transport=DirectTransport()) as client:
        yield client


def test_same_pages_and_errors_as_httpx(node: NodeProcess, direct: PlateauClient) -> None:
    for first in range(0, ROWS, 1_000):  # appends: POST bodies through the transport
        direct.append("t", "0", table(first, 1_000))
    with PlateauClient(node.url, token=node.token) as plain:
        for start, size in ((0, 10_000), (123, 1_000), (4_990, 100), (ROWS, 10)):
            a, b = direct.read("t", "0", start, size), plain.read("t", "0", start, size)
            assert (a.span, a.status) == (b.span, b.status)
            assert a.table.equals(b.table)
        assert direct.read("t", "0", 0, ROWS).table.column("seq").to_pylist() == list(range(ROWS))
        # query values that need escaping: an RFC3339 offset ('+', ':') and a focus list
        window = ("2023-11-14T22:13:21.000+00:00", T0_MS + 1_500)  # T0 +1 s to +1.5 s, inclusive
        focus = DataFocus(dataset=("seq", "time"))
        a = direct.read("t", "0", 0, 1_000, window[0], window[1], focus)
        b = plain.read("t", "0", 0, 1_000, window[0], window[1], focus)
        assert a.table.column_names == ["seq", "time"]
        assert a.table.column("seq").to_pylist() == list(range(1_000, 1_501))
        assert (a.span, a.status) == (b.span, b.status) and a.table.equals(b.table)
        assert direct.topic("t") == plain.topic("t")
        direct.put_topic("made", partitions=2)  # a JSON body
        assert plain.get_topic("made") == direct.get_topic("made")
        assert sorted(direct.topic("made").partitions) == ["0", "1"]
    with pytest.raises(NotFoundError):
        direct.read("missing", "0", 0, 10)
    with pytest.raises(BadRequestError):
        direct.read("t", "0", -1, 10)
    with (
        PlateauClient(node.url, transport=DirectTransport()) as anonymous,
        pytest.raises(AuthError),
    ):
        anonymous.append("t", "0", table(0, 1))
    assert direct.topic("t").partitions["0"].end == ROWS  # the refused append wrote nothing


def test_kept_connection_closed_by_the_node_is_replaced(node: NodeProcess) -> None:
    """Straight on httpx (no client retries above): the transport alone must cope."""
    with httpx.Client(base_url=node.url, transport=DirectTransport()) as c:
        assert c.get("/topics").status_code == 200
        time.sleep(KEEP_ALIVE_S + 1.0)  # the node closes the idle connection
        assert c.get("/topics").status_code == 200
        time.sleep(KEEP_ALIVE_S + 1.0)
        r = c.post("/topic/k/partition/0", json=[{"a": 1}],
                   headers={"authorization": f"Bearer {node.token}"})  # fmt: skip
        assert r.status_code == 200, r.text  # a POST is never resent: it went out once


def test_unreachable_and_silent_nodes_fail_as_connection_errors() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connection refused
        with (
            PlateauClient(
                f"http://127.0.0.1:{port}",
                transport=DirectTransport(),
                retry=RetryPolicy(connection_attempts=1),
            ) as client,  # fmt: skip
            pytest.raises(ConnectionFailed, match="cannot reach the node"),
        ):
            client.topics()
    with socket.socket() as silent:  # accepts (the backlog does), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with (
            PlateauClient(
                url,
                timeout=0.5,
                transport=DirectTransport(),
                retry=RetryPolicy(connection_attempts=1),
            ) as client,  # fmt: skip
            pytest.raises(ConnectionFailed, match="no reply"),
        ):
            client.topics()
        assert time.monotonic() - started < 5


def test_threads_sharing_one_client_read_their_own_pages(direct: PlateauClient) -> None:
    direct.append("s", "0", table(0, ROWS))
    errors: list[BaseException] = []

    def reader(seed: int) -> None:
        try:
            for i in range(40):
                start = (seed * 97 + i * 131) % ROWS
                page = direct.read("s", "0", start, 200)
                seq = page.table.column("seq").to_pylist()
                assert seq == list(range(start, min(start + 200, ROWS))), (seed, i)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(n,), daemon=True) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not [t for t in threads if t.is_alive()], "a reader stalled"
    assert not errors, errors[0]
