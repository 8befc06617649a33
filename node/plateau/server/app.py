"""The ASGI app: routes, error handlers and the engine's lifetime.

``create_app`` takes an already open engine so that recovery (which can take
a while on a large data directory) finishes before the port is bound: a
client never sees a node that accepts connections but cannot serve them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline
from starlette.concurrency import run_in_threadpool

from plateau.server import openapi, routes_admin, routes_data, routes_probes
from plateau.server.config import NodeConfig
from plateau.server.errors import install_error_handlers
from plateau.server.state import NodeState
from plateau.storage.engine import Engine

DESCRIPTION = """\
A plateau node: plateau's HTTP API (append Arrow or JSON records to a topic
partition, read a partition, iterate a topic with a cursor) plus topic
administration, health and metrics.

Errors are JSON `{"message", "code"}`. Writes and `/admin` need
`Authorization: Bearer <token>` when the node has a token; reads need the read
token when one is configured.
"""


async def _sweep_body_pool(state: NodeState) -> None:
    while True:
        await asyncio.sleep(1.0)
        await run_in_threadpool(state.body_pool.sweep)


def create_app(settings: NodeConfig, engine: Engine, *, close_engine: bool = True) -> FastAPI:
    """Build the app around ``engine``; with ``close_engine`` its shutdown closes the engine."""
    state = NodeState(settings, engine)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.ready = True
        sweeper = asyncio.create_task(_sweep_body_pool(state))
        try:
            yield
        finally:
            state.ready = False
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
            await run_in_threadpool(state.pages.close)
            state.appenders.shutdown(wait=False)
            if close_engine and not state.engine_closed:
                state.engine_closed = True
                await run_in_threadpool(engine.close)
            state.body_pool.close()

    # /docs and /redoc load Swagger UI and ReDoc from the node itself
    # (fastapi-offline's copies, under /static-offline-docs), not from a CDN: a
    # node is often on a network that cannot reach one.
    app = FastAPIOffline(
        title="plateau node",
        description=DESCRIPTION,
        version=_version(),
        lifespan=lifespan,
    )
    app.state.plateau = state
    install_error_handlers(app)
    app.include_router(routes_probes.router)
    app.include_router(routes_data.router)
    app.include_router(routes_admin.router)
    openapi.complete(app)
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("plateau-k8s")
    except PackageNotFoundError:
        return "0+unknown"
