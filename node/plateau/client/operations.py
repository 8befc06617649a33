"""Every client operation written once, as a generator that does no I/O itself.

An operation yields ``Call`` (send this request, resume me with the reply),
``Sleep`` (wait, resume me with ``None``) or ``Emit`` (hand this page to the
caller). The sync and async clients are small drivers that perform those steps
with ``httpx.Client``/``time.sleep`` or ``httpx.AsyncClient``/``asyncio.sleep``,
so the splitting, retrying and cursor-following logic exists once and both
clients behave the same. A transport failure is thrown into the generator as
``ConnectionFailed`` at the ``yield`` of its ``Call``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, Unpack

import httpx
import pyarrow as pa
from pydantic import BaseModel

from plateau.client.errors import (
    BusyError,
    ConnectionFailed,
    PartialAppendError,
    PayloadTooLargeError,
    PlateauClientError,
    RecordTooLargeError,
    error_from_response,
)
from plateau.client.topic_settings import TopicSettings, topic_request
from plateau.client.wire import (
    PartitionPage,
    RetryPolicy,
    TimeBound,
    TopicInfo,
    TopicPage,
    backoff_delay,
    encode_table,
    focus_params,
    parse_partition_page,
    parse_reply,
    parse_span,
    parse_topic_info,
    parse_topic_page,
    parts_needed,
    quote_name,
    split_rows,
    time_params,
    to_table,
)
from plateau.protocol import (
    ACCEPT_ARROW_COMPRESSION_HEADER,
    ADMIN_NODE_PATH,
    ADMIN_TOPIC_PATH,
    APPEND_PATH,
    ARROW_FILE,
    DEFAULT_PAGE_SIZE,
    ITERATE_PATH,
    JSON,
    READ_PARTITION_PATH,
    TOPIC_PATH,
    TOPICS_PATH,
)
from plateau.protocol.focus import DataFocus
from plateau.protocol.replies import NodeInfo, TopicPutReply, TopicStatus
from plateau.protocol.values import RecordStatus, Span

READ_CODECS = "lz4_frame, zstd"
"""The Arrow IPC buffer codecs this client's pyarrow decodes (x-accept-arrow-compression)."""

T = TypeVar("T")
R = TypeVar("R")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Call:
    """One HTTP request; ``safe_to_repeat`` allows resending it after a lost connection."""

    method: str
    path: str
    params: Sequence[tuple[str, str]] = ()
    headers: Mapping[str, str] = field(default_factory=dict)
    content: bytes | None = None
    json: Any = None
    safe_to_repeat: bool = True


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Emit(Generic[T]):
    value: T


Op = Generator[Call | Sleep, httpx.Response | None, R]
"""An operation that returns one result."""
StreamOp = Generator[Call | Sleep | Emit[T], httpx.Response | None, None]
"""An operation that hands out pages as it goes."""


@dataclass
class ClientState:
    """What a client learns from the node and reuses on later calls.

    Once a 413 told us the node's body limit, later appends are split before
    sending instead of being refused first.
    """

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    max_request_bytes: int | None = None


def request(call: Call, state: ClientState) -> Op[httpx.Response]:
    """Send ``call``; retry 429 and lost connections (when safe); raise other errors.

    A connection that was never made is retried for every request; one lost
    after the request went out only if ``call.safe_to_repeat``.
    """
    policy = state.retry
    started = time.monotonic()
    busy = lost = 0
    while True:
        try:
            reply = yield call
        except ConnectionFailed as exc:
            if exc.request_sent and not call.safe_to_repeat:
                raise ConnectionFailed(
                    f"{exc.message}; the request may or may not have taken effect on the node"
                    " and was not resent"
                ) from exc
            delay = backoff_delay(lost, None, policy)
            lost += 1
            if lost >= policy.connection_attempts or _past(started, delay, policy):
                raise
        else:
            assert reply is not None
            if reply.is_success:
                return reply
            error = error_from_response(reply)
            if not isinstance(error, BusyError):
                raise error
            delay = backoff_delay(busy, error.retry_after, policy)
            busy += 1
            if busy >= policy.max_attempts or _past(started, delay, policy):
                raise error
        yield Sleep(delay)


def _past(started: float, delay: float, policy: RetryPolicy) -> bool:
    return time.monotonic() + delay - started > policy.max_elapsed


def request_json(call: Call, state: ClientState) -> Op[Any]:
    reply = yield from request(call, state)
    return reply.json() if reply.content else None


def topics(state: ClientState) -> Op[list[str]]:
    """The node's topic names."""
    body = yield from request_json(Call("GET", TOPICS_PATH), state)
    return [str(t["name"]) for t in body.get("topics", [])]


def topic(state: ClientState, topic: str) -> Op[TopicInfo]:
    """Partition spans and bytes of a topic."""
    body = yield from request_json(Call("GET", TOPIC_PATH.format(topic=quote_name(topic))), state)
    return parse_topic_info(body)


def append(
    state: ClientState,
    topic: str,
    partition: str,
    data: pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]],
) -> Op[Span]:
    """Append rows (a table, a batch or row dicts); returns the indexes they got.

    The rows go in order, split by rows while the node answers 413.

    Parts are sent one after another, so they land in order; the returned span
    runs from the first part's start to the last part's end (other writers of
    the same partition may interleave between parts). If a later part fails,
    ``PartialAppendError`` says which rows were written.
    """
    table = to_table(data)
    if table.num_rows == 0:
        raise PlateauClientError(None, "nothing to append: the table has no rows")
    path = APPEND_PATH.format(topic=quote_name(topic), partition=quote_name(partition))
    pending: deque[pa.Table] = deque([table])
    first: Span | None = None
    last: Span | None = None
    rows_done = 0
    while pending:
        part = pending.popleft()
        body = encode_table(part)
        limit = state.max_request_bytes
        if limit is not None and len(body) > limit and part.num_rows > 1:
            pending.extendleft(reversed(split_rows(part, parts_needed(len(body), limit))))
            continue
        call = Call(
            "POST", path, headers={"content-type": ARROW_FILE}, content=body, safe_to_repeat=False
        )
        try:
            reply = yield from request_json(call, state)
        except PayloadTooLargeError as exc:
            if exc.max_bytes:
                state.max_request_bytes = exc.max_bytes
            if part.num_rows <= 1:
                raise RecordTooLargeError(
                    413,
                    f"a single row encodes to {len(body)} bytes, over the node's limit"
                    f" of {exc.max_bytes or 'unknown'} bytes",
                    exc.code,
                ) from exc
            pending.extendleft(reversed(split_rows(part, parts_needed(len(body), exc.max_bytes))))
            continue
        except PlateauClientError as exc:
            if first is not None and last is not None:
                raise PartialAppendError(exc, Span(first.start, last.end), rows_done) from exc
            raise
        span = parse_span(reply.get("span") if isinstance(reply, Mapping) else None)
        if span is None:
            raise PlateauClientError(None, f"node sent no span for the append: {reply!r}")
        first = first or span
        last = span
        rows_done += part.num_rows
    assert first is not None and last is not None
    return Span(first.start, last.end)


def read(
    state: ClientState,
    topic: str,
    partition: str,
    start: int = 0,
    page_size: int = DEFAULT_PAGE_SIZE,
    time_start: TimeBound = None,
    time_end: TimeBound = None,
    focus: DataFocus | None = None,
) -> Op[PartitionPage]:
    """One page of a partition from index ``start``: ``(table, span, status)``."""
    params = [("start", str(start)), ("page_size", str(page_size))]
    params += time_params(time_start, time_end) + focus_params(focus)
    path = READ_PARTITION_PATH.format(topic=quote_name(topic), partition=quote_name(partition))
    # pyarrow decodes both codecs: a page stored compressed comes as stored (stored reads)
    headers = {"accept": ARROW_FILE, ACCEPT_ARROW_COMPRESSION_HEADER: READ_CODECS}
    call = Call("GET", path, params=params, headers=headers)
    reply = yield from request(call, state)
    return parse_partition_page(reply, start)


def read_all(
    state: ClientState,
    topic: str,
    partition: str,
    start: int = 0,
    page_size: int = DEFAULT_PAGE_SIZE,
    time_start: TimeBound = None,
    time_end: TimeBound = None,
    focus: DataFocus | None = None,
) -> StreamOp[PartitionPage]:
    """Pages from ``start`` up to the partition's end at the time of reading (pages with rows
    only)."""
    while True:
        page = yield from read(
            state, topic, partition, start, page_size, time_start, time_end, focus
        )
        if page.table.num_rows:
            yield Emit(page)
        if page.status == RecordStatus.ALL or page.span is None or page.span.end <= start:
            return
        start = page.span.end


def iterate(
    state: ClientState,
    topic: str,
    cursor: Mapping[str, int] | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    order: str = "asc",
    partition_filter: Sequence[str] | None = None,
    time_start: TimeBound = None,
    time_end: TimeBound = None,
    follow: bool = False,
    poll_interval: float = 1.0,
    focus: DataFocus | None = None,
) -> StreamOp[TopicPage]:
    """Topic pages across partitions, ``(table, cursor, status)``: follows the topic cursor
    until status ``All``; with ``follow``, keeps polling after it.

    Without ``follow`` every page is handed out, the last one (status ``All``,
    maybe empty) carrying the final cursor; with ``follow`` only pages with rows.
    """
    params = [("page_size", str(page_size)), ("order", order)]
    params += [("partition_filter", p) for p in partition_filter or ()]
    params += time_params(time_start, time_end) + focus_params(focus)
    path = ITERATE_PATH.format(topic=quote_name(topic))
    position = dict(cursor or {})
    while True:
        call = Call(
            "POST",
            path,
            params=params,
            headers={"accept": ARROW_FILE, "content-type": JSON},
            json=position,
        )
        reply = yield from request(call, state)
        page = parse_topic_page(reply, position)
        position = page.cursor
        if page.table.num_rows or not follow:
            yield Emit(page)
        if page.status == RecordStatus.ALL:
            if not follow:
                return
            yield Sleep(poll_interval)


def admin(
    state: ClientState,
    method: str,
    path: str,
    body: Any = None,
    params: Sequence[tuple[str, str]] = (),
) -> Op[dict[str, Any] | None]:
    call = Call(
        method,
        path,
        params=params,
        headers={"content-type": JSON} if body is not None else {},
        json=body,
        safe_to_repeat=method in ("GET", "PUT"),
    )
    reply = yield from request_json(call, state)
    return reply if isinstance(reply, dict) else None


def admin_as(
    model: type[M],
    state: ClientState,
    method: str,
    path: str,
    body: Any = None,
    params: Sequence[tuple[str, str]] = (),
) -> Op[M]:
    """An admin call whose reply is ``model`` (``plateau.protocol.replies``), parsed."""
    reply = yield from admin(state, method, path, body, params)
    return parse_reply(model, reply)


def put_topic(
    state: ClientState,
    topic: str,
    *,
    body: Mapping[str, Any] | None = None,
    **settings: Unpack[TopicSettings],
) -> Op[TopicPutReply]:
    """Create or update a topic; only the settings given change (idempotent).

    ``owner`` (kind, namespace, name, uid) claims the topic; another owner's
    claim is refused with ``ConflictError`` (``reason="OwnerConflict"``)
    unless ``adopt``. The reply carries ``owner``, ``claim`` and
    ``previous_owner`` beside the resolved config. ``body`` is a request body
    as the node takes it (``TopicConfigRequest``); the settings given override it.
    """
    request = {**(body or {}), **topic_request(settings)}
    path = ADMIN_TOPIC_PATH.format(topic=quote_name(topic))
    return (yield from admin_as(TopicPutReply, state, "PUT", path, request))


def get_topic(state: ClientState, topic: str) -> Op[TopicStatus]:
    """A topic's configuration and usage."""
    path = ADMIN_TOPIC_PATH.format(topic=quote_name(topic))
    return (yield from admin_as(TopicStatus, state, "GET", path))


def delete_topic(state: ClientState, topic: str, owner_uid: str | None = None) -> Op[None]:
    """Delete a topic and all its data; with ``owner_uid``, only if that owner holds it
    (else ``ConflictError``, ``reason="OwnerConflict"``, nothing deleted)."""
    params = [] if owner_uid is None else [("owner_uid", owner_uid)]
    path = ADMIN_TOPIC_PATH.format(topic=quote_name(topic))
    yield from admin(state, "DELETE", path, params=params)


def node_info(state: ClientState, topics: bool = False) -> Op[NodeInfo]:
    """The node's capacity, allocated and used bytes; with ``topics``, every topic's usage
    too (``topic_usage``: name to the ``usage`` that ``get_topic`` gives), in one call."""
    params = [("topics", "true")] if topics else []
    return (yield from admin_as(NodeInfo, state, "GET", ADMIN_NODE_PATH, params=params))
