"""Append bodies in (Arrow IPC file or stream, JSON records) and Arrow replies out.

The Arrow paths do no per-row Python work: the body buffer is wrapped
zero-copy (``pa.py_buffer``), read as IPC and validated in C++. JSON is the
convenience path (plateau's legacy ``{"records": [...]}``) and costs about
20 times more CPU per row.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from plateau.protocol import ARROW_FILE, ARROW_STREAM, JSON, JSON_ENVELOPE
from plateau.protocol.errors import InvalidInput
from plateau.server.errors import NotAcceptable, UnsupportedMediaType
from plateau.server.params import parse_time
from plateau.server.reply_pieces import ReplyPieces, ReplySink
from plateau.storage.data.arrow_footer import MAGIC, Block, footer_with_blocks
from plateau.storage.data.full_validation import validate_table
from plateau.storage.data.ipc_file import END_OF_STREAM, FILE_START, empty_footer
from plateau.storage.data.ipc_messages import CODEC_IDS
from plateau.storage.data.ipc_messages import batch_messages as ipc_batch_messages
from plateau.storage.data.stored_batches import StoredBatches

APPEND_TYPES = (ARROW_FILE, ARROW_STREAM, JSON)
READ_CODECS = {"lz4_frame": CODEC_IDS["lz4"], "lz4": CODEC_IDS["lz4"], "zstd": CODEC_IDS["zstd"]}
"""Names a reader may list in ``x-accept-arrow-compression``: Arrow's (``LZ4_FRAME``,
``ZSTD``, any case) and pyarrow's ``lz4``."""
LEGACY_MESSAGE_COLUMN = "message"
"""plateau's legacy string record (``{"records": ["..."]}``) becomes a row of this utf8 column."""


def media_type(content_type: str | None) -> str:
    """``application/json; charset=utf-8`` -> ``application/json``."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def append_media_type(content_type: str | None) -> str:
    """The body format of an append; anything else is a 415 before the body is read."""
    media = media_type(content_type)
    if media not in APPEND_TYPES:
        shown = repr(content_type) if content_type else "missing"
        raise UnsupportedMediaType(
            f"Content-Type {shown} is not supported; send one of {', '.join(APPEND_TYPES)}"
        )
    return media


def reply_media_type(accept: str | None) -> str:
    """The reply format: the first one ``Accept`` lists that the node sends (q=0 skipped).

    As plateau: no Accept, ``*/*``, ``JSON`` and ``JSON_RECORDS`` get a bare JSON
    array of records (``JSON``); ``ARROW_FILE`` gets Arrow. Beyond plateau: the Arrow
    stream format, and ``JSON_ENVELOPE`` for the records
    wrapped in an object with their span or cursor and status (``JSON_ENVELOPE``).
    Anything else is a 406 that lists what the node sends.
    """
    if accept is None or not accept.strip():
        return JSON
    for item in accept.split(","):
        media, *params = (part.strip().lower() for part in item.split(";"))
        options = dict(p.partition("=")[::2] for p in params)
        if options.get("q", "1").strip() in ("0", "0.0", "0.00", "0.000"):
            continue
        if media in (ARROW_FILE, ARROW_STREAM):
            return media
        if media == JSON:
            return JSON_ENVELOPE if options.get("format", "").strip('" ') == "envelope" else JSON
        if media in ("*/*", "application/*"):
            return JSON
    raise NotAcceptable(
        f"Accept {accept!r} names no format the node sends; ask for {JSON} "
        f"(plateau's pandas-records), {JSON_ENVELOPE}, {ARROW_FILE} or {ARROW_STREAM}"
    )


# --- decoding ------------------------------------------------------------------


def decode_append(media: str, body: bytes) -> pa.Table:
    """Decode and validate an append body; every failure is a 400 naming the problem."""
    return decode_append_messages(media, body)[0]


def decode_append_messages(
    media: str, body: bytes | pa.Buffer
) -> tuple[pa.Table, list[pa.Message] | None]:
    """The table of an append body, and for Arrow IPC its record batch messages as sent.

    The table is decoded from those very messages, so that what the node keeps
    in memory and what it writes to the segment are the same bytes.
    """
    if not body:
        raise InvalidInput("empty body: send at least one record")
    messages: list[pa.Message] | None = None
    if media == JSON:
        table = _table_from_json(body if isinstance(body, bytes) else body.to_pybytes())
    else:
        table, messages = _table_from_ipc(body, stream=media == ARROW_STREAM)
    try:
        _check_names(table.schema)
    except UnicodeDecodeError as exc:  # names are UTF-8 by the Arrow spec; pyarrow decodes lazily
        raise InvalidInput(f"a column or field name is not valid UTF-8: {exc.reason}") from exc
    check_table(table)
    return table, messages


def _check_names(schema: pa.Schema) -> None:
    """Decode every field name, nested ones too, so that no later step meets a bad one."""
    stack: list[pa.DataType] = []
    for field in schema:
        _ = field.name
        stack.append(field.type)
    while stack:
        kind = stack.pop()
        for i in range(kind.num_fields):
            child = kind.field(i)
            _ = child.name
            stack.append(child.type)


def _table_from_ipc(
    body: bytes | pa.Buffer, *, stream: bool
) -> tuple[pa.Table, list[pa.Message] | None]:
    buffer = body if isinstance(body, pa.Buffer) else pa.py_buffer(body)
    kind = "stream" if stream else "file"
    try:
        found = ipc_batch_messages(buffer, stream=stream)
        if found is not None:
            schema, messages = found
            batches = [ipc.read_record_batch(m, schema) for m in messages]
            return pa.Table.from_batches(batches, schema), messages
        if stream:
            return ipc.open_stream(buffer).read_all(), None
        return ipc.open_file(pa.BufferReader(buffer)).read_all(), None
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise InvalidInput(f"malformed Arrow IPC {kind} body: {exc}") from exc


def _table_from_json(body: bytes) -> pa.Table:
    try:
        value: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"malformed JSON body: {exc}") from exc
    if isinstance(value, dict):
        extra = sorted(set(value) - {"records"})
        if extra or "records" not in value:
            raise InvalidInput(
                'JSON body must be {"records": [...]} or an array of objects'
                + (f"; unexpected keys {extra}" if extra else "")
            )
        value = value["records"]
    if not isinstance(value, list):
        raise InvalidInput('"records" must be an array of objects or strings')
    rows: list[Mapping[str, Any]] = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            rows.append({LEGACY_MESSAGE_COLUMN: item})
        elif isinstance(item, dict):
            rows.append(item)
        else:
            kind = type(item).__name__
            raise InvalidInput(f"record {i} is {kind}; records are objects or strings")
    return _rows_to_table(rows)


def _rows_to_table(rows: list[Mapping[str, Any]]) -> pa.Table:
    """Columns are the union of all rows' keys in first-seen order; a missing key is null.

    (``pa.Table.from_pylist`` takes the first row's keys only and would drop data.)
    """
    names = list(dict.fromkeys(key for row in rows for key in row))
    if rows and not names:
        raise InvalidInput("the records have no fields")
    arrays = []
    for name in names:
        values = [row.get(name) for row in rows]
        if name == "time":
            values = [_json_time(v) for v in values]
        try:
            arrays.append(pa.array(values))
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
            raise InvalidInput(f"column {name!r}: {exc}") from exc
    return pa.Table.from_arrays(arrays, names=names)


def _json_time(value: Any) -> Any:
    """JSON has no timestamp type: an RFC3339 string ``time`` becomes epoch milliseconds."""
    if isinstance(value, str):
        return parse_time(value, "time", upper=True)
    return value


def check_table(table: pa.Table) -> None:
    """Refuse what no segment should hold: nothing, duplicates, null types, broken buffers."""
    if table.num_rows == 0:
        raise InvalidInput("no records: the body holds zero rows")
    if table.num_columns == 0:
        raise InvalidInput("the records have no columns")
    names = table.column_names
    if len(set(names)) != len(names):
        dups = sorted({n for n in names if names.count(n) > 1})
        raise InvalidInput(f"duplicate column names: {dups}")
    for field in table.schema:
        if has_null_type(field.type):
            raise InvalidInput(
                f"column {field.name!r} has type {field.type}: null-typed columns cannot be "
                "stored; give the column a concrete type"
            )
    try:
        validate_table(table)
    except pa.ArrowException as exc:
        raise InvalidInput(f"malformed Arrow data: {exc}") from exc


def has_null_type(dtype: pa.DataType) -> bool:
    """True if ``dtype`` is null or contains a null type at any depth."""
    if pa.types.is_null(dtype):
        return True
    if isinstance(dtype, pa.DictionaryType):
        return has_null_type(dtype.value_type)
    if isinstance(dtype, pa.BaseExtensionType):
        return has_null_type(dtype.storage_type)
    return any(has_null_type(dtype.field(i).type) for i in range(dtype.num_fields))


# --- encoding ------------------------------------------------------------------


def encode_arrow(table: pa.Table, media: str, metadata: Mapping[str, str]) -> memoryview:
    """IPC file (or stream) bytes of ``table`` with plateau's schema metadata added, in one
    buffer of Arrow's pool (the event loop's replies, topic pages made ahead): the pieces
    of ``arrow_pieces`` joined once. A growing ``BufferOutputStream`` reallocated its way
    up to the size and copied the page again each time (100 against 61 us for a
    10,000-row, 1.3 MB page)."""
    return arrow_pieces(table, media, metadata).join()


def accepted_codecs(header: str | None) -> frozenset[int]:
    """The codec ids a reader decodes, from ``x-accept-arrow-compression``.

    Unknown names are ignored, as HTTP's ``Accept-Encoding`` ignores codings it
    does not know: a reader listing a codec a later node adds stays readable.
    """
    if not header:
        return frozenset()
    names = (name.strip().lower() for name in header.split(","))
    return frozenset(READ_CODECS[name] for name in names if name in READ_CODECS)


def arrow_pieces(table: pa.Table, media: str, metadata: Mapping[str, str]) -> ReplyPieces:
    """``encode_arrow``'s reply as the pieces pyarrow's writer hands over: the decoded
    columns' own buffers, never copied into one (``reply_pieces``)."""
    table = table.replace_schema_metadata(_merged(table.schema, metadata))
    sink = ReplySink()
    writer = ipc.new_stream if media == ARROW_STREAM else ipc.new_file
    with writer(pa.PythonFile(sink, mode="w"), table.schema) as out:
        out.write_table(table)
    sink.close()
    return ReplyPieces(sink.pieces)


def encode_stored(
    schema: pa.Schema, stored: StoredBatches, media: str, metadata: Mapping[str, str]
) -> ReplyPieces:
    """The reply ``encode_arrow`` makes of the same rows, around batch messages as stored.

    The schema (with plateau's metadata) is serialised here; the batches are
    the segment's bytes, placed after it as they are (their offsets are
    relative to their own message); the file format's footer lists where each
    one lands. The pieces are sent as they are (``reply_pieces``): no copy.
    """
    schema = schema.with_metadata(_merged(schema, metadata))
    head = schema.serialize()
    if media == ARROW_STREAM:
        return ReplyPieces([head, stored.data, END_OF_STREAM])
    base = len(FILE_START) + head.size
    blocks = [Block(base + b.offset, b.meta_length, b.body_length) for b in stored.blocks]
    footer = footer_with_blocks(empty_footer(schema), blocks)
    size = struct.pack("<i", len(footer))
    return ReplyPieces([FILE_START, head, stored.data, END_OF_STREAM, footer, size, MAGIC])


def _merged(schema: pa.Schema, metadata: Mapping[str, str]) -> dict[bytes, bytes]:
    """``schema``'s metadata with plateau's reply metadata added over it."""
    merged = dict(schema.metadata or {})
    merged.update((k.encode(), v.encode()) for k, v in metadata.items())
    return merged
