"""Admin routes beyond plateau: topic configuration and budgets, node capacity.

The operator drives these. ``PUT`` is idempotent and partial (fields left out
keep their value), so a reconcile loop can send the desired state every time.
The body is parsed here, after the token check, rather than by FastAPI (which
would parse it before any dependency runs and answer a stranger's malformed
JSON before telling them they lack a token).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from plateau.server.auth import WriteAccess
from plateau.server.body import read_body
from plateau.server.errors import describe_validation_errors
from plateau.server.jsonout import json_reply
from plateau.server.models import ERROR_RESPONSES, NodeUsageModel, TopicStatus
from plateau.server.state import node_state
from plateau.storage.engine import Engine
from plateau.storage.errors import InvalidInput
from plateau.storage.names import check_name
from plateau.storage.topic_config import TopicConfig, TopicConfigRequest

router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[WriteAccess])

MAX_CONFIG_BYTES = 64 * 1024
REQUEST_SCHEMA_REF = {"$ref": "#/components/schemas/TopicConfigRequest"}


def parse_config_request(body: bytes) -> TopicConfigRequest:
    """An empty body is an empty request: create with defaults, or change nothing."""
    if not body.strip():
        return TopicConfigRequest()
    try:
        return TopicConfigRequest.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidInput(describe_validation_errors(exc.errors())) from exc


@router.put(
    "/topics/{topic:path}",
    summary="Create or update a topic",
    description="Every field is optional: one left out keeps its current value (or takes the "
    "node's default for a new topic). 201 when created, 200 when updated; the reply is the "
    "resolved configuration. 409 when the retention budget does not fit the node.",
    response_model=TopicConfig,
    responses={
        **ERROR_RESPONSES,
        201: {"model": TopicConfig, "description": "Created."},
        409: {"description": "The budget does not fit the node's capacity."},
    },
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {"application/json": {"schema": REQUEST_SCHEMA_REF}},
        }
    },
)
async def put_topic(request: Request, topic: str) -> Response:
    check_name("topic", topic)
    config_request = parse_config_request(await read_body(request, MAX_CONFIG_BYTES))
    state = node_state(request)
    config, created = await run_in_threadpool(state.engine.put_topic, topic, config_request)
    state.pages.forget(topic)  # pages prepared ahead under the old config
    return json_reply(config.model_dump(mode="json"), 201 if created else 200)


@router.get(
    "/topics/{topic:path}",
    summary="A topic's configuration and usage",
    response_model=TopicStatus,
    responses=ERROR_RESPONSES,
)
async def get_topic(request: Request, topic: str) -> Response:
    check_name("topic", topic)
    return json_reply(await run_in_threadpool(_topic_status, node_state(request).engine, topic))


def _topic_status(engine: Engine, topic: str) -> dict[str, Any]:
    config = engine.get_topic(topic)
    usage = engine.topic_usage(topic)
    partitions = {
        name: {
            **part.span.to_json(),
            "bytes": part.bytes,
            "records": part.records,
            "segments": part.segments,
            "oldest_time_ms": part.oldest_time_ms,
            "newest_time_ms": part.newest_time_ms,
        }
        for name, part in usage.partitions.items()
    }
    return {
        **config.model_dump(mode="json"),
        "usage": {
            "bytes": usage.bytes,
            "records": usage.records,
            "oldest_time_ms": usage.oldest_time_ms,
            "newest_time_ms": usage.newest_time_ms,
            "partitions": partitions,
        },
    }


@router.delete(
    "/topics/{topic:path}",
    summary="Delete a topic and all its data",
    status_code=204,
    response_class=Response,
    responses=ERROR_RESPONSES,
)
async def delete_topic(request: Request, topic: str) -> Response:
    check_name("topic", topic)
    state = node_state(request)
    await run_in_threadpool(state.engine.delete_topic, topic)
    state.pages.forget(topic)
    return Response(status_code=204)


@router.get(
    "/node",
    summary="Node capacity and usage",
    response_model=NodeUsageModel,
    responses={401: ERROR_RESPONSES[401]},
)
async def node_usage(request: Request) -> Response:
    engine = node_state(request).engine
    usage = await run_in_threadpool(engine.node_usage)
    memory = engine.memory
    return json_reply(
        {
            **dataclasses.asdict(usage),
            "memory": {
                "budget_bytes": memory.total,
                "source": memory.source,
                "parts": memory.parts(),
            },
        }
    )
