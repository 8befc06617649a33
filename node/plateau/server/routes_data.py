"""plateau's data routes as FastAPI sees them: declared here, for OpenAPI and in-process use.

The three hot routes (read a partition, append, iterate a topic) are served
by ``data_plane.DataPlane`` in front of FastAPI, which calls the same
handlers without FastAPI's routing and dependency layers; the routes here
delegate to those handlers, and their parameters are documented by hand
(``openapi_extra``; FastAPI adds the path parameters) because the handlers
parse them (``params``), not FastAPI.

Topic and partition path parameters use Starlette's ``path`` converter: a
name with ``/`` in it (also ``%2F``) reaches ``check_name`` and gets a 400
instead of falling through to a 404.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from plateau.protocol import (
    ACCEPT_ARROW_COMPRESSION_HEADER,
    ARCHIVED_RECORDS_HEADER,
    ARROW_FILE,
    ARROW_STREAM,
    DEFAULT_PAGE_SIZE,
    ITERATION_STATUS_HEADER,
    JSON,
    JSON_ENVELOPE,
    JSON_RECORDS,
    MAX_PAGE_SIZE,
    MAX_REQUEST_SIZE_HEADER,
    SPAN_END_HEADER,
    SPAN_START_HEADER,
    TOPIC_PATH,
    TOPICS_PATH,
    server_route,
)
from plateau.protocol.names import check_name
from plateau.protocol.replies import (
    ERROR_RESPONSES,
    Inserted,
    Partitions,
    Topics,
)
from plateau.server import data_plane
from plateau.server.auth import ReadAccess
from plateau.server.jsonout import json_reply
from plateau.server.state import node_state

router = APIRouter(tags=["data"])

BEARER: list[dict[str, list[str]]] = [{"HTTPBearer": []}]


def _param(name: str, schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "in": "query", "schema": schema, "description": description, **extra}


PAGE_SIZE = _param(
    "page_size",
    {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE, "default": DEFAULT_PAGE_SIZE},
    f"Records per reply (at most {MAX_PAGE_SIZE}).",
)
TIME_START = _param(
    "time.start",
    {"type": "string"},
    "Earliest record time, inclusive: RFC3339 (2024-01-02T03:04:05Z) or epoch ms.",
)
TIME_END = _param(
    "time.end", {"type": "string"}, "Latest record time, inclusive: RFC3339 or epoch ms."
)
ACCEPT = {
    "name": "accept",
    "in": "header",
    "schema": {"type": "string"},
    "description": f"`{ARROW_FILE}` or `{ARROW_STREAM}` for Arrow. None, `*/*` or "
    f"`{JSON}` get plateau's JSON: a bare array of records "
    f"(`{JSON_RECORDS}`). `{JSON_ENVELOPE}` gets the records in an object with their "
    "status and span or cursor. Anything else: 406.",
}
ACCEPT_COMPRESSION = {
    "name": ACCEPT_ARROW_COMPRESSION_HEADER,
    "in": "header",
    "schema": {"type": "string"},
    "description": "Arrow IPC buffer codecs the reader decodes, comma-separated (`lz4_frame` "
    "or `lz4`, `zstd`; others ignored). A page of whole batches the node stored compressed "
    "with one of them is sent as stored, still compressed; without it every page is sent "
    "uncompressed.",
}
_PATHS = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 1024}}
FOCUS = [
    _param(
        "dataset",
        _PATHS,
        "Columns or nested paths to return, in order (repeatable; `dataset[]` too); `*`: "
        "every column [default]. One struct alone returns its fields as the table.",
        style="form",
        explode=True,
    ),
    _param(
        "dataset.exclude",
        _PATHS,
        "Paths to drop (repeatable; `dataset.exclude[]` too).",
        style="form",
        explode=True,
    ),
    _param(
        "dataset.separator",
        {"type": "string", "minLength": 1},
        "Split paths on this and flatten structs into columns named by their joined path.",
    ),
    _param(
        "dataset.max_bytes",
        {"type": "integer", "minimum": 0},
        "A column whose data in the reply is larger than this comes back as nulls.",
    ),
]
_RECORD_ROWS = {
    "type": "array",
    "items": {"type": "object"},
    "description": "One object per record. Binary values are base64 strings, timestamps "
    "ISO 8601 strings, NaN and infinities null, nested structs objects, lists arrays.",
}
_ARROW = {"schema": {"type": "string", "format": "binary"}}


def _replies(envelope: str, status: str) -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "description": "The records, in the format `Accept` asked for.",
            "headers": {
                ITERATION_STATUS_HEADER: {"description": status, "schema": {"type": "string"}},
                ARCHIVED_RECORDS_HEADER: {
                    "description": "How many of the records were read from the node's "
                    "object-storage archive (no longer on its disk); absent when none were. "
                    "The JSON envelope carries it as `archived`.",
                    "schema": {"type": "integer"},
                },
            },
            "content": {
                JSON_RECORDS: {"schema": _RECORD_ROWS},
                JSON_ENVELOPE: {"schema": {"$ref": f"#/components/schemas/{envelope}"}},
                ARROW_FILE: _ARROW,
                ARROW_STREAM: _ARROW,
            },
        },
        406: {"description": "`Accept` names no format the node sends."},
    }


@router.get(
    TOPICS_PATH,
    summary="List topics",
    response_model=Topics,
    responses=ERROR_RESPONSES,
    dependencies=[ReadAccess],
)
async def list_topics(request: Request) -> Response:
    names = await run_in_threadpool(node_state(request).engine.topics)
    return json_reply({"topics": [{"name": name} for name in names]})


@router.get(
    data_plane.READ_PARTITION_PATH,
    summary="Read records of one partition",
    description="Up to `page_size` records from index `start` on, one schema per reply. "
    "An unknown partition of a known topic reads as empty (`span` null).",
    response_model=None,
    responses={
        **ERROR_RESPONSES,
        **_replies(
            "Records",
            'the status as a JSON string (`"All"`); the span in '
            f"{SPAN_START_HEADER} and {SPAN_END_HEADER}",
        ),
    },
    openapi_extra={
        "parameters": [
            _param(
                "start",
                {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                "First index to read.",
                required=True,
            ),
            PAGE_SIZE,
            TIME_START,
            TIME_END,
            *FOCUS,
            ACCEPT,
            ACCEPT_COMPRESSION,
        ],
        "security": BEARER,
    },
)
async def read_partition(request: Request, topic: str, partition: str) -> Response:
    return await data_plane.read_partition(request, node_state(request), topic, partition)


@router.post(
    data_plane.APPEND_PATH,
    summary="Append records to a partition",
    description=f"Body: Arrow IPC file (`{ARROW_FILE}`), Arrow IPC stream (`{ARROW_STREAM}`) "
    'or JSON (`{"records": [...]}` of objects or strings, or an array of objects). All rows '
    "are stored or none; the reply is the span of indexes assigned, after they are durable.",
    response_model=Inserted,
    responses={
        **ERROR_RESPONSES,
        413: {"description": f"Body too large; `{MAX_REQUEST_SIZE_HEADER}` gives the limit."},
        415: {"description": "Unsupported Content-Type."},
        429: {"description": "Writer busy; retry after `Retry-After` seconds."},
        507: {"description": "Volume full; writes refused, reads go on."},
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                ARROW_FILE: {"schema": {"type": "string", "format": "binary"}},
                ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}},
                JSON: {"schema": {"type": "object"}},
            },
        },
        "security": BEARER,
    },
)
async def append(request: Request, topic: str, partition: str) -> Response:
    return await data_plane.append(request, node_state(request), topic, partition)


@router.post(
    data_plane.ITERATE_PATH,
    summary="Iterate a topic across partitions",
    description="The JSON body is the cursor `{partition: next_index}` (empty for the start); "
    f"send the `next` of the reply's `{ITERATION_STATUS_HEADER}` back to continue.",
    response_model=None,
    responses={
        **ERROR_RESPONSES,
        **_replies("TopicRecords", '`{"status", "next"}` as JSON'),
    },
    openapi_extra={
        "parameters": [
            PAGE_SIZE,
            _param(
                "order",
                {"type": "string", "enum": ["asc", "desc"], "default": "asc"},
                "asc: oldest first; desc: newest first.",
            ),
            TIME_START,
            TIME_END,
            _param(
                "partition_filter",
                {"type": "array", "items": {"type": "string"}},
                "Partitions to read (repeatable; `partition_filter[]` too); `regex:<pattern>` "
                "matches names.",
            ),
            *FOCUS,
            ACCEPT,
        ],
        "requestBody": {
            "required": False,
            "content": {
                JSON: {"schema": {"type": "object", "additionalProperties": {"type": "integer"}}}
            },
        },
        "security": BEARER,
    },
)
async def iterate_topic(request: Request, topic: str) -> Response:
    return await data_plane.iterate_topic(request, node_state(request), topic)


@router.get(
    server_route(TOPIC_PATH),
    summary="Partitions of a topic and their spans",
    response_model=Partitions,
    responses=ERROR_RESPONSES,
    dependencies=[ReadAccess],
)
async def topic_partitions(request: Request, topic: str) -> Response:
    check_name("topic", topic)
    engine = node_state(request).engine
    usage = await run_in_threadpool(engine.topic_usage, topic)
    # spans from the oldest archived index where the archive holds what the disk no longer does
    spans = await run_in_threadpool(engine.readable_spans, topic)
    partitions = {name: span.to_json() for name, span in spans.items()}
    return json_reply({"partitions": partitions, "bytes": usage.bytes})
