"""The client's operation core driven by scripted replies: no network, no node.

The replies stand in for a node only to exercise the client's decisions
(split, retry, give up); the integration tests run the same paths against a
real node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pyarrow as pa
import pytest

from plateau.client import operations as ops
from plateau.client.errors import (
    BusyError,
    ConnectionFailed,
    NotFoundError,
    PartialAppendError,
    RecordTooLargeError,
)
from plateau.client.wire import RetryPolicy, decode_table, encode_table
from plateau.protocol import (
    ARROW_FILE,
    ITERATION_STATUS_HEADER,
    MAX_REQUEST_SIZE_HEADER,
    RETRY_AFTER_HEADER,
)
from plateau.protocol.values import RecordStatus, Span

Responder = Callable[[ops.Call], httpx.Response]


def drive(op: Any, responder: Responder) -> tuple[Any, list[float], list[Any]]:
    """Run an operation to the end: (result, sleeps, emitted pages)."""
    sleeps: list[float] = []
    emitted: list[Any] = []
    reply: httpx.Response | None = None
    failure: ConnectionFailed | None = None
    while True:
        try:
            step = op.throw(failure) if failure else op.send(reply)
        except StopIteration as stop:
            return stop.value, sleeps, emitted
        reply, failure = None, None
        if isinstance(step, ops.Call):
            try:
                reply = responder(step)
            except ConnectionFailed as exc:
                failure = exc
        elif isinstance(step, ops.Sleep):
            sleeps.append(step.seconds)
        else:
            emitted.append(step.value)


class FakePartition:
    """Accepts bodies up to ``limit`` bytes and assigns dense indexes, like a node would."""

    def __init__(self, limit: int | None = None, header: bool = True) -> None:
        self.limit = limit
        self.header = header
        self.rows: list[int] = []
        self.requests = 0
        self.refused = 0

    def __call__(self, call: ops.Call) -> httpx.Response:
        self.requests += 1
        assert call.content is not None
        assert call.headers["content-type"] == ARROW_FILE
        assert not call.safe_to_repeat
        if self.limit is not None and len(call.content) > self.limit:
            self.refused += 1
            headers = {MAX_REQUEST_SIZE_HEADER: str(self.limit)} if self.header else {}
            return httpx.Response(413, json={"message": "too large", "code": "x"}, headers=headers)
        table = decode_table(call.content, ARROW_FILE)
        start = len(self.rows)
        self.rows.extend(table.column("v").to_pylist())
        return httpx.Response(200, json={"span": {"start": start, "end": len(self.rows)}})


def table(rows: int, width: int = 100) -> pa.Table:
    return pa.table({"v": list(range(rows)), "pad": ["x" * width] * rows})


def state(**retry: Any) -> ops.ClientState:
    return ops.ClientState(retry=RetryPolicy(**retry))


def test_append_without_limit_sends_once() -> None:
    node = FakePartition()
    span, _, _ = drive(ops.append(state(), "t", "p", table(10)), node)
    assert span == Span(0, 10)
    assert node.requests == 1 and node.rows == list(range(10))


@pytest.mark.parametrize("header", [True, False])
def test_append_splits_on_413_in_order_exactly_once(header: bool) -> None:
    node = FakePartition(limit=20_000, header=header)
    st = state()
    span, _, _ = drive(ops.append(st, "t", "p", table(1000)), node)
    assert span == Span(0, 1000)
    assert node.rows == list(range(1000))
    assert st.max_request_bytes == (20_000 if header else None)


def test_learned_limit_splits_before_sending() -> None:
    node = FakePartition(limit=20_000)
    st = state()
    drive(ops.append(st, "t", "p", table(1000)), node)
    assert node.refused > 0
    refused = node.refused
    span, _, _ = drive(ops.append(st, "t", "p", table(1000)), node)
    assert span == Span(1000, 2000)
    assert node.rows[1000:] == list(range(1000))
    assert node.refused == refused  # every part of the second append fit the first time


def test_single_row_too_large_is_a_clear_error() -> None:
    node = FakePartition(limit=1000)
    with pytest.raises(RecordTooLargeError, match="single row"):
        drive(ops.append(state(), "t", "p", table(4, width=5000)), node)
    assert node.rows == []


def test_failure_after_some_parts_reports_what_was_written() -> None:
    inner = FakePartition(limit=20_000)
    calls = {"ok": 0}

    def node(call: ops.Call) -> httpx.Response:
        reply = inner(call)
        if reply.status_code == 200:
            calls["ok"] += 1
            if calls["ok"] == 3:
                inner.rows = inner.rows[: -len(decode_table(call.content or b"", ARROW_FILE))]
                return httpx.Response(404, json={"message": "topic deleted", "code": "not_found"})
        return reply

    with pytest.raises(PartialAppendError) as info:
        drive(ops.append(state(), "t", "p", table(1000)), node)
    err = info.value
    assert isinstance(err.cause, NotFoundError)
    assert err.written.start == 0 and err.rows_written == len(inner.rows)
    assert inner.rows == list(range(err.rows_written))
    assert "topic deleted" in str(err)


def test_busy_is_retried_with_backoff_at_least_retry_after() -> None:
    node = FakePartition()
    refusals = iter([2, 1])

    def busy_then_ok(call: ops.Call) -> httpx.Response:
        if next(refusals, 0):
            busy = {RETRY_AFTER_HEADER: "0.2"}
            return httpx.Response(429, json={"message": "busy"}, headers=busy)
        return node(call)

    span, sleeps, _ = drive(ops.append(state(), "t", "p", table(5)), busy_then_ok)
    assert span == Span(0, 5)
    assert len(sleeps) == 2 and all(s >= 0.2 for s in sleeps)


def test_busy_gives_up_after_max_attempts() -> None:
    def always_busy(call: ops.Call) -> httpx.Response:
        return httpx.Response(429, json={"message": "writer busy", "code": "busy"})

    with pytest.raises(BusyError, match="writer busy") as info:
        drive(ops.append(state(max_attempts=4), "t", "p", table(5)), always_busy)
    assert info.value.status == 429


def test_busy_gives_up_when_out_of_time() -> None:
    def always_busy(call: ops.Call) -> httpx.Response:
        return httpx.Response(429, json={"message": "busy"}, headers={RETRY_AFTER_HEADER: "30"})

    with pytest.raises(BusyError):
        drive(ops.append(state(max_elapsed=10), "t", "p", table(5)), always_busy)


def test_append_is_not_resent_after_a_lost_connection() -> None:
    sent = []

    def broken(call: ops.Call) -> httpx.Response:
        sent.append(call)
        raise ConnectionFailed("connection reset")

    with pytest.raises(ConnectionFailed, match="may or may not have taken effect"):
        drive(ops.append(state(), "t", "p", table(5)), broken)
    assert len(sent) == 1


def test_append_is_retried_when_no_connection_was_made() -> None:
    node = FakePartition()
    refused = iter([True, True])

    def down_then_up(call: ops.Call) -> httpx.Response:
        if next(refused, False):
            raise ConnectionFailed("connection refused", request_sent=False)
        return node(call)

    span, sleeps, _ = drive(ops.append(state(), "t", "p", table(5)), down_then_up)
    assert span == Span(0, 5) and len(sleeps) == 2 and node.rows == list(range(5))


def test_unreachable_node_is_reported_after_few_attempts() -> None:
    attempts = []

    def down(call: ops.Call) -> httpx.Response:
        attempts.append(call)
        raise ConnectionFailed("connection refused", request_sent=False)

    with pytest.raises(ConnectionFailed, match="refused"):
        drive(ops.topics(state(connection_attempts=3)), down)
    assert len(attempts) == 3


def test_reads_are_resent_after_a_lost_connection() -> None:
    attempts = []

    def flaky(call: ops.Call) -> httpx.Response:
        attempts.append(call)
        if len(attempts) < 3:
            raise ConnectionFailed("refused")
        body = encode_table(pa.table({"v": [1, 2]}))
        status = '{"status": "All", "span": {"start": 5, "end": 7}}'
        return httpx.Response(
            200, content=body, headers={"content-type": ARROW_FILE, ITERATION_STATUS_HEADER: status}
        )

    page, sleeps, _ = drive(ops.read(state(), "t", "p", 5, 100), flaky)
    assert page.span == Span(5, 7) and page.status == RecordStatus.ALL
    assert page.table.column("v").to_pylist() == [1, 2]
    assert len(sleeps) == 2
    assert dict(attempts[0].params) == {"start": "5", "page_size": "100"}


def test_empty_table_is_refused_locally() -> None:
    with pytest.raises(Exception, match="no rows"):
        drive(ops.append(state(), "t", "p", table(0)), FakePartition())


def arrow_reply(rows: list[int], status: dict[str, Any]) -> httpx.Response:
    import json

    body = encode_table(pa.table({"v": pa.array(rows, pa.int64())}))
    headers = {"content-type": ARROW_FILE, ITERATION_STATUS_HEADER: json.dumps(status)}
    return httpx.Response(200, content=body, headers=headers)


def test_read_all_follows_spans_until_all() -> None:
    def pages(call: ops.Call) -> httpx.Response:
        start = int(dict(call.params)["start"])
        end = min(start + 3, 7)
        status = "All" if end == 7 else "RecordLimited"
        span = {"start": start, "end": end}
        return arrow_reply(list(range(start, end)), {"status": status, "span": span})

    _, _, emitted = drive(ops.read_all(state(), "t", "p", 0, 3), pages)
    assert [list(p.span.__dict__.values()) for p in emitted] == [[0, 3], [3, 6], [6, 7]]
    assert [v for p in emitted for v in p.table.column("v").to_pylist()] == list(range(7))


def test_iterate_follows_the_cursor_and_stops_at_all() -> None:
    seen = []

    def pages(call: ops.Call) -> httpx.Response:
        cursor = dict(call.json)
        seen.append(cursor)
        if not cursor:
            return arrow_reply([1, 2], {"status": "RecordLimited", "next": {"a": 2}})
        return arrow_reply([3], {"status": "All", "next": {"a": 2, "b": 1}})

    op = ops.iterate(state(), "t", None, 2, partition_filter=["a", "b"])
    _, _, emitted = drive(op, pages)
    assert seen == [{}, {"a": 2}]
    assert [p.cursor for p in emitted] == [{"a": 2}, {"a": 2, "b": 1}]
    assert emitted[-1].status == RecordStatus.ALL


def test_iterate_follow_polls_and_emits_only_rows() -> None:
    replies = iter(
        [
            arrow_reply([1], {"status": "All", "next": {"a": 1}}),
            arrow_reply([], {"status": "All", "next": {"a": 1}}),
            arrow_reply([2], {"status": "All", "next": {"a": 2}}),
        ]
    )
    op = ops.iterate(state(), "t", {"a": 0}, 10, follow=True, poll_interval=0.5)
    emitted: list[Any] = []
    sleeps: list[float] = []
    reply = None
    while len(emitted) < 2:
        step = op.send(reply)
        reply = None
        if isinstance(step, ops.Call):
            reply = next(replies)
        elif isinstance(step, ops.Sleep):
            sleeps.append(step.seconds)
        else:
            emitted.append(step.value)
    assert [p.table.column("v").to_pylist() for p in emitted] == [[1], [2]]
    assert sleeps == [0.5, 0.5]


def test_error_reply_carries_the_nodes_message() -> None:
    def missing(call: ops.Call) -> httpx.Response:
        return httpx.Response(404, json={"message": "topic 'x' not found", "code": "not_found"})

    with pytest.raises(NotFoundError) as info:
        drive(ops.topic(state(), "x"), missing)
    assert str(info.value) == "node answered 404: topic 'x' not found"
    assert info.value.code == "not_found"
