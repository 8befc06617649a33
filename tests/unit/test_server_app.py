"""The app's lifetime in process (ASGI, no sockets): readiness and closing the engine."""

from __future__ import annotations

import signal
from pathlib import Path

import uvicorn
from fastapi.testclient import TestClient

from plateau.server.app import create_app
from plateau.server.run import NodeServer
from plateau.server.state import NodeState
from plateau.settings import NodeSettings
from plateau.storage.engine import Engine


def make(tmp_path: Path) -> tuple[NodeSettings, Engine]:
    settings = NodeSettings(storage={"data_dir": tmp_path / "data"})
    return settings, Engine(settings.storage)


def test_ready_while_serving_then_engine_closed(tmp_path: Path) -> None:
    settings, engine = make(tmp_path)
    app = create_app(settings, engine)
    state: NodeState = app.state.plateau
    assert not state.ready
    with TestClient(app) as client:
        assert client.get("/readyz").json() == {"status": "ready"}
        state.ready = False  # what a stop signal does before requests drain
        r = client.get("/readyz")
        assert r.status_code == 503
        assert r.json()["code"] == 503
        assert client.get("/healthz").status_code == 200
    assert state.engine_closed


def test_stop_signal_marks_not_ready(tmp_path: Path) -> None:
    settings, engine = make(tmp_path)
    try:
        app = create_app(settings, engine, close_engine=False)
        state: NodeState = app.state.plateau
        state.ready = True
        server = NodeServer(uvicorn.Config(app), state)
        server.handle_exit(signal.SIGTERM, None)
        assert not state.ready
        assert server.should_exit
    finally:
        engine.close()


def test_unexpected_errors_are_json_500(tmp_path: Path) -> None:
    settings, engine = make(tmp_path)
    app = create_app(settings, engine)

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("kaput")

    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/boom")
        assert r.status_code == 500
        assert r.json() == {"message": "internal error: RuntimeError", "code": 500}
