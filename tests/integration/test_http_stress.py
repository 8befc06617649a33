"""The node over HTTP under everything at once: no stall, no 5xx, liveness stays green.

The same mix as the in-process stress test (tests/integration/test_engine_stress.py),
through a real node process: four writers on one topic that seals every few
rows, topics created, changed and deleted (also by a first append), readers
and topic iteration, retention deleting all the time. Fixed budget; any worker
without progress for STALL seconds fails with every thread's stack.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from testkit.arrowhttp import append
from testkit.nodeproc import NodeProcess
from testkit.stress import assert_indexes_never_reused, operator_mix, run_stress

SECONDS = 6.0
STALL = 3.0
HOT = "hot"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    env = {
        "PLATEAU_STORAGE__RETENTION_INTERVAL_SECONDS": "0.05",
        "PLATEAU_STORAGE__CAPACITY_BYTES": str(1 << 40),
    }
    proc = NodeProcess(tmp_path / "data", token="t", env=env).start()
    yield proc
    proc.stop()


def test_node_never_stalls_or_fails_under_topic_changes_and_sealing(node: NodeProcess) -> None:
    local = threading.local()

    def client() -> httpx.Client:
        if not hasattr(local, "client"):
            local.client = node.client(timeout=STALL * 3)
        c: httpx.Client = local.client
        return c

    def ok(r: httpx.Response, *allowed: int) -> None:
        assert r.status_code < 500 and r.status_code in allowed, (r.status_code, r.text)

    hot = {
        "partitions": 4,
        "segment": {"max_rows": 5, "format": "arrow"},
        "retention": {"max_bytes": 2000},
    }
    ok(client().put(f"/admin/topics/{HOT}", json=hot), 201)
    table = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    starts: dict[str, list[int]] = {str(p): [] for p in range(4)}
    counter = itertools.count()
    budgets = itertools.cycle([2_000, 50_000])

    def writer(p: str) -> Callable[[], None]:
        def step() -> None:
            r = append(client(), HOT, p, table)
            ok(r, 200, 429)
            if r.status_code == 200:
                starts[p].append(r.json()["span"]["start"])

        return step

    def create_append_delete(prefix: str, explicit: bool) -> Callable[[], None]:
        def step() -> None:
            name = f"{prefix}{next(counter) % 4}"
            if explicit:
                ok(client().put(f"/admin/topics/{name}", json={"segment": {"max_rows": 2}}), 201)
            ok(append(client(), name, "0", table), 200, 429)
            ok(client().delete(f"/admin/topics/{name}"), 204)

        return step

    def admin() -> None:
        body = {"retention": {"max_bytes": next(budgets)}}
        ok(client().put(f"/admin/topics/{HOT}", json=body), 200)

    def reader() -> None:
        ok(client().get(f"/topic/{HOT}/partition/1/records", params={"start": 0}), 200)
        ok(client().post(f"/topic/{HOT}/records", json={}), 200)

    def usage() -> None:
        ok(client().get("/admin/node"), 200)
        ok(client().get(f"/admin/topics/{HOT}"), 200)

    probe = httpx.Client(base_url=node.url, timeout=STALL)

    def healthy() -> None:
        r = probe.get("/healthz")
        assert r.status_code == 200, r.text

    steps = operator_mix(writer, create_append_delete, admin, reader, usage, list(starts))
    calls = run_stress(steps, SECONDS, STALL, healthy)
    assert all(n > 0 for n in calls.values()), calls
    assert_indexes_never_reused(starts)
    assert node.proc is not None and node.proc.poll() is None
