"""Under a real memory limit the node is never OOM-killed and loses nothing.

The node runs in a memory cgroup this test makes (1.5 GiB, as a pod's limit),
and takes its memory budget from it. 48 writers append 20,000-row bodies to 64
partitions while two readers scan the topic's history. Before the node-wide
memory budget, open segments grew with partitions x segment size and this
node was OOM-killed within 30 s. Checked: no OOM kill, the node alive, the
parts of the budget within their limits whenever sampled, RSS within the
limit, and every acknowledged record readable at its index.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from plateau.protocol import (
    ARROW_FILE,
    ITERATION_STATUS_HEADER,
    MAX_PAGE_SIZE,
    RETRY_AFTER_HEADER,
    SPAN_END_HEADER,
)
from plateau.storage.config import StorageSettings
from testkit.arrowhttp import ipc_file
from testkit.memcg import MemoryCgroup
from testkit.nodeproc import NodeProcess

GiB = 1 << 30
MiB = 1 << 20
LIMIT = 3 * GiB // 2
PARTITIONS = 64
WRITERS = 48
ROWS = 20_000
SECONDS = 20.0
TOPIC = "wide"
IN_CI = __import__("os").environ.get("CI") == "true"


@pytest.fixture
def cgroup() -> Iterator[MemoryCgroup]:
    why = MemoryCgroup.available()
    if why is not None:
        if IN_CI:
            pytest.fail(f"CI=true never skips: {why}")
        pytest.skip(why)
    group = MemoryCgroup(LIMIT)
    yield group
    group.remove()


def body(writer: int, rows: int) -> bytes:
    return ipc_file(
        pa.table(
            {
                "writer": pa.array([writer] * rows, pa.int32()),
                "row": pa.array(range(rows), pa.int32()),
                "payload": pa.array([b"p" * 100] * rows, pa.binary()),
            }
        )
    )


@pytest.mark.slow
def test_many_writers_and_readers_stay_inside_the_memory_limit(
    tmp_path: Path, cgroup: MemoryCgroup
) -> None:
    env = {"PLATEAU_STORAGE__CAPACITY_BYTES": str(1 << 40)}
    node = NodeProcess(tmp_path / "data", env=env, preexec=cgroup.enter).start()
    try:
        _exercise(node, cgroup)
    finally:
        node.stop(timeout=60)


def _exercise(node: NodeProcess, cgroup: MemoryCgroup) -> None:
    assert node.proc is not None
    proc = psutil.Process(node.proc.pid)
    with node.client() as c:
        topic = {"partitions": PARTITIONS, "retention": {"max_bytes": 64 * GiB}}
        assert c.put(f"/admin/topics/{TOPIC}", json=topic).status_code == 201
        memory = c.get("/admin/node").json()["memory"]
    assert memory["source"] == "cgroup"
    assert memory["budget_bytes"] == LIMIT - StorageSettings().memory_overhead_bytes
    stop = threading.Event()
    acked: list[tuple[str, int, int, int]] = []  # partition, start, end, writer
    statuses: dict[int, int] = {}
    peaks = {"rss": 0, "over": 0}
    errors: list[str] = []
    bodies = [body(w, ROWS) for w in range(WRITERS)]
    lock = threading.Lock()

    def writer(w: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", node.port, timeout=120)
        turn = 0
        while not stop.is_set():
            partition = str((w + turn * WRITERS) % PARTITIONS)
            turn += 1
            conn.request(
                "POST",
                f"/topic/{TOPIC}/partition/{partition}",
                body=bodies[w],
                headers={"content-type": ARROW_FILE},
            )
            r = conn.getresponse()
            data = r.read()
            with lock:
                statuses[r.status] = statuses.get(r.status, 0) + 1
                if r.status == 200:
                    span = json.loads(data)["span"]
                    acked.append((partition, span["start"], span["end"], w))
                elif r.status != 429:
                    errors.append(f"{r.status} {data[:200]!r}")
            if r.status == 429:
                time.sleep(float(r.getheader(RETRY_AFTER_HEADER, "1")) / 10)

    def reader() -> None:
        with httpx.Client(base_url=node.url, timeout=120) as rc:
            cursor: dict[str, int] = {}
            while not stop.is_set():
                r = rc.post(
                    f"/topic/{TOPIC}/records",
                    params={"page_size": MAX_PAGE_SIZE},
                    json=cursor,
                    headers={"accept": ARROW_FILE},
                )
                if r.status_code != 200:
                    errors.append(f"read {r.status_code} {r.text[:200]}")
                    return
                status = json.loads(r.headers[ITERATION_STATUS_HEADER])
                cursor = status["next"] if status["status"] != "All" else {}

    def sampler() -> None:
        with httpx.Client(base_url=node.url, timeout=30) as sc:
            while not stop.is_set():
                peaks["rss"] = max(peaks["rss"], proc.memory_info().rss)
                for part, v in sc.get("/admin/node").json()["memory"]["parts"].items():
                    # bodies: a lone body is always taken; segments: a lone append likewise
                    if v["used"] > v["limit"] + 64 * MiB:
                        peaks["over"] += 1
                        errors.append(f"{part} held {v['used']} over its limit {v['limit']}")
                time.sleep(0.05)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    threads += [threading.Thread(target=reader) for _ in range(2)]
    threads.append(threading.Thread(target=sampler))
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join(timeout=180)
    assert node.proc.poll() is None, f"node died: {node.log()}"
    assert cgroup.oom_kills() == 0
    assert not errors, errors[:5]
    assert peaks["rss"] <= LIMIT, peaks
    assert statuses.get(200, 0) > WRITERS, statuses
    _check_every_acknowledged_record(node, acked)


def _check_every_acknowledged_record(
    node: NodeProcess, acked: list[tuple[str, int, int, int]]
) -> None:
    by_partition: dict[str, list[tuple[int, int, int]]] = {}
    for partition, start, end, w in acked:
        by_partition.setdefault(partition, []).append((start, end, w))
    with httpx.Client(base_url=node.url, timeout=120) as c:
        for partition, spans in by_partition.items():
            spans.sort()
            tables = []
            start = spans[0][0]
            while start < spans[-1][1]:
                r = c.get(
                    f"/topic/{TOPIC}/partition/{partition}/records",
                    params={"start": start, "page_size": MAX_PAGE_SIZE},
                    headers={"accept": ARROW_FILE},
                )
                assert r.status_code == 200, r.text
                page = pa.ipc.open_file(pa.py_buffer(r.content)).read_all()
                tables.append(page.select(["writer", "row"]))
                start = int(r.headers[SPAN_END_HEADER])
            table = pa.concat_tables(tables)
            first = spans[0][0]
            for s, e, w in spans:
                part = table.slice(s - first, e - s)
                assert part.num_rows == ROWS, (partition, s, e)
                assert pc.all(pc.equal(part.column("writer"), w)).as_py(), (partition, s)
                assert part.column("row").to_pylist() == list(range(ROWS)), (partition, s)
