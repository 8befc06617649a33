"""Pure pieces of the wire protocol: encoding, decoding, splitting, backoff.

Nothing here does I/O, so it is shared by the sync and async clients and
unit-tested without a node.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

import httpx
import pyarrow as pa
from pydantic import BaseModel, ValidationError

from plateau.client.errors import PlateauClientError
from plateau.protocol import (
    ARCHIVED_RECORDS_HEADER,
    ARROW_FILE,
    ARROW_STREAM,
    ITERATION_STATUS_HEADER,
    JSON,
    SPAN_END_HEADER,
    SPAN_START_HEADER,
)
from plateau.protocol.focus import DataFocus
from plateau.protocol.values import RecordStatus, Span

TimeBound = datetime | int | str | None
"""A ``time.start``/``time.end`` bound: datetime, epoch milliseconds, or RFC 3339 text."""


class _PartitionFields(NamedTuple):
    table: pa.Table
    span: Span | None
    status: RecordStatus


class PartitionPage(_PartitionFields):
    """One page of a partition read; unpacks as ``table, span, status``.

    ``span`` is the range of indexes the page covers (``None`` when nothing was
    left to read); ``span.end`` is where the next read continues. ``archived``:
    how many of its records the node read from its object-storage archive (no
    longer on its disk); an attribute, not a tuple field, so that unpacking
    three values keeps working.
    """

    archived: int = 0

    def __new__(
        cls, table: pa.Table, span: Span | None, status: RecordStatus, archived: int = 0
    ) -> PartitionPage:
        page = super().__new__(cls, table, span, status)
        page.archived = archived
        return page


class _TopicFields(NamedTuple):
    table: pa.Table
    cursor: dict[str, int]
    status: RecordStatus


class TopicPage(_TopicFields):
    """One page of topic iteration; ``cursor`` is what to send back to continue.

    ``archived``: how many of its records came from the node's archive (an attribute,
    as on ``PartitionPage``)."""

    archived: int = 0

    def __new__(
        cls, table: pa.Table, cursor: dict[str, int], status: RecordStatus, archived: int = 0
    ) -> TopicPage:
        page = super().__new__(cls, table, cursor, status)
        page.archived = archived
        return page


@dataclass(frozen=True)
class TopicInfo:
    """``GET /topic/{t}``: per-partition spans (end-exclusive) and bytes on disk."""

    partitions: dict[str, Span]
    bytes: int


@dataclass(frozen=True)
class RetryPolicy:
    """How long the client keeps retrying a busy node (429) or a lost connection.

    Delays grow exponentially from ``base_delay`` up to ``max_delay``, never
    below the node's ``Retry-After``, with jitter so that many writers refused
    at once do not come back at once. A busy node is retried up to
    ``max_attempts`` tries, a failed connection up to ``connection_attempts``
    (few: an unreachable node should be reported quickly), and never past
    ``max_elapsed`` seconds. A connection lost after the request was sent is
    retried only for requests that are safe to repeat (never an append).
    """

    max_attempts: int = 10
    connection_attempts: int = 3
    base_delay: float = 0.05
    max_delay: float = 5.0
    max_elapsed: float = 60.0


def backoff_delay(
    attempt: int,
    retry_after: float | None,
    policy: RetryPolicy,
    rand: Callable[[], float] = random.random,
) -> float:
    """Delay before retry number ``attempt + 1`` ("equal jitter", floored at Retry-After)."""
    ceiling = min(policy.max_delay, policy.base_delay * (2**attempt))
    jittered = ceiling / 2 + rand() * ceiling / 2
    return float(max(jittered, retry_after or 0.0))


def quote_name(name: str) -> str:
    """Escape a topic or partition name for a URL path; the node validates the name itself."""
    from urllib.parse import quote

    if not name:
        raise PlateauClientError(None, "topic and partition names must not be empty")
    return quote(name, safe="")


def format_time(bound: TimeBound) -> str | None:
    if bound is None:
        return None
    if isinstance(bound, datetime):
        if bound.tzinfo is None:
            bound = bound.replace(tzinfo=UTC)
        return bound.isoformat().replace("+00:00", "Z")
    return str(bound)


def time_params(start: TimeBound, end: TimeBound) -> list[tuple[str, str]]:
    params = []
    for name, bound in (("time.start", start), ("time.end", end)):
        text = format_time(bound)
        if text is not None:
            params.append((name, text))
    return params


def to_table(data: pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]]) -> pa.Table:
    """Accept what callers naturally have: a table, a batch, or a list of row dicts."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    return rows_to_table(list(data))


def rows_to_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Columns are the union of all rows' keys (``from_pylist`` keeps only the first row's)."""
    names = list(dict.fromkeys(key for row in rows for key in row))
    return pa.table({name: [row.get(name) for row in rows] for name in names})


def encode_table(table: pa.Table) -> bytes:
    """An Arrow IPC file: the format the node reads fastest."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def decode_table(body: bytes, content_type: str) -> pa.Table:
    """Decode an Arrow file, Arrow stream or JSON records body into a table."""
    kind = content_type.split(";")[0].strip().lower()
    if not body:
        return pa.table({})
    try:
        if kind == ARROW_STREAM:
            return pa.ipc.open_stream(pa.py_buffer(body)).read_all()
        if kind == ARROW_FILE or body[:6] == b"ARROW1":
            return pa.ipc.open_file(pa.py_buffer(body)).read_all()
    except pa.ArrowException as exc:
        raise PlateauClientError(None, f"node sent a malformed Arrow body: {exc}") from exc
    return rows_to_table(_json_records(json.loads(body)))


def _json_records(body: Any) -> list[dict[str, Any]]:
    """The records of a JSON reply: plateau's bare array, or the node's envelope object."""
    if isinstance(body, list):
        return body
    if isinstance(body, Mapping):
        return list(body.get("records") or [])
    raise PlateauClientError(None, f"node sent JSON records of an unknown shape: {type(body)}")


def split_rows(table: pa.Table, parts: int) -> list[pa.Table]:
    """Split into ``parts`` contiguous slices of nearly equal row counts (zero-copy)."""
    parts = max(1, min(parts, table.num_rows))
    size, extra = divmod(table.num_rows, parts)
    slices, offset = [], 0
    for i in range(parts):
        length = size + (1 if i < extra else 0)
        slices.append(table.slice(offset, length))
        offset += length
    return slices


def parts_needed(body_bytes: int, max_bytes: int | None) -> int:
    """How many parts to split a body into so each fits ``max_bytes`` with some headroom.

    Without a known limit, halve. The headroom covers the schema and footer
    each part repeats; a part that still does not fit is split again.
    """
    if not max_bytes or max_bytes <= 0:
        return 2
    return max(2, math.ceil(body_bytes / (max_bytes * 0.9)))


def parse_span(value: Any) -> Span | None:
    if isinstance(value, Mapping) and "start" in value and "end" in value:
        return Span(int(value["start"]), int(value["end"]))
    return None


def parse_status(value: Any) -> RecordStatus:
    try:
        return RecordStatus(value)
    except ValueError as exc:
        raise PlateauClientError(None, f"node sent an unknown iteration status {value!r}") from exc


def _status_header(response: httpx.Response) -> Any:
    raw = response.headers.get(ITERATION_STATUS_HEADER)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw  # a bare status name


def parse_partition_page(response: httpx.Response, start: int) -> PartitionPage:
    """Table, span and status of ``GET .../records`` in either Arrow or JSON form.

    The span comes from the JSON body, the status header or the
    span-start/span-end headers; if the node sent none of them the
    span is inferred from the row count (exact without a time filter).
    """
    content_type = response.headers.get("content-type", "")
    span: Span | None = None
    status: Any = None
    header = _status_header(response)
    if isinstance(header, Mapping):
        status, span = header.get("status"), parse_span(header.get("span"))
    else:
        status = header
    if content_type.startswith(JSON):
        body = response.json()
        table = rows_to_table(_json_records(body))
        if isinstance(body, Mapping):  # the envelope carries them too
            span, status = parse_span(body.get("span")) or span, body.get("status") or status
    else:
        table = decode_table(response.content, content_type)
    if span is None:
        lo, hi = response.headers.get(SPAN_START_HEADER), response.headers.get(SPAN_END_HEADER)
        if lo is not None and hi is not None:
            span = Span(int(lo), int(hi))
    if span is None and table.num_rows:
        span = Span(start, start + table.num_rows)
    if isinstance(status, Mapping):
        status = status.get("status")
    status = parse_status(status or RecordStatus.ALL)
    return PartitionPage(table, span, status, _archived_records(response))


def parse_topic_page(response: httpx.Response, cursor: Mapping[str, int]) -> TopicPage:
    """Table, next cursor and status of ``POST /topic/{t}/records``."""
    content_type = response.headers.get("content-type", "")
    header = _status_header(response)
    if content_type.startswith(JSON):
        body = response.json()
        table = rows_to_table(_json_records(body))
        if isinstance(body, Mapping):  # the envelope carries both halves, as the header does
            header = {"status": body.get("status"), "next": body.get("next")}
    else:
        table = decode_table(response.content, content_type)
    if isinstance(header, Mapping):
        status, nxt = header.get("status"), header.get("next")
    else:
        status, nxt = header, None
    next_cursor = {str(k): int(v) for k, v in (nxt if nxt is not None else cursor).items()}
    status = parse_status(status or RecordStatus.ALL)
    return TopicPage(table, next_cursor, status, _archived_records(response))


def _archived_records(response: httpx.Response) -> int:
    """How many of a read reply's records came from the node's archive (header absent: 0)."""
    raw = response.headers.get(ARCHIVED_RECORDS_HEADER)
    try:
        return int(raw) if raw is not None else 0
    except ValueError as exc:
        message = f"node sent a bad {ARCHIVED_RECORDS_HEADER}: {raw!r}"
        raise PlateauClientError(None, message) from exc


Reply = TypeVar("Reply", bound=BaseModel)


def parse_reply(model: type[Reply], body: Any) -> Reply:
    """A JSON reply as its ``plateau.protocol.replies`` model: callers read attributes, and
    a reply of another shape fails here, saying which, not later at a missing key.

    Fields this client does not know are ignored (the request models forbid them): a
    newer node may add a reply field without breaking an older client or operator."""
    try:
        return model.model_validate(body, extra="ignore")
    except ValidationError as exc:
        message = f"node sent a {model.__name__} of another shape: {exc}"
        raise PlateauClientError(None, message) from exc


def parse_topic_info(body: Mapping[str, Any]) -> TopicInfo:
    partitions = {}
    for name, value in (body.get("partitions") or {}).items():
        span = parse_span(value)
        if span is not None:
            partitions[str(name)] = span
    return TopicInfo(partitions, int(body.get("bytes") or 0))


def focus_params(focus: DataFocus | None) -> list[tuple[str, str]]:
    """A data focus as query parameters, in the form plateau's own clients send (serde_qs)."""
    if focus is None or not focus.active:
        return []
    params = [("dataset[]", path) for path in focus.dataset]
    params += [("dataset.exclude[]", path) for path in focus.exclude]
    if focus.separator is not None:
        params.append(("dataset.separator", focus.separator))
    if focus.max_bytes is not None:
        params.append(("dataset.max_bytes", str(focus.max_bytes)))
    return params
