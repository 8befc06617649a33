"""Admin routes beyond plateau: topic configuration and budgets, node capacity.

The operator drives these. ``PUT`` is idempotent and partial (fields left out
keep their value), so a reconcile loop can send the desired state every time.
The body is parsed here, after the token check, rather than by FastAPI (which
would parse it before any dependency runs and answer a stranger's malformed
JSON before telling them they lack a token).

Each topic has at most one owner (a ``PlateauTopic``, recorded by the node):
a PUT naming another owner, or a DELETE naming another owner's uid, is
refused with 409 ``OwnerConflict`` (``plateau.storage.catalog.ownership``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from plateau.protocol import ADMIN_NODE_PATH, ADMIN_PREFIX, ADMIN_TOPIC_PATH, JSON, server_route
from plateau.protocol.errors import InvalidInput
from plateau.protocol.names import check_name
from plateau.protocol.replies import (
    CONFLICT_RESPONSE,
    ERROR_RESPONSES,
    NodeInfo,
    TopicPutReply,
    TopicStatus,
)
from plateau.protocol.topic_config import TopicConfigRequest
from plateau.server.auth import WriteAccess
from plateau.server.body import read_body
from plateau.server.errors import describe_validation_errors
from plateau.server.jsonout import json_reply
from plateau.server.state import node_state
from plateau.storage.engine import Engine

_TOPIC = server_route(ADMIN_TOPIC_PATH).removeprefix(ADMIN_PREFIX)
router = APIRouter(prefix=ADMIN_PREFIX, tags=["admin"], dependencies=[WriteAccess])

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
    _TOPIC,
    summary="Create or update a topic",
    description="Every field is optional: one left out keeps its current value (or takes the "
    "node's default for a new topic). 201 when created, 200 when updated; the reply is the "
    "resolved configuration with the owner and how the request stood to it (claim). "
    "409 (nothing changed) with reason OwnerConflict when another owner holds the topic, "
    "PartitionsDecrease for fewer partitions, OverBudget when a new or raised budget does "
    "not fit the node. A request that keeps or lowers the budget is never OverBudget.",
    response_model=TopicPutReply,
    responses={
        **ERROR_RESPONSES,
        201: {"model": TopicPutReply, "description": "Created."},
        409: CONFLICT_RESPONSE,
    },
    openapi_extra={
        "requestBody": {
            "required": False,
            "content": {JSON: {"schema": REQUEST_SCHEMA_REF}},
        }
    },
)
async def put_topic(request: Request, topic: str) -> Response:
    check_name("topic", topic)
    config_request = parse_config_request(await read_body(request, MAX_CONFIG_BYTES))
    state = node_state(request)
    result = await run_in_threadpool(state.engine.put_topic, topic, config_request)
    state.pages.forget(topic)  # pages prepared ahead under the old config
    return json_reply(result.reply().model_dump(mode="json"), 201 if result.created else 200)


@router.get(
    _TOPIC,
    summary="A topic's configuration and usage",
    response_model=TopicStatus,
    responses=ERROR_RESPONSES,
)
async def get_topic(request: Request, topic: str) -> Response:
    check_name("topic", topic)
    status = await run_in_threadpool(_topic_status, node_state(request).engine, topic)
    return json_reply(status.model_dump(mode="json"))


def _topic_status(engine: Engine, topic: str) -> TopicStatus:
    config, owner = engine.topic_state(topic)
    return TopicStatus(**dict(config), owner=owner, usage=engine.topic_usage(topic))


@router.delete(
    _TOPIC,
    summary="Delete a topic and all its data",
    description="With owner_uid, only if the topic's owner has that uid: else 409 "
    "OwnerConflict and nothing is deleted (an owner never deletes a topic another took).",
    status_code=204,
    response_class=Response,
    responses={**ERROR_RESPONSES, 409: CONFLICT_RESPONSE},
)
async def delete_topic(
    request: Request,
    topic: str,
    owner_uid: Annotated[
        str | None,
        Query(min_length=1, description="Delete only if the topic's owner has this uid."),
    ] = None,
) -> Response:
    check_name("topic", topic)
    state = node_state(request)
    await run_in_threadpool(state.engine.delete_topic, topic, owner_uid)
    state.pages.forget(topic)
    return Response(status_code=204)


@router.get(
    ADMIN_NODE_PATH.removeprefix(ADMIN_PREFIX),
    summary="Node capacity and usage",
    response_model=NodeInfo,
    responses={401: ERROR_RESPONSES[401]},
)
async def node_usage(
    request: Request,
    topics: Annotated[
        bool,
        Query(
            description="Also every topic's usage (topic_usage, as GET /admin/topics/{topic} "
            "gives it): what the operator polls, one call per node."
        ),
    ] = False,
) -> Response:
    info = await run_in_threadpool(node_state(request).engine.node_usage, topics)
    # without ?topics=true the reply has no topic_usage key at all (as before it existed)
    return json_reply(info.model_dump(mode="json", exclude=None if topics else {"topic_usage"}))
