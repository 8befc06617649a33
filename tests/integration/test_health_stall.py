"""A wedged engine fails liveness and readiness, so Kubernetes restarts the pod.

The wedge is real: the test takes a partition's lock and keeps it, as a
deadlocked thread would, while an append waits for it. The node runs in this
process (uvicorn on loopback) so the test can hold that lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
import uvicorn

from plateau.server.app import create_app
from plateau.server.data_plane import DataPlane
from plateau.settings import NodeSettings
from plateau.storage.config import StorageSettings
from plateau.storage.engine import Engine
from testkit.arrowhttp import append
from testkit.nodeproc import free_port

STALL_SECONDS = 1.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Engine, str]]:
    storage = StorageSettings(data_dir=tmp_path / "data", stall_seconds=STALL_SECONDS)
    settings = NodeSettings(storage=storage)
    engine = Engine(settings.storage)
    app = create_app(settings, engine)
    port = free_port()
    config = uvicorn.Config(
        DataPlane(app, app.state.plateau), host="127.0.0.1", port=port, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started
    yield engine, f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_wedged_engine_turns_probes_503_and_recovers(served: tuple[Engine, str]) -> None:
    engine, url = served
    table = pa.table({"x": [1, 2]})
    with httpx.Client(base_url=url, timeout=30) as c:
        assert c.put("/admin/topics/t").status_code == 201
        assert append(c, "t", "0", table).status_code == 200
        assert c.get("/healthz").status_code == 200
        partition = engine._topic("t").partitions["0"]
        partition.lock.acquire()  # the wedge: a lock nobody releases
        results: list[int] = []
        try:
            stuck = threading.Thread(
                target=lambda: results.append(append(c, "t", "0", table).status_code)
            )
            stuck.start()
            wedged_at = time.monotonic()
            while True:
                r = c.get("/healthz")
                if r.status_code == 503:
                    break
                assert time.monotonic() - wedged_at < STALL_SECONDS + 2, "no 503 in time"
                time.sleep(0.05)
            assert "stalled" in r.json()["message"] and "append t/0" in r.json()["message"]
            assert c.get("/readyz").status_code == 503
        finally:
            partition.lock.release()
        stuck.join(timeout=10)
        assert results == [200]
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 200
