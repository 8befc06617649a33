"""The data routes (append, read a partition, iterate a topic), served in front of FastAPI.

Why not FastAPI routes: on these routes a node spends its event loop's time
per request, and the event loop shares one GIL with everything else. FastAPI's
route matching over every route, dependency solving, parameter validation and
middleware layers cost more event-loop CPU per request than the request's own
work on the loop (py-spy: routing, dependencies and the handler wrapper were
over half the loop's GIL time during a topic scan). ``DataPlane`` matches the
three paths itself and calls the handlers below directly; everything else
(admin, health, metrics, docs, and any path or method it does not serve)
goes on to FastAPI. Measured with bench/read.py and bench/ingest.py: see
bench/README.md.

The same handlers are behind the FastAPI routes declared in ``routes_data``
(which document them in OpenAPI), so a request gets the same answer either
way: one parser (``params``), one auth check (``auth.check_token``), one error
shape (``errors.plateau_error_response``).

Each handler checks names and parameters on the event loop, then makes one
call to a thread that does the CPU and disk work together (decode + append +
fsync, or read + encode), so the loop never blocks and a request costs one
thread hop: appends go to the node's own executor (``NodeState.appenders``,
a cheaper hop than anyio's), reads to ``run_in_threadpool``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from plateau import protocol
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
    SPAN_END_HEADER,
    SPAN_START_HEADER,
    server_route,
)
from plateau.protocol.errors import PlateauError
from plateau.protocol.focus import DataFocus
from plateau.protocol.names import check_name
from plateau.protocol.values import RecordStatus, Span
from plateau.server.auth import bearer_token, check_token
from plateau.server.body import check_declared_length, read_append_body, read_body
from plateau.server.body_pool import BodyPool, Pieces
from plateau.server.codecs import (
    accepted_codecs,
    append_media_type,
    arrow_pieces,
    decode_append_messages,
    encode_stored,
    reply_media_type,
)
from plateau.server.errors import response_for
from plateau.server.iteration_prefetch import PageRequest, topic_page
from plateau.server.jsonout import dumps, json_reply, table_rows
from plateau.server.metrics import REJECTED_APPENDS
from plateau.server.params import (
    data_focus,
    int_param,
    list_params,
    order_param,
    parse_cursor,
    partition_filter,
    time_range,
)
from plateau.server.reply_pieces import PiecesResponse
from plateau.server.state import NodeState
from plateau.storage.engine import Engine
from plateau.storage.metrics import APPEND_STAGE_SECONDS
from plateau.storage.stored_reads import StoredRead
from plateau.storage.types import PartitionRead, TimeRange

MAX_CURSOR_BYTES = 1024 * 1024

STAGE_BODY = APPEND_STAGE_SECONDS.labels(stage="body")
STAGE_QUEUE = APPEND_STAGE_SECONDS.labels(stage="queue")
STAGE_DECODE = APPEND_STAGE_SECONDS.labels(stage="decode")

_REJECTION_REASONS = {
    401: "unauthorized",
    404: "not_found",
    413: "too_large",
    429: "busy",
    503: "disk_full",
    507: "disk_full",
}


def rejection_reason(exc: PlateauError) -> str | None:
    reason = _REJECTION_REASONS.get(exc.status)
    if reason is None and 400 <= exc.status < 500:
        reason = "invalid"
    return reason


def _page_size(request: Request) -> int:
    return int_param(
        request.query_params, "page_size", DEFAULT_PAGE_SIZE, low=1, high=MAX_PAGE_SIZE
    )


def _times(request: Request) -> TimeRange | None:
    query = request.query_params
    return time_range(query.get("time.start"), query.get("time.end"))


def _check_token(request: Request, accepted: list[bytes]) -> None:
    check_token(bearer_token(request.headers.get("authorization")), accepted)


# --- read a partition ------------------------------------------------------------------


async def read_partition(
    request: Request, state: NodeState, topic: str, partition: str
) -> Response:
    return await run_in_threadpool(read_partition_now, request, state, topic, partition)


def read_partition_now(request: Request, state: NodeState, topic: str, partition: str) -> Response:
    """The whole read, on the calling thread: the event loop's route hands it to a thread,
    ``append_front`` calls it on the connection's own (the same checks and reply either way)."""
    _check_token(request, state.read_tokens)
    check_name("topic", topic)
    check_name("partition", partition)
    start = int_param(request.query_params, "start", None, low=0)
    limit = _page_size(request)
    times = _times(request)
    focus = data_focus(request.query_params)
    media = reply_media_type(request.headers.get("accept"))
    if media in (ARROW_FILE, ARROW_STREAM) and times is None and focus is None:
        codecs = accepted_codecs(request.headers.get(ACCEPT_ARROW_COMPRESSION_HEADER))
        stored = state.engine.read_stored(topic, partition, start, limit, codecs)
        if stored is not None:
            return _stored_reply(stored, media)
    return _read_partition(
        state.engine,
        topic,
        partition,
        start,
        limit,
        times,
        state.settings.server.max_page_bytes,
        media,
        focus,
    )


def _stored_reply(stored: StoredRead, media: str) -> Response:
    """``_read_partition``'s Arrow reply, of batches as stored (``storage.stored_reads``)."""
    headers = _read_headers(stored.status, stored.span)
    metadata = _arrow_metadata(stored.status, stored.span)
    body = encode_stored(stored.schema, stored.batches, media, metadata)
    return PiecesResponse(body, headers=headers, media_type=media)


def _read_headers(status: RecordStatus, span: Span | None) -> dict[str, str]:
    """plateau's: the status alone, as a JSON string ("All"); the span in two more headers
    (plateau puts it only in the Arrow schema's metadata, out of a JSON reader's reach)."""
    headers = {ITERATION_STATUS_HEADER: json.dumps(str(status))}
    if span is not None:
        headers[SPAN_START_HEADER] = str(span.start)
        headers[SPAN_END_HEADER] = str(span.end)
    return headers


def _arrow_metadata(status: RecordStatus, span: Span | None) -> dict[str, str]:
    """plateau's Arrow replies carry status and span (each JSON) in the schema metadata."""
    shown = span.to_json() if span is not None else None
    return {"status": json.dumps(str(status)), "span": json.dumps(shown)}


def _read_partition(
    engine: Engine,
    topic: str,
    partition: str,
    start: int,
    limit: int,
    times: TimeRange | None,
    max_bytes: int,
    media: str,
    focus: DataFocus | None,
) -> Response:
    result: PartitionRead = engine.read_partition(
        topic, partition, start, limit, times, max_bytes, focus
    )
    headers = _read_headers(result.status, result.span)
    if result.archived:  # rows read back from the object-storage archive
        headers[ARCHIVED_RECORDS_HEADER] = str(result.archived)
    if media == JSON:  # plateau's: the records alone
        return Response(dumps(table_rows(result.table)), headers=headers, media_type=JSON_RECORDS)
    if media == JSON_ENVELOPE:
        span = result.span.to_json() if result.span is not None else None
        reply: dict[str, Any] = {"span": span, "status": str(result.status)}
        reply["records"] = table_rows(result.table)
        if result.archived:
            reply["archived"] = result.archived
        return Response(dumps(reply), headers=headers, media_type=JSON_ENVELOPE)
    metadata = _arrow_metadata(result.status, result.span)
    body = arrow_pieces(result.table, media, metadata)
    return PiecesResponse(body, headers=headers, media_type=media)


# --- append ----------------------------------------------------------------------------


async def append(request: Request, state: NodeState, topic: str, partition: str) -> Response:
    try:
        _check_token(request, state.write_tokens)
        check_name("topic", topic)
        check_name("partition", partition)
        media = append_media_type(request.headers.get("content-type"))
        limit = state.settings.server.max_request_bytes
        started = time.perf_counter()
        async with state.bodies.hold(check_declared_length(request, limit)) as held:
            body = await read_append_body(request, limit, held, pooled=media != JSON)
            received = time.perf_counter()
            STAGE_BODY.observe(received - started)
            span = await asyncio.get_running_loop().run_in_executor(
                state.appenders,
                _append,
                state.engine,
                state.body_pool,
                topic,
                partition,
                media,
                body,
                received,
            )
    except PlateauError as exc:
        reason = rejection_reason(exc)
        if reason is not None:
            REJECTED_APPENDS.labels(reason=reason).inc()
        raise
    return json_reply({"span": span.to_json()})


def _append(
    engine: Engine,
    pool: BodyPool,
    topic: str,
    partition: str,
    media: str,
    body: bytes | Pieces,
    handed_off: float,
) -> Span:
    started = time.perf_counter()
    STAGE_QUEUE.observe(started - handed_off)
    whole = pool.gather(body) if isinstance(body, Pieces) else body
    table, messages = decode_append_messages(media, whole)
    STAGE_DECODE.observe(time.perf_counter() - started)
    return engine.append(topic, partition, table, messages)


# --- iterate a topic -------------------------------------------------------------------


async def iterate_topic(request: Request, state: NodeState, topic: str) -> Response:
    _check_token(request, state.read_tokens)
    check_name("topic", topic)
    query = request.query_params
    limit = _page_size(request)
    order = order_param(query)
    times = _times(request)
    lists = list_params(query)
    selected = partition_filter(lists["partition_filter"])
    focus = data_focus(query, lists)
    # plateau's page_bytes: at most the node's own limit
    max_page_bytes = state.settings.server.max_page_bytes
    page_bytes = int_param(query, "page_bytes", max_page_bytes, low=1)
    cursor = parse_cursor(await read_body(request, MAX_CURSOR_BYTES))
    page_request = PageRequest.of(
        topic,
        cursor,
        limit,
        order,
        times,
        selected,
        min(page_bytes, max_page_bytes),
        reply_media_type(request.headers.get("accept")),
        focus,
    )
    page = await state.pages.take(page_request)
    if page is None:
        page = await run_in_threadpool(topic_page, state.engine, page_request)
    state.pages.prepare_next(page_request, page)
    return page.response()


# --- dispatch --------------------------------------------------------------------------

Handler = Callable[..., Awaitable[Response]]


@dataclass(frozen=True)
class _Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler


def _route(method: str, path: str, handler: Handler) -> _Route:
    pattern, _, _ = compile_path(path)  # Starlette's own matching, so both agree
    return _Route(method, pattern, handler)


READ_PARTITION_PATH = server_route(protocol.READ_PARTITION_PATH)
APPEND_PATH = server_route(protocol.APPEND_PATH)
ITERATE_PATH = server_route(protocol.ITERATE_PATH)

APPEND_ROUTE = _route("POST", APPEND_PATH, append)  # also what append_front serves
READ_PARTITION_ROUTE = _route("GET", READ_PARTITION_PATH, read_partition)  # likewise
ROUTES = (  # in FastAPI's order (routes_data), so the same route wins for the same request
    READ_PARTITION_ROUTE,
    APPEND_ROUTE,
    _route("POST", ITERATE_PATH, iterate_topic),
)


class DataPlane:
    """ASGI app: the data routes directly, everything else through ``app`` (FastAPI)."""

    def __init__(self, app: ASGIApp, state: NodeState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            method = scope["method"]
            path = scope["path"]
            for route in ROUTES:
                if route.method != method:
                    continue
                match = route.pattern.match(path)
                if match is not None:
                    await self._serve(route.handler, match.groupdict(), scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _serve(
        self, handler: Handler, params: dict[str, str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        request = Request(scope, receive)
        try:
            response = await handler(request, self.state, **params)
        except Exception as exc:
            response = response_for(exc, request)
        await response(scope, receive, send)
