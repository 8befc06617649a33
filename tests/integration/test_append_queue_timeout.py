"""A saturated node refuses the appends that waited too long for their turn, and stores none.

``server.append_queue_timeout_ms`` bounds how long an append whose body has arrived
waits for one of the ``server.append_concurrency`` slots. A real node on loopback,
one slot, a timeout far below one append's service time, and more writers than the
slot serves: some appends get 429 with ``Retry-After`` and a message that names the
setting, the others are acknowledged, and each partition holds exactly the rows
acknowledged, in the order acknowledged (a refused append leaves nothing behind).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pyarrow as pa

from plateau.protocol import ARROW_FILE
from testkit.arrowhttp import ipc_file
from testkit.nodeproc import NodeProcess, metric_values

WRITERS = 8
APPENDS = 15
ROWS = 20_000


def body(writer: int) -> bytes:
    return ipc_file(
        pa.table(
            {
                "time": pa.array(range(ROWS), pa.int64()),
                "w": pa.array([writer] * ROWS, pa.int64()),
                "s": pa.array([f"value {i} of writer {writer}" for i in range(ROWS)]),
            }
        )
    )


def post(c: httpx.Client, w: int, data: bytes) -> httpx.Response:
    return c.post(f"/topic/q/partition/{w}", content=data, headers={"content-type": ARROW_FILE})


def run_writers(writer: Callable[[int], None]) -> None:
    """``writer(w)`` for each of ``WRITERS`` on threads at once; fails on a stalled one."""
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a writer stalled"


def rejected_busy(node: NodeProcess) -> float:
    counts = metric_values(node.url, "plateau_rejected_appends_total")
    return sum(v for labels, v in counts.items() if dict(labels).get("reason") == "busy")


def test_appends_past_the_queue_timeout_get_429_and_leave_nothing(tmp_path: Path) -> None:
    env = {
        "PLATEAU_SERVER__THREADED_APPENDS": "true",
        "PLATEAU_SERVER__APPEND_CONCURRENCY": "1",
        "PLATEAU_SERVER__APPEND_QUEUE_TIMEOUT_MS": "1",
    }
    node = NodeProcess(tmp_path / "data", env=env).start()
    acked: dict[int, list[tuple[int, int]]] = {w: [] for w in range(WRITERS)}
    refusals: list[httpx.Response] = []
    errors: list[str] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        data = body(w)
        with httpx.Client(base_url=node.url, timeout=60) as c:
            for _ in range(APPENDS):
                r = post(c, w, data)
                with lock:
                    if r.status_code == 200:
                        s = r.json()["span"]
                        acked[w].append((s["start"], s["end"]))
                    elif r.status_code == 429:
                        refusals.append(r)
                    else:
                        errors.append(f"{r.status_code} {r.text[:200]}")

    try:
        run_writers(writer)
        assert errors == []
        assert refusals, "no append waited past 1 ms for the one slot: nothing was tested"
        assert sum(len(v) for v in acked.values()) > 0
        for r in refusals:
            assert r.headers["retry-after"] == "1"
            assert "append_queue_timeout_ms" in r.json()["message"]
        assert rejected_busy(node) >= len(refusals)
        topic = httpx.get(f"{node.url}/topic/q").json()["partitions"]
        for w, spans in acked.items():
            # acknowledged spans follow each other, and the partition holds only them
            assert [s[0] for s in spans] == [ROWS * i for i in range(len(spans))]
            got = topic.get(str(w), {"start": 0, "end": 0})
            assert (got["start"], got["end"]) == (0, ROWS * len(spans))
        assert metric_values(node.url, "plateau_append_gate_waiting") == {(): 0.0}
    finally:
        node.stop()


def test_without_a_timeout_every_append_waits_its_turn(tmp_path: Path) -> None:
    """The default (0): the same load, one slot, and nothing refused."""
    env = {"PLATEAU_SERVER__THREADED_APPENDS": "true", "PLATEAU_SERVER__APPEND_CONCURRENCY": "1"}
    node = NodeProcess(tmp_path / "data", env=env).start()
    statuses: list[int] = []

    def writer(w: int) -> None:
        data = body(w)
        with httpx.Client(base_url=node.url, timeout=60) as c:
            for _ in range(5):
                r = post(c, w, data)
                statuses.append(r.status_code)

    try:
        run_writers(writer)
        assert statuses == [200] * (WRITERS * 5)
    finally:
        node.stop()


def test_a_negative_queue_timeout_is_refused_at_start(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data", env={"PLATEAU_SERVER__APPEND_QUEUE_TIMEOUT_MS": "-1"})
    try:
        node.start(timeout=10)
    except RuntimeError as exc:
        assert "append_queue_timeout_ms" in str(exc)
    else:
        node.stop()
        raise AssertionError("the node started with a negative append_queue_timeout_ms")
    assert node.proc is not None and node.proc.returncode == 2
