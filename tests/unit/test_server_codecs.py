"""Append body decoding, Arrow reply encoding and JSON output: pure functions, no server."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from plateau.protocol import ARROW_FILE, ARROW_STREAM, JSON, JSON_ENVELOPE, JSON_RECORDS
from plateau.protocol.errors import InvalidInput
from plateau.server.codecs import (
    append_media_type,
    check_table,
    decode_append,
    encode_arrow,
    has_null_type,
    media_type,
    reply_media_type,
)
from plateau.server.errors import NotAcceptable, UnsupportedMediaType
from plateau.server.jsonout import dumps, table_rows
from testkit.arrowhttp import ipc_file, ipc_stream

TABLE = pa.table(
    {
        "time": pa.array([1, 2, 3], pa.int64()),
        "key": pa.array([b"a", b"b", b"c"]),
        "value": pa.array(["x", None, "z"]),
        "nested": pa.array([{"a": [1, 2]}, None, {"a": []}]),
    }
)


# --- content types --------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (JSON, JSON),
        ("Application/JSON; charset=utf-8", JSON),
        (ARROW_FILE, ARROW_FILE),
        (f"{ARROW_STREAM} ", ARROW_STREAM),
    ],
)
def test_append_media_type_accepts(header: str, expected: str) -> None:
    assert append_media_type(header) == expected


@pytest.mark.parametrize("header", [None, "", "text/plain", "application/octet-stream", "json"])
def test_append_media_type_refuses_with_415(header: str | None) -> None:
    with pytest.raises(UnsupportedMediaType) as err:
        append_media_type(header)
    assert err.value.status == 415


def test_media_type_strips_parameters() -> None:
    assert media_type(f"{JSON}; charset=utf-8") == JSON
    assert media_type(None) == ""


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, JSON),
        ("*/*", JSON),
        (JSON, JSON),
        (ARROW_FILE, ARROW_FILE),
        (f"{ARROW_FILE}, {JSON};q=0.5", ARROW_FILE),
        (ARROW_STREAM, ARROW_STREAM),
        ("", JSON),
        (JSON_RECORDS, JSON),  # plateau's own
        (JSON_ENVELOPE, JSON_ENVELOPE),
        ("text/html,application/xhtml+xml,*/*;q=0.8", JSON),  # a browser
        ("application/*", JSON),
        (f"{JSON};q=0, {ARROW_FILE}", ARROW_FILE),  # q=0: not acceptable
    ],
)
def test_reply_media_type(accept: str | None, expected: str) -> None:
    assert reply_media_type(accept) == expected


@pytest.mark.parametrize("accept", ["text/html", "text/csv, application/xml", "*/*;q=0"])
def test_reply_media_type_refuses_what_it_cannot_send(accept: str) -> None:
    with pytest.raises(NotAcceptable, match="names no format the node sends") as err:
        reply_media_type(accept)
    assert err.value.status == 406


# --- decoding Arrow --------------------------------------------------------------


def test_decode_arrow_file_and_stream_round_trip() -> None:
    assert decode_append(ARROW_FILE, ipc_file(TABLE)).equals(TABLE)
    assert decode_append(ARROW_STREAM, ipc_stream(TABLE)).equals(TABLE)


def test_decode_multi_batch_file() -> None:
    table = pa.concat_tables([TABLE, TABLE])
    decoded = decode_append(ARROW_FILE, ipc_file(table))
    assert decoded.num_rows == 6
    assert decoded.equals(table)


def test_decode_compressed_ipc() -> None:
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression="zstd")
    with ipc.new_file(sink, TABLE.schema, options=options) as w:
        w.write_table(TABLE)
    assert decode_append(ARROW_FILE, sink.getvalue().to_pybytes()).equals(TABLE)


@pytest.mark.parametrize(
    ("media", "body"),
    [
        (ARROW_FILE, b"not arrow at all"),
        (ARROW_FILE, ipc_file(TABLE)[:-20]),
        (ARROW_FILE, ipc_stream(TABLE)),
        (ARROW_STREAM, b"\x00" * 64),
        (ARROW_STREAM, ipc_stream(TABLE)[:40]),
        (ARROW_STREAM, b"ARROW1"),
    ],
)
def test_malformed_arrow_is_invalid_input(media: str, body: bytes) -> None:
    with pytest.raises(InvalidInput):
        decode_append(media, body)


@pytest.mark.parametrize("media", [ARROW_FILE, ARROW_STREAM, JSON])
def test_empty_body_is_invalid(media: str) -> None:
    with pytest.raises(InvalidInput, match="empty body"):
        decode_append(media, b"")


def test_zero_rows_is_invalid() -> None:
    with pytest.raises(InvalidInput, match="zero rows"):
        decode_append(ARROW_FILE, ipc_file(TABLE.slice(0, 0)))


@pytest.mark.parametrize(
    "dtype",
    [
        pa.null(),
        pa.list_(pa.null()),
        pa.struct([("a", pa.int64()), ("b", pa.null())]),
        pa.map_(pa.string(), pa.null()),
        pa.large_list(pa.struct([("c", pa.list_(pa.null()))])),
        pa.dictionary(pa.int8(), pa.null()),
    ],
)
def test_null_typed_columns_are_refused(dtype: pa.DataType) -> None:
    assert has_null_type(dtype)
    table = pa.table({"ok": [1], "bad": pa.nulls(1, dtype)})
    with pytest.raises(InvalidInput, match="null-typed"):
        decode_append(ARROW_FILE, ipc_file(table))


@pytest.mark.parametrize(
    "dtype", [pa.int64(), pa.list_(pa.string()), pa.struct([("a", pa.binary())])]
)
def test_concrete_types_have_no_null_type(dtype: pa.DataType) -> None:
    assert not has_null_type(dtype)


def test_duplicate_column_names_are_refused() -> None:
    table = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["a", "a"])
    with pytest.raises(InvalidInput, match="duplicate column"):
        decode_append(ARROW_FILE, ipc_file(table))


def test_invalid_utf8_in_arrow_body_is_refused() -> None:
    # Cheap validation passes (offsets are fine); only full validation sees the bad UTF-8,
    # which must be refused before the engine writes it where Spark would choke on it.
    offsets = pa.py_buffer(pa.array([0, 2], pa.int32()).buffers()[1])
    broken = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(b"\xff\xfe")])
    table = pa.table({"s": broken})
    with pytest.raises(InvalidInput, match="malformed"):
        check_table(table)
    with pytest.raises(InvalidInput, match="malformed"):
        decode_append(ARROW_STREAM, ipc_stream(table))


# --- decoding JSON ---------------------------------------------------------------


def test_json_records_of_objects() -> None:
    body = json.dumps({"records": [{"a": 1, "b": "x"}, {"a": 2, "c": [1.5]}]}).encode()
    table = decode_append(JSON, body)
    assert table.column_names == ["a", "b", "c"]
    assert table.to_pylist() == [
        {"a": 1, "b": "x", "c": None},
        {"a": 2, "b": None, "c": [1.5]},
    ]


def test_json_top_level_array() -> None:
    table = decode_append(JSON, b'[{"a": 1}, {"a": 2}]')
    assert table.column("a").to_pylist() == [1, 2]


def test_json_legacy_string_records_go_to_message() -> None:
    table = decode_append(JSON, b'{"records": ["one", "two"]}')
    assert table.column_names == ["message"]
    assert table.schema.field("message").type == pa.string()
    assert table.column("message").to_pylist() == ["one", "two"]


def test_json_rfc3339_time_becomes_epoch_ms() -> None:
    table = decode_append(JSON, b'[{"time": "2024-01-02T03:04:05.678Z", "v": 1}]')
    assert table.column("time").to_pylist() == [1704164645678]
    assert table.schema.field("time").type == pa.int64()


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"{not json", "malformed JSON"),
        (b"\xff\xfe", "malformed JSON"),
        (b'"just a string"', "records"),
        (b"42", "records"),
        (b'{"rows": []}', "records"),
        (b'{"records": [], "extra": 1}', "unexpected keys"),
        (b'{"records": {"a": 1}}', "records"),
        (b'{"records": [1, 2]}', "record 0 is int"),
        (b'{"records": [[1]]}', "record 0 is list"),
        (b'{"records": []}', "zero rows"),
        (b"[]", "zero rows"),
        (b"[{}]", "no fields"),
        (b'[{"a": null}]', "null-typed"),
        (b'[{"a": 1}, {"a": "x"}]', "column 'a'"),
        (b'[{"a": 100000000000000000000000}]', "column 'a'"),
        (b'[{"time": "yesterday"}]', "time"),
    ],
)
def test_bad_json_bodies(body: bytes, match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        decode_append(JSON, body)


# --- encoding Arrow --------------------------------------------------------------


@pytest.mark.parametrize("media", [ARROW_FILE, ARROW_STREAM])
def test_encode_arrow_adds_metadata(media: str) -> None:
    body = encode_arrow(TABLE, media, {"status": '"All"', "span": '{"start":0,"end":3}'})
    buf = pa.py_buffer(bytes(body))
    reader = ipc.open_file(buf) if media == ARROW_FILE else ipc.open_stream(buf)
    table = reader.read_all()
    assert table.equals(TABLE)
    assert table.schema.metadata[b"status"] == b'"All"'
    assert json.loads(table.schema.metadata[b"span"]) == {"start": 0, "end": 3}


def test_encode_empty_table() -> None:
    body = encode_arrow(pa.table({}), ARROW_FILE, {"status": '"All"'})
    table = ipc.open_file(pa.py_buffer(bytes(body))).read_all()
    assert table.num_rows == 0


def test_encode_keeps_existing_metadata() -> None:
    table = TABLE.replace_schema_metadata({"origin": "x"})
    body = encode_arrow(table, ARROW_FILE, {"status": "s"})
    meta = ipc.open_file(pa.py_buffer(bytes(body))).schema.metadata
    assert meta[b"origin"] == b"x"
    assert meta[b"status"] == b"s"


# --- JSON output -----------------------------------------------------------------


def test_table_rows_plain_types() -> None:
    rows = table_rows(pa.table({"a": [1, 2], "s": ["x", None]}))
    assert rows == [{"a": 1, "s": "x"}, {"a": 2, "s": None}]


def test_table_rows_maps_values_json_cannot_carry() -> None:
    utc = dt.UTC
    table = pa.table(
        {
            "bin": pa.array([b"\x00\xff", None]),
            "fixed": pa.array([b"ab", b"cd"], pa.binary(2)),
            "ts": pa.array([1_700_000_000_123_456_789, None], pa.timestamp("ns", "UTC")),
            "ts_naive": pa.array([0, 1000], pa.timestamp("ms")),
            "day": pa.array([dt.date(2024, 1, 2), None]),
            "t64": pa.array([1_000_000_000, None], pa.time64("ns")),
            "dur": pa.array([5, 7], pa.duration("ns")),
            "dec": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(5, 2)),
            "f": pa.array([math.nan, math.inf]),
            "half": pa.array([1.5, None], pa.float16()),
            "lst": pa.array([[b"x"], None], pa.list_(pa.binary())),
            "st": pa.array([{"b": b"y", "n": 1}, {"b": None, "n": 2}]),
            "mp": pa.array([[("k", b"v")], None], pa.map_(pa.string(), pa.binary())),
            "dic": pa.array(["a", "b"]).dictionary_encode(),
        }
    )
    rows = table_rows(table)
    assert rows[0]["bin"] == base64.b64encode(b"\x00\xff").decode()
    assert rows[1]["bin"] is None
    assert rows[0]["fixed"] == base64.b64encode(b"ab").decode()
    assert rows[0]["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=utc).isoformat()
    assert rows[1]["ts_naive"] == "1970-01-01T00:00:01"
    assert rows[0]["day"] == "2024-01-02"
    assert rows[0]["t64"] == "00:00:01"
    assert rows[1]["dur"] == 7
    assert rows[0]["dec"] == "1.25"
    assert rows[0]["f"] is None and rows[1]["f"] is None
    assert rows[0]["half"] == 1.5
    assert rows[0]["lst"] == [base64.b64encode(b"x").decode()]
    assert rows[0]["st"] == {"b": base64.b64encode(b"y").decode(), "n": 1}
    assert rows[1]["st"] == {"b": None, "n": 2}
    assert rows[0]["mp"] == [["k", base64.b64encode(b"v").decode()]]
    assert rows[1]["dic"] == "b"
    # Everything is serialisable without NaN.
    json.loads(dumps(rows))


def test_table_rows_of_empty_table() -> None:
    assert table_rows(pa.table({})) == []
    assert table_rows(TABLE.slice(0, 0)) == []


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("media", [ARROW_FILE, ARROW_STREAM])
def test_names_that_are_not_utf8_are_refused(media: str, nested: bool) -> None:
    """Found by the body fuzzer: a name that is not UTF-8 was a 500 (UnicodeDecodeError)."""
    column = pa.array([{"qzqz": 1}]) if nested else pa.array([1])
    table = pa.table({"time": pa.array([1], pa.int64()), "wxwx": column})
    body = (ipc_file if media == ARROW_FILE else ipc_stream)(table)
    bad = (b"qzqz" if nested else b"wxwx").replace(b"zq", b"\xff\xfe").replace(b"xw", b"\xff\xfe")
    body = body.replace(b"qzqz" if nested else b"wxwx", bad)
    with pytest.raises(InvalidInput, match="not valid UTF-8"):
        decode_append(media, body)
