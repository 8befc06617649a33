"""The app's lifetime in process (ASGI, no sockets): readiness and closing the engine."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI

from plateau.server.app import create_app
from plateau.server.run import NodeServer
from plateau.server.state import NodeState
from plateau.settings import NodeSettings
from plateau.storage.engine import Engine


def make(tmp_path: Path) -> tuple[NodeSettings, Engine]:
    settings = NodeSettings(storage={"data_dir": tmp_path / "data"})
    return settings, Engine(settings.storage)


def client(app: FastAPI) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://node")


def test_ready_while_serving_then_engine_closed(tmp_path: Path) -> None:
    settings, engine = make(tmp_path)
    app = create_app(settings, engine)
    state: NodeState = app.state.plateau
    assert not state.ready

    async def scenario() -> None:
        async with app.router.lifespan_context(app), client(app) as c:
            assert (await c.get("/readyz")).json() == {"status": "ready"}
            state.ready = False  # what a stop signal does before requests drain
            r = await c.get("/readyz")
            assert r.status_code == 503
            assert r.json()["code"] == 503
            assert (await c.get("/healthz")).status_code == 200

    asyncio.run(scenario())
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

    async def scenario() -> httpx.Response:
        async with app.router.lifespan_context(app), client(app) as c:
            return await c.get("/boom")

    r = asyncio.run(scenario())
    assert r.status_code == 500
    assert r.json() == {"message": "internal error: RuntimeError", "code": 500}
