"""Liveness, readiness and metrics: always open, so probes and scrapers need no token."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from plateau.protocol import HEALTH_PATH, METRICS_PATH, OK_PATH, READY_PATH
from plateau.server.errors import error_response
from plateau.server.jsonout import json_reply
from plateau.server.state import node_state

router = APIRouter(tags=["operations"])


@router.get(OK_PATH, summary="Liveness (plateau's route)")
async def ok() -> Response:
    return json_reply({"ok": "true"})  # exactly: plateau's client compares the body


@router.get(
    HEALTH_PATH,
    summary="Liveness: the engine makes progress",
    description="503 when engine work is in progress and none of it finished for "
    "`storage.stall_seconds` (a wedged node): the kubelet should restart the pod.",
    responses={503: {"description": "The engine is stalled."}},
)
async def healthz(request: Request) -> Response:
    # On the event loop, not a worker thread: with every worker stuck the answer must still come.
    stall = node_state(request).engine.progress.stall()
    if stall is not None:
        return error_response(503, stall.message())
    return json_reply({"status": "ok"})


@router.get(
    READY_PATH,
    summary="Readiness: the engine is open, makes progress, and the node is not shutting down",
    responses={503: {"description": "Starting, shutting down or stalled."}},
)
async def readyz(request: Request) -> Response:
    state = node_state(request)
    if not state.ready:
        return error_response(503, "not ready: the node is starting or shutting down")
    stall = state.engine.progress.stall()
    if stall is not None:
        return error_response(503, stall.message())
    return json_reply({"status": "ready"})


@router.get(METRICS_PATH, summary="Prometheus metrics", response_class=Response)
async def metrics() -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_PLAIN_0_0_4)
