"""The app's lifetime in process (ASGI, no sockets): readiness and closing the engine."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from pydantic import SecretStr

from plateau.protocol import JSON
from plateau.server.app import create_app
from plateau.server.config import AuthSettings
from plateau.server.data_plane import DataPlane
from plateau.server.run import NodeServer
from plateau.server.state import NodeState
from plateau.settings import NodeSettings
from plateau.storage.config import StorageSettings
from plateau.storage.engine import Engine


def make(tmp_path: Path) -> tuple[NodeSettings, Engine]:
    settings = NodeSettings(storage=StorageSettings(data_dir=tmp_path / "data"))
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


def test_data_plane_and_fastapi_routes_answer_alike(tmp_path: Path) -> None:
    """The data routes are served by ``DataPlane`` in front of FastAPI, and declared in FastAPI
    too: both entries must give the same answers, and whatever the data plane does not serve
    (other methods, other paths) must reach FastAPI."""
    settings = NodeSettings(
        storage=StorageSettings(data_dir=tmp_path / "data"), auth=AuthSettings(token=SecretStr("w"))
    )
    engine = Engine(settings.storage)
    app = create_app(settings, engine)
    state: NodeState = app.state.plateau
    plane = DataPlane(app, state)
    auth = {"authorization": "Bearer w"}
    body = b'{"records": [{"x": 1}, {"x": 2}]}'
    json_body = {**auth, "content-type": JSON}
    requests: list[tuple[str, str, dict[str, str], bytes]] = [
        ("POST", "/topic/t/partition/0", json_body, body),
        ("POST", "/topic/t/partition/0", {"content-type": JSON}, body),
        ("POST", "/topic/t/partition/0", {**auth, "content-type": "text/csv"}, body),
        ("POST", "/topic/T/partition/0", json_body, body),
        ("GET", "/topic/t/partition/0/records?start=0&page_size=0", {}, b""),
        ("GET", "/topic/t/partition/0/records?page_size=5", {}, b""),
        ("GET", "/topic/nope/partition/0/records?start=0", {}, b""),
        ("POST", "/topic/t/records?order=sideways", {}, b"{}"),
        ("POST", "/topic/t/records?page_size=1", {}, b'{"0": -1}'),
        ("DELETE", "/topic/t/records", {}, b""),
    ]

    async def answers(entry: Any) -> list[tuple[int, Any]]:
        transport = httpx.ASGITransport(app=entry, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://node") as c:
            got = []
            for method, url, headers, content in requests:
                r = await c.request(method, url, headers=headers, content=content)
                got.append((r.status_code, r.json()))
            return got

    async def scenario() -> tuple[list[tuple[int, Any]], list[tuple[int, Any]]]:
        async with app.router.lifespan_context(app):
            via_plane = await answers(plane)
            engine.delete_topic("t")
            return via_plane, await answers(app)

    via_plane, via_fastapi = asyncio.run(scenario())
    assert [status for status, _ in via_plane] == [200, 401, 415, 400, 400, 400, 404, 400, 400, 405]
    # the topic was deleted in between: its indexes continue, they are never reused
    assert via_plane[0] == (200, {"span": {"start": 0, "end": 2}})
    assert via_fastapi[0] == (200, {"span": {"start": 2, "end": 4}})
    assert via_plane[1:] == via_fastapi[1:]
