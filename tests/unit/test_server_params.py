"""Query parameters, the iteration cursor, bind addresses and the error shape: no server."""

from __future__ import annotations

import pytest

from plateau.protocol import MAX_REQUEST_SIZE_HEADER, RETRY_AFTER_HEADER
from plateau.protocol.errors import Busy, InvalidInput, PayloadTooLarge
from plateau.server.errors import describe_validation_errors, error_headers, error_response
from plateau.server.params import parse_cursor, parse_time, partition_filter, time_range
from plateau.server.run import parse_bind
from plateau.storage.types import TimeRange

T0 = 1704164645000  # 2024-01-02T03:04:05Z


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-01-02T03:04:05Z", T0),
        ("2024-01-02T03:04:05+00:00", T0),
        ("2024-01-02T04:04:05+01:00", T0),
        ("2024-01-02t03:04:05z", T0),
        ("2024-01-02T03:04:05.250Z", T0 + 250),
        ("1970-01-01T00:00:00Z", 0),
        ("1969-12-31T23:59:59Z", -1000),
        (str(T0), T0),
        ("0", 0),
        ("-5", -5),
    ],
)
def test_parse_time(text: str, expected: int) -> None:
    assert parse_time(text, "time.start", upper=False) == expected
    assert parse_time(text, "time.end", upper=True) == expected


def test_sub_millisecond_bounds_round_inward() -> None:
    text = "2024-01-02T03:04:05.0005Z"
    assert parse_time(text, "time.start", upper=False) == T0 + 1
    assert parse_time(text, "time.end", upper=True) == T0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "yesterday",
        "2024-01-02",
        "2024-01-02T03:04:05",
        "1.5e12",
        "2024-13-02T00:00:00Z",
        "0x10",
    ],
)
def test_parse_time_refuses(text: str) -> None:
    with pytest.raises(InvalidInput, match=r"time\.start"):
        parse_time(text, "time.start", upper=False)


def test_time_range() -> None:
    assert time_range(None, None) is None
    assert time_range("2024-01-02T03:04:05Z", None) == TimeRange(T0, None)
    assert time_range(None, "5") == TimeRange(None, 5)
    assert time_range("5", "5") == TimeRange(5, 5)
    with pytest.raises(InvalidInput, match="before"):
        time_range("2024-01-02T03:04:05Z", "2024-01-02T03:04:04Z")


def test_partition_filter_merges_both_spellings() -> None:
    assert partition_filter(None, None) is None
    assert partition_filter([], None) is None
    assert partition_filter(["a"], ["b", "regex:c.*"]) == ["a", "b", "regex:c.*"]


@pytest.mark.parametrize("item", ["..", "A", "a/b", "x" * 129, "regex:(", "regex:" + "a" * 300])
def test_partition_filter_refuses(item: str) -> None:
    with pytest.raises(InvalidInput):
        partition_filter([item])


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", {}),
        (b"  ", {}),
        (b"{}", {}),
        (b"null", {}),
        (b'{"0": 5, "p-1": 0}', {"0": 5, "p-1": 0}),
    ],
)
def test_parse_cursor(body: bytes, expected: dict[str, int]) -> None:
    assert parse_cursor(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"[1]",
        b'"x"',
        b"3",
        b"{bad",
        b'{"0": -1}',
        b'{"0": 1.5}',
        b'{"0": "1"}',
        b'{"0": true}',
        b'{"0": null}',
        b'{"..": 1}',
        b'{"A": 1}',
        b"\xff",
    ],
)
def test_parse_cursor_refuses(body: bytes) -> None:
    with pytest.raises(InvalidInput):
        parse_cursor(body)


@pytest.mark.parametrize(
    ("bind", "expected"),
    [
        ("127.0.0.1:3030", ("127.0.0.1", 3030)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("localhost:80", ("localhost", 80)),
        ("[::1]:3030", ("::1", 3030)),
        ("[::]:8080", ("::", 8080)),
        (":3030", ("0.0.0.0", 3030)),
    ],
)
def test_parse_bind(bind: str, expected: tuple[str, int]) -> None:
    assert parse_bind(bind) == expected


@pytest.mark.parametrize(
    "bind", ["3030", "host", "::1:3030", "[::1]", "[]:1", "h:x", "h:70000", "h:"]
)
def test_parse_bind_refuses(bind: str) -> None:
    with pytest.raises(ValueError, match="bind"):
        parse_bind(bind)


def test_error_headers() -> None:
    assert error_headers(Busy("busy", retry_after=0.2)) == {RETRY_AFTER_HEADER: "1"}
    assert error_headers(Busy("busy", retry_after=2.1)) == {RETRY_AFTER_HEADER: "3"}
    assert error_headers(PayloadTooLarge("big", max_bytes=10)) == {MAX_REQUEST_SIZE_HEADER: "10"}
    assert error_headers(InvalidInput("x")) == {}


def test_error_response_shape() -> None:
    response = error_response(418, "teapot")
    assert response.status_code == 418
    assert bytes(response.body) == b'{"message":"teapot","code":418}'


def test_describe_validation_errors() -> None:
    errors = [
        {"loc": ("query", "page_size"), "msg": "Input should be less than or equal to 10000"},
        {"loc": ("retention", "max_bytez"), "msg": "Extra inputs are not permitted"},
        {"loc": ("body", 3), "type": "json_invalid", "msg": "x", "ctx": {"error": "EOF"}},
    ]
    assert describe_validation_errors(errors) == (
        "query parameter page_size: Input should be less than or equal to 10000; "
        "retention.max_bytez: Extra inputs are not permitted; malformed JSON: EOF"
    )
