"""The usage poller against a real node on loopback: one call per node, statuses written
only when their figures changed, never beside a reconcile of the same object, one poll
per node at a time. The API server is a recorder here (its status writes and the
token read); tests/integration/test_operator_status.py has the real one."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from plateau.protocol.replies import TopicStatus
from plateau_operator.serial import Key, ObjectLocks
from plateau_operator.settings import OperatorSettings
from plateau_operator.status import topic_usage
from plateau_operator.usage import UsagePoller
from testkit.arrowhttp import append
from testkit.nodeproc import NodeProcess

TOKEN = "usage-token"
NODE: Key = ("PlateauNode", "ns", "n")
TOPICS: list[Key] = [("PlateauTopic", "ns", f"t{i}") for i in range(4)]
READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "Synced"}]}


class Recorder:
    """What the poller asks of the API server: its node's token, and status patches."""

    def __init__(self, locks: ObjectLocks) -> None:
        self.locks = locks
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self.reconciling: set[str] = set()  # names a "reconcile" is inside right now
        self.overlaps: list[str] = []
        self.guard = threading.Lock()

    def secret_data(self, namespace: str, name: str) -> dict[str, str]:
        return {"token": TOKEN}

    def patch_status(self, api_version: str, kind: str, name: str, namespace: str,
                     status: dict[str, Any]) -> None:  # fmt: skip
        with self.guard:
            if name in self.reconciling:
                self.overlaps.append(name)
            self.patches.append((kind, name, status))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    proc = NodeProcess(tmp_path / "data", token=TOKEN).start()
    try:
        with httpx.Client(base_url=proc.url, headers=proc.headers()) as c:
            for i in range(len(TOPICS)):
                r = c.put(f"/admin/topics/t{i}", json={"retention": {"max_bytes": 1 << 20}})
                assert r.status_code == 201, r.text
        yield proc
    finally:
        proc.stop()


def node_body(url: str) -> dict[str, Any]:
    return {
        "apiVersion": "plateau.dev/v1alpha1",
        "kind": "PlateauNode",
        "metadata": {"name": "n", "namespace": "ns", "annotations": {"plateau.dev/endpoint": url}},
        "spec": {"storage": {"size": "10Gi"}, "auth": {"secretRef": {"name": "tok"}}},
        "status": dict(READY),
    }


def topic_body(key: Key, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "plateau.dev/v1alpha1",
        "kind": "PlateauTopic",
        "metadata": {"name": key[2], "namespace": "ns"},
        "spec": {"nodeRef": {"name": "n"}, "retention": {"maxBytes": "1Mi"}},
        "status": {**READY, **(status or {})},
    }


def rows(node: NodeProcess, topic: str, n: int) -> None:
    with httpx.Client(base_url=node.url, headers=node.headers()) as c:
        append(c, topic, "0", pa.table({"x": list(range(n))}))


def poller_for(node: NodeProcess) -> tuple[UsagePoller, Recorder, ObjectLocks]:
    locks = ObjectLocks()
    rec = Recorder(locks)
    cfg = OperatorSettings(allow_endpoint_override=True)
    poller = UsagePoller(lambda: rec, locks, cfg)  # type: ignore[arg-type,return-value]
    poller.see(NODE, node_body(node.url))
    for key in TOPICS:
        poller.see(key, topic_body(key))
    return poller, rec, locks


def poll_all(poller: UsagePoller) -> int:
    return sum(poller.poll(k) for k in poller.take_nodes())


def test_one_poll_writes_what_changed_and_a_second_writes_nothing(node: NodeProcess) -> None:
    poller, rec, _ = poller_for(node)
    rows(node, "t1", 5)
    assert poll_all(poller) == 1 + len(TOPICS)  # nothing known yet: every status
    written = {name: patch for _, name, patch in rec.patches}
    assert written["t1"]["usage"]["records"] == 5 and written["t0"]["usage"]["records"] == 0
    assert written["n"]["allocatedBytes"] == 4 << 20 and written["n"]["topics"] == 4
    rec.patches.clear()
    assert poll_all(poller) == 0 and rec.patches == []  # nothing changed: no write
    rows(node, "t2", 3)
    assert poll_all(poller) == 2  # t2's usage and the node's used bytes
    assert {name for _, name, _ in rec.patches} == {"t2", "n"}

    # a topic that is not Ready (another resource owns its node topic) shows nothing
    poller.see(TOPICS[3], {**topic_body(TOPICS[3]), "status": {}})
    rows(node, "t3", 1)
    rec.patches.clear()
    poll_all(poller)
    assert "t3" not in {name for _, name, _ in rec.patches}

    # a reconcile that wrote after the poll asked the node wins
    t1 = TOPICS[1]
    poller.wrote(t1, topic_body(t1), {**READY, "usage": {"records": 99}})
    rows(node, "t1", 1)
    started = time.monotonic() - 60  # as if the poll had asked the node before that write
    assert not poller._write(t1, {"usage": {"records": 6}}, started)


def test_a_gone_node_is_looked_up_again_and_no_status_is_written(node: NodeProcess) -> None:
    poller, rec, _ = poller_for(node)
    assert poll_all(poller) > 0
    rec.patches.clear()
    node.stop()
    assert poll_all(poller) == 0 and rec.patches == []
    node.start()
    rows(node, "t0", 2)
    assert poll_all(poller) == 2  # found again; t0 and the node's used bytes


def test_polls_reconciles_and_watch_events_together_never_overlap_or_stall(
    node: NodeProcess,
) -> None:
    poller, rec, locks = poller_for(node)
    stop = threading.Event()
    concurrent: dict[Key, int] = {}
    doubled: list[Key] = []
    guard = threading.Lock()
    # the reconciles' pause between writes; doubled while no poll has won a write, so a
    # loaded machine (a poll slower than the gap between reconciles) still gets a storm in
    # which polls write beside reconciles, instead of one where every poll loses
    gap = [0.01]

    def polls() -> None:
        while not stop.is_set():
            for key in poller.take_nodes():
                with guard:
                    concurrent[key] = concurrent.get(key, 0) + 1
                    if concurrent[key] > 1:
                        doubled.append(key)
                try:
                    poller.poll(key)
                finally:
                    with guard:
                        concurrent[key] -= 1

    def reconciles() -> None:
        while not stop.is_set():
            key = random.choice([NODE, *TOPICS])
            with locks.hold(key):
                with rec.guard:
                    rec.reconciling.add(key[2])
                time.sleep(0.001)
                body = node_body(node.url) if key == NODE else topic_body(key)
                poller.wrote(key, body, body["status"])
                with rec.guard:
                    rec.reconciling.discard(key[2])
            # real reconciles come with events, not back to back: without a gap, on a
            # loaded machine every poll loses to a reconcile that wrote after it asked
            time.sleep(random.uniform(0, gap[0]))

    def watch() -> None:
        while not stop.is_set():
            key = random.choice(TOPICS)
            poller.see(key, topic_body(key, {"usage": {"records": random.randint(0, 3)}}))
            time.sleep(0.0005)  # events arrive; a busy loop would only starve the others

    def ingest() -> None:
        while not stop.is_set():
            rows(node, random.choice(["t0", "t1", "t2", "t3"]), 2)

    workers = [polls] * 3 + [reconciles] * 3 + [watch, ingest]
    threads = [threading.Thread(target=w, daemon=True) for w in workers]
    for t in threads:
        t.start()
    # at least 3 s of the storm, longer (up to 30 s) until a poll won a write in it: a
    # storm in which no poll wrote would prove nothing about overlaps
    start = last = time.monotonic()
    while time.monotonic() - start < 3.0 or (not rec.patches and time.monotonic() - start < 30):
        time.sleep(0.1)
        if not rec.patches and time.monotonic() - last > 3.0:
            gap[0], last = min(gap[0] * 2, 0.32), time.monotonic()
    stop.set()
    deadline = time.monotonic() + 30
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "stalled"
    assert not doubled, "two polls of one node at once"
    assert not rec.overlaps, "a status written while a reconcile of the object ran"
    assert poller.polling() == set()
    assert len(locks) == 0
    assert rec.patches, "no poll won a status write in 30 s of the storm"

    # once quiet, one poll brings every status to the node's figures; the next writes nothing
    poll_all(poller)
    rec.patches.clear()
    assert poll_all(poller) == 0
    with httpx.Client(base_url=node.url, headers=node.headers()) as c:
        want = topic_usage(TopicStatus.model_validate_json(c.get("/admin/topics/t1").content).usage)
    assert poller._seen[TOPICS[1]].status["usage"] == want
