from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pyarrow as pa
import pytest

from plateau.client.errors import (
    AuthError,
    BusyError,
    ConflictError,
    PayloadTooLargeError,
    PlateauClientError,
    UnavailableError,
    error_from_response,
)
from plateau.client.topic_settings import topic_request
from plateau.client.wire import (
    RetryPolicy,
    backoff_delay,
    decode_table,
    encode_table,
    format_time,
    parse_partition_page,
    parse_topic_info,
    parse_topic_page,
    parts_needed,
    quote_name,
    rows_to_table,
    split_rows,
)
from plateau.protocol import (
    ARROW_FILE,
    ARROW_STREAM,
    ITERATION_STATUS_HEADER,
    JSON,
    MAX_REQUEST_SIZE_HEADER,
    RETRY_AFTER_HEADER,
    SPAN_END_HEADER,
    SPAN_START_HEADER,
)
from plateau.protocol.values import RecordStatus, Span


def test_encode_decode_round_trip_nested() -> None:
    table = pa.table(
        {
            "a": [1, None, 3],
            "s": [{"x": 1, "y": "a"}, None, {"x": 3, "y": "c"}],
            "l": [[1, 2], [], None],
        }
    )
    assert decode_table(encode_table(table), ARROW_FILE).equals(table)


def test_decode_stream_and_json() -> None:
    table = pa.table({"a": [1, 2]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    assert decode_table(sink.getvalue().to_pybytes(), ARROW_STREAM).equals(table)
    body = json.dumps({"records": [{"a": 1}, {"a": 2, "b": "x"}]}).encode()
    assert decode_table(body, JSON).to_pylist() == [
        {"a": 1, "b": None},
        {"a": 2, "b": "x"},
    ]
    assert decode_table(b"", ARROW_FILE).num_rows == 0


def test_malformed_arrow_is_a_client_error() -> None:
    with pytest.raises(PlateauClientError, match="malformed Arrow"):
        decode_table(b"ARROW1 but not really", ARROW_FILE)


def test_rows_to_table_keeps_keys_of_every_row() -> None:
    assert rows_to_table([{"a": 1}, {"b": 2}]).column_names == ["a", "b"]


@pytest.mark.parametrize("rows,parts", [(10, 3), (10, 10), (10, 50), (1, 2), (7, 1)])
def test_split_rows_is_contiguous_and_complete(rows: int, parts: int) -> None:
    table = pa.table({"v": list(range(rows))})
    pieces = split_rows(table, parts)
    assert len(pieces) == min(parts, rows)
    assert [v for p in pieces for v in p.column("v").to_pylist()] == list(range(rows))
    sizes = [p.num_rows for p in pieces]
    assert max(sizes) - min(sizes) <= 1


def test_parts_needed() -> None:
    assert parts_needed(1000, None) == 2
    assert parts_needed(1000, 0) == 2
    assert parts_needed(1000, 900) == 2
    assert parts_needed(10_000, 1000) == 12  # 10% headroom per part
    assert parts_needed(100, 1000) == 2  # 413 although it fits: still split


def test_backoff_grows_caps_and_respects_retry_after() -> None:
    policy = RetryPolicy(base_delay=0.1, max_delay=1.0)
    low = [backoff_delay(n, None, policy, rand=lambda: 0.0) for n in range(8)]
    high = [backoff_delay(n, None, policy, rand=lambda: 1.0) for n in range(8)]
    assert low[:3] == pytest.approx([0.05, 0.1, 0.2])
    assert high[:3] == pytest.approx([0.1, 0.2, 0.4])
    assert max(high) == pytest.approx(1.0)
    assert backoff_delay(0, 2.0, policy) == 2.0


def test_format_time() -> None:
    assert format_time(None) is None
    assert format_time(1700000000000) == "1700000000000"
    assert format_time(datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)) == "2024-01-02T03:04:05Z"
    assert format_time(datetime(2024, 1, 2, 3, 4, 5)) == "2024-01-02T03:04:05Z"
    plus_one = timezone(timedelta(hours=1))
    assert format_time(datetime(2024, 1, 2, tzinfo=plus_one)) == "2024-01-02T00:00:00+01:00"


def test_quote_name_escapes_path_characters() -> None:
    assert quote_name("a/../b") == "a%2F..%2Fb"
    with pytest.raises(PlateauClientError):
        quote_name("")


def test_topic_request_has_only_given_fields() -> None:
    assert topic_request({}) == {}
    assert topic_request({"partitions": 3, "max_bytes": 10, "segment_format": None}) == {
        "partitions": 3,
        "retention": {"max_bytes": 10},
    }
    assert topic_request({"max_age_seconds": None}) == {"retention": {"max_age_seconds": None}}
    assert topic_request({"segment_format": "arrow", "segment_max_age_seconds": 1.5}) == {
        "segment": {"format": "arrow", "max_age_seconds": 1.5}
    }
    owner = {"kind": "PlateauTopic", "namespace": "n", "name": "t", "uid": "u"}
    assert topic_request({"owner": owner, "adopt": True}) == {"owner": owner, "adopt": True}


def test_topic_request_refuses_unknown_settings() -> None:
    with pytest.raises(TypeError, match="partitionz"):
        topic_request({"partitionz": 3})  # type: ignore[typeddict-unknown-key]


def _arrow(table: pa.Table, headers: dict[str, str]) -> httpx.Response:
    return httpx.Response(
        200, content=encode_table(table), headers={"content-type": ARROW_FILE, **headers}
    )


def test_partition_page_from_headers() -> None:
    table = pa.table({"v": [1, 2]})
    status = json.dumps({"status": "RecordLimited", "span": {"start": 4, "end": 6}})
    page = parse_partition_page(_arrow(table, {ITERATION_STATUS_HEADER: status}), 4)
    assert page.span == Span(4, 6) and page.status == RecordStatus.RECORD_LIMITED
    headers = {ITERATION_STATUS_HEADER: "All", SPAN_START_HEADER: "4", SPAN_END_HEADER: "9"}
    page = parse_partition_page(_arrow(table, headers), 4)
    assert page.span == Span(4, 9) and page.status == RecordStatus.ALL
    page = parse_partition_page(_arrow(table, {}), 10)  # nothing said: inferred from rows
    assert page.span == Span(10, 12)


def test_partition_page_from_json() -> None:
    body: dict[str, object] = {"span": None, "status": "All", "records": []}
    page = parse_partition_page(httpx.Response(200, json=body), 0)
    assert page.span is None and page.table.num_rows == 0


def test_topic_page() -> None:
    status = json.dumps({"status": "SchemaChange", "next": {"0": 3}})
    page = parse_topic_page(_arrow(pa.table({"v": [1]}), {ITERATION_STATUS_HEADER: status}), {})
    assert page.cursor == {"0": 3} and page.status == RecordStatus.SCHEMA_CHANGE
    with pytest.raises(PlateauClientError, match="unknown iteration status"):
        parse_topic_page(_arrow(pa.table({"v": [1]}), {ITERATION_STATUS_HEADER: "Nope"}), {})


def test_topic_info() -> None:
    info = parse_topic_info({"partitions": {"a": {"start": 0, "end": 3}}, "bytes": 7})
    assert info.partitions == {"a": Span(0, 3)} and info.bytes == 7


@pytest.mark.parametrize(
    "status,cls",
    [(401, AuthError), (409, ConflictError), (507, UnavailableError), (500, PlateauClientError)],
)
def test_error_classes(status: int, cls: type[PlateauClientError]) -> None:
    err = error_from_response(httpx.Response(status, json={"message": "m", "code": "c"}))
    assert type(err) is cls and err.message == "m" and err.code == "c" and err.status == status


def test_error_details() -> None:
    err = error_from_response(
        httpx.Response(413, json={"message": "big"}, headers={MAX_REQUEST_SIZE_HEADER: "1024"})
    )
    assert isinstance(err, PayloadTooLargeError) and err.max_bytes == 1024
    err = error_from_response(httpx.Response(429, text="busy", headers={RETRY_AFTER_HEADER: "3"}))
    assert isinstance(err, BusyError) and err.retry_after == 3.0 and err.message == "busy"
    err = error_from_response(httpx.Response(502, text="<html>\n bad   gateway </html>"))
    assert err.message == "<html> bad gateway </html>"
    err = error_from_response(httpx.Response(422, json={"detail": [{"msg": "x"}]}))
    assert err.status == 422 and "msg" in err.message


def test_a_reply_field_this_client_does_not_know_is_ignored() -> None:
    """A newer node may add reply fields (also inside the topic config, whose request
    model forbids unknown keys); an older client or operator must still parse the reply."""
    from plateau.client.errors import PlateauClientError
    from plateau.client.wire import parse_reply
    from plateau.protocol.replies import TopicStatus
    from plateau.protocol.topic_config import TopicConfig

    body = TopicConfig().model_dump(mode="json")
    body["owner"] = None
    body["usage"] = {"bytes": 5, "records": 1, "partitions": {}, "oldest_time_ms": None}
    body["usage"] |= {"newest_time_ms": None, "since": "a newer node"}
    body["segment"]["layout"] = "a newer node's segment field"
    body["tier"] = "a newer node's topic field"
    reply = parse_reply(TopicStatus, body)
    assert reply.usage.bytes == 5 and reply.segment == TopicConfig().segment
    del body["usage"]
    with pytest.raises(PlateauClientError, match="TopicStatus of another shape"):
        parse_reply(TopicStatus, body)
