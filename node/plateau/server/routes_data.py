"""plateau's data routes: list topics, append, read a partition, iterate a topic.

Each handler checks names and parameters on the event loop, then makes one
``run_in_threadpool`` call that does the CPU and disk work together (decode +
append + fsync, or read + encode), so the loop never blocks and a request
costs one thread hop.

Topic and partition path parameters use Starlette's ``path`` converter: a
name with ``/`` in it (also ``%2F``) reaches ``check_name`` and gets a 400
instead of falling through to a 404.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import pyarrow as pa
from fastapi import APIRouter, Header, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from plateau.metrics import APPEND_STAGE_SECONDS, REJECTED_APPENDS
from plateau.server.auth import AppendAccess, ReadAccess
from plateau.server.body import read_body
from plateau.server.codecs import (
    ARROW_FILE,
    ARROW_STREAM,
    JSON,
    append_media_type,
    decode_append,
    encode_arrow,
    reply_media_type,
)
from plateau.server.jsonout import json_reply, table_rows
from plateau.server.models import (
    ERROR_RESPONSES,
    Inserted,
    Partitions,
    Records,
    TopicRecords,
    Topics,
)
from plateau.server.page_ahead import ITERATION_STATUS_HEADER, PageRequest, topic_page
from plateau.server.params import parse_cursor, partition_filter, time_range
from plateau.server.state import node_state
from plateau.storage.engine import Engine
from plateau.storage.errors import PlateauError
from plateau.storage.names import check_name
from plateau.storage.types import Order, PartitionRead, Span, TimeRange

_STAGE_BODY = APPEND_STAGE_SECONDS.labels(stage="body")
_STAGE_QUEUE = APPEND_STAGE_SECONDS.labels(stage="queue")
_STAGE_DECODE = APPEND_STAGE_SECONDS.labels(stage="decode")

router = APIRouter(tags=["data"])

MAX_CURSOR_BYTES = 1024 * 1024

PageSize = Annotated[int, Query(ge=1, le=10_000, description="Records per reply (at most 10000).")]
TimeStart = Annotated[
    str | None,
    Query(
        alias="time.start",
        description="Earliest record time, inclusive: RFC3339 (2024-01-02T03:04:05Z) or epoch ms.",
    ),
]
TimeEnd = Annotated[
    str | None,
    Query(alias="time.end", description="Latest record time, inclusive: RFC3339 or epoch ms."),
]
Accept = Annotated[
    str | None,
    Header(
        description=f"{ARROW_FILE} or {ARROW_STREAM} for Arrow; anything else gets JSON.",
    ),
]

_REJECTION_REASONS = {
    401: "unauthorized",
    404: "not_found",
    413: "too_large",
    429: "busy",
    503: "disk_full",
    507: "disk_full",
}


def _rejection_reason(exc: PlateauError) -> str | None:
    reason = _REJECTION_REASONS.get(exc.status)
    if reason is None and 400 <= exc.status < 500:
        reason = "invalid"
    return reason


@router.get(
    "/topics",
    summary="List topics",
    response_model=Topics,
    responses=ERROR_RESPONSES,
    dependencies=[ReadAccess],
)
async def list_topics(request: Request) -> Response:
    names = await run_in_threadpool(node_state(request).engine.topics)
    return json_reply({"topics": [{"name": name} for name in names]})


@router.get(
    "/topic/{topic:path}/partition/{partition:path}/records",
    summary="Read records of one partition",
    description="Up to `page_size` records from index `start` on, one schema per reply. "
    "An unknown partition of a known topic reads as empty (`span` null).",
    response_model=Records,
    responses=ERROR_RESPONSES,
    dependencies=[ReadAccess],
)
async def read_partition(
    request: Request,
    topic: str,
    partition: str,
    start: Annotated[int, Query(ge=0, description="First index to read.")],
    page_size: PageSize = 1000,
    time_start: TimeStart = None,
    time_end: TimeEnd = None,
    accept: Accept = None,
) -> Response:
    check_name("topic", topic)
    check_name("partition", partition)
    times = time_range(time_start, time_end)
    state = node_state(request)
    return await run_in_threadpool(
        _read_partition,
        state.engine,
        topic,
        partition,
        start,
        page_size,
        times,
        state.settings.server.max_page_bytes,
        reply_media_type(accept),
    )


def _read_partition(
    engine: Engine,
    topic: str,
    partition: str,
    start: int,
    limit: int,
    times: TimeRange | None,
    max_bytes: int,
    media: str,
) -> Response:
    result: PartitionRead = engine.read_partition(topic, partition, start, limit, times, max_bytes)
    span = result.span.to_json() if result.span is not None else None
    status = {"status": str(result.status), "span": span}
    headers = {ITERATION_STATUS_HEADER: json.dumps(status)}
    if result.span is not None:
        headers["x-span-start"] = str(result.span.start)
        headers["x-span-end"] = str(result.span.end)
    if media == JSON:
        reply = {"span": span, "status": str(result.status), "records": table_rows(result.table)}
        return json_reply(reply, headers=headers)
    # plateau's Arrow replies carry status and span (each JSON) in the schema metadata too.
    metadata = {"status": json.dumps(str(result.status)), "span": json.dumps(span)}
    return Response(encode_arrow(result.table, media, metadata), headers=headers, media_type=media)


@router.post(
    "/topic/{topic:path}/partition/{partition:path}",
    summary="Append records to a partition",
    description=f"Body: Arrow IPC file (`{ARROW_FILE}`), Arrow IPC stream (`{ARROW_STREAM}`) "
    'or JSON (`{"records": [...]}` of objects or strings, or an array of objects). All rows '
    "are stored or none; the reply is the span of indexes assigned, after they are durable.",
    response_model=Inserted,
    responses={
        **ERROR_RESPONSES,
        413: {"description": "Body too large; `x-max-request-size` gives the limit."},
        415: {"description": "Unsupported Content-Type."},
        429: {"description": "Writer busy; retry after `Retry-After` seconds."},
        507: {"description": "Volume full; writes refused, reads go on."},
    },
    dependencies=[AppendAccess],
)
async def append(request: Request, topic: str, partition: str) -> Response:
    state = node_state(request)
    try:
        check_name("topic", topic)
        check_name("partition", partition)
        media = append_media_type(request.headers.get("content-type"))
        started = time.perf_counter()
        async with state.bodies.hold() as held:
            body = await read_body(request, state.settings.server.max_request_bytes, held)
            received = time.perf_counter()
            _STAGE_BODY.observe(received - started)
            span = await run_in_threadpool(
                _append, state.engine, topic, partition, media, body, received
            )
    except PlateauError as exc:
        reason = _rejection_reason(exc)
        if reason is not None:
            REJECTED_APPENDS.labels(reason=reason).inc()
        raise
    return json_reply({"span": span.to_json()})


def _append(
    engine: Engine, topic: str, partition: str, media: str, body: bytes, handed_off: float
) -> Span:
    started = time.perf_counter()
    _STAGE_QUEUE.observe(started - handed_off)
    table: pa.Table = decode_append(media, body)
    _STAGE_DECODE.observe(time.perf_counter() - started)
    return engine.append(topic, partition, table)


@router.post(
    "/topic/{topic:path}/records",
    summary="Iterate a topic across partitions",
    description="The JSON body is the cursor `{partition: next_index}` (empty for the start); "
    "send the reply's `next` back to continue. `x-iteration-status` carries "
    '`{"status", "next"}` as JSON for Arrow replies.',
    response_model=TopicRecords,
    responses=ERROR_RESPONSES,
    dependencies=[ReadAccess],
)
async def iterate_topic(
    request: Request,
    topic: str,
    page_size: PageSize = 1000,
    order: Annotated[Order, Query(description="asc: oldest first; desc: newest first.")] = (
        Order.ASC
    ),
    time_start: TimeStart = None,
    time_end: TimeEnd = None,
    partition_filter_plain: Annotated[
        list[str] | None,
        Query(
            alias="partition_filter",
            description="Partitions to read (repeatable); `regex:<pattern>` matches names.",
        ),
    ] = None,
    partition_filter_brackets: Annotated[
        list[str] | None, Query(alias="partition_filter[]", include_in_schema=False)
    ] = None,
    accept: Accept = None,
) -> Response:
    check_name("topic", topic)
    times = time_range(time_start, time_end)
    selected = partition_filter(partition_filter_plain, partition_filter_brackets)
    cursor = parse_cursor(await read_body(request, MAX_CURSOR_BYTES))
    state = node_state(request)
    page_request = PageRequest.of(
        topic,
        cursor,
        page_size,
        order,
        times,
        selected,
        state.settings.server.max_page_bytes,
        reply_media_type(accept),
    )
    page = await state.pages.take(page_request)
    if page is None:
        page = await run_in_threadpool(topic_page, state.engine, page_request)
    state.pages.prepare_next(page_request, page)
    return page.response()


@router.get(
    "/topic/{topic:path}",
    summary="Partitions of a topic and their spans",
    response_model=Partitions,
    responses=ERROR_RESPONSES,
    dependencies=[ReadAccess],
)
async def topic_partitions(request: Request, topic: str) -> Response:
    check_name("topic", topic)
    usage = await run_in_threadpool(node_state(request).engine.topic_usage, topic)
    partitions = {name: part.span.to_json() for name, part in usage.partitions.items()}
    return json_reply({"partitions": partitions, "bytes": usage.bytes})
