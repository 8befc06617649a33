"""Arrow IPC record batch messages, written by the node itself: as they came, or per column.

Why by hand: pyarrow's IPC writer compresses every buffer of a message or
none (Arrow C++'s ``min_space_savings`` is not exposed in Python), and it
encodes each batch again although an append's body already holds it encoded.
The Arrow format allows more than pyarrow writes (``Message.fbs``,
``Schema.fbs``):

* each message carries its own ``BodyCompression``, so a segment may mix
  compressed and plain messages;
* within a compressed message each buffer is ``<int64 uncompressed length>
  <codec frame>``, or ``<int64 -1> <the raw bytes>``: stored as is
  (Arrow C++ and Java read both, and write -1 themselves when compression
  does not pay).

So the node writes a batch message as the client sent it when no column
compresses, and otherwise writes a new message whose buffers are compressed
for the columns where that pays and raw (-1) for the others. What stays
pyarrow's: decoding (``pa.ipc.read_record_batch``), the schema message and
the footer's schema (``ipc_file``).

    table Message { version: short; header_type: ubyte; header: table;
                    bodyLength: long; custom_metadata: [KeyValue]; }
    table RecordBatch { length: long; nodes: [FieldNode]; buffers: [Buffer];
                        compression: BodyCompression; variadicBufferCounts: [long]; }
    struct FieldNode { length: long; null_count: long; }   // 16 bytes
    struct Buffer { offset: long; length: long; }           // 16 bytes
    table BodyCompression { codec: byte (LZ4_FRAME 0, ZSTD 1); method: byte (BUFFER 0); }
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from plateau.storage.data.arrow_footer import (
    LZ4_FRAME,
    RECORD_BATCH,
    ZSTD,
    record_batch_blocks_of,
)
from plateau.storage.data.flatbuf import (
    FlatBufferError,
    field_at,
    root_table,
    table_at,
    vector_at,
)

CONTINUATION = b"\xff\xff\xff\xff"
METADATA_V5 = 4
CODEC_IDS = {"lz4": LZ4_FRAME, "zstd": ZSTD}  # BodyCompression.codec by pyarrow's names
NOT_COMPRESSED = -1  # a buffer's length prefix: the bytes that follow are raw
ALIGN = 8
_PAD = bytes(ALIGN)
_I64 = struct.Struct("<q")
_PAIR = struct.Struct("<qq")  # FieldNode and Buffer are both two longs


def padded(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


@dataclass(frozen=True)
class BatchLayout:
    """What the node needs of a record batch message's metadata to rewrite its body."""

    rows: int
    nodes: bytes  # the FieldNode vector's elements, copied as they are
    buffers: list[tuple[int, int]]  # (offset, length) in the body
    compressed: bool  # the message already has a BodyCompression
    variadic: list[int] | None  # variadicBufferCounts (view types), when present


def read_layout(meta: pa.Buffer | bytes | memoryview) -> BatchLayout:
    """The layout of a record batch message's metadata (the FlatBuffer, no prefix)."""
    buf = memoryview(meta)
    try:
        message = root_table(buf)
        kind = field_at(buf, message, 1)
        if kind is None or buf[kind] != RECORD_BATCH:
            raise FlatBufferError("the message is not a record batch")
        header = table_at(buf, message, 2)
        if header is None:
            raise FlatBufferError("the record batch message has no header")
        at = field_at(buf, header, 0)
        rows = _I64.unpack_from(buf, at)[0] if at is not None else 0
        nodes = vector_at(buf, header, 1, 16)
        buffers = vector_at(buf, header, 2, 16)
        node_bytes = bytes(buf[nodes[0] : nodes[0] + 16 * nodes[1]]) if nodes else b""
        layout = (
            [_PAIR.unpack_from(buf, buffers[0] + 16 * i) for i in range(buffers[1])]
            if buffers
            else []
        )
        variadic_at = vector_at(buf, header, 4, 8)
        variadic = (
            [_I64.unpack_from(buf, variadic_at[0] + 8 * i)[0] for i in range(variadic_at[1])]
            if variadic_at
            else None
        )
        compressed = field_at(buf, header, 3) is not None
    except (struct.error, IndexError) as exc:
        raise FlatBufferError(f"malformed record batch metadata: {exc}") from exc
    return BatchLayout(rows, node_bytes, layout, compressed, variadic)


def buffers_per_column(schema: pa.Schema) -> list[int] | None:
    """How many body buffers each top-level column has (Arrow's Columnar Format, V5).

    None when a type's count is not fixed by the schema (view types carry a
    variable number; unions and run-end encoding are left out as rare): such
    batches are then written as they came, uncompressed per column.
    """
    counts = []
    for field in schema:
        n = _buffers(field.type)
        if n is None:
            return None
        counts.append(n)
    return counts


def _buffers(dtype: pa.DataType) -> int | None:
    if isinstance(dtype, pa.BaseExtensionType):
        return _buffers(dtype.storage_type)
    t = pa.types
    if t.is_null(dtype):
        return 0
    if t.is_string_view(dtype) or t.is_binary_view(dtype) or t.is_union(dtype):
        return None
    if t.is_run_end_encoded(dtype) or t.is_list_view(dtype) or t.is_large_list_view(dtype):
        return None
    if t.is_dictionary(dtype):
        return 2  # the indices; the values come in dictionary batches
    own: int
    if any(f(dtype) for f in (t.is_string, t.is_binary, t.is_large_string, t.is_large_binary)):
        own = 3
    elif t.is_list(dtype) or t.is_large_list(dtype) or t.is_map(dtype):
        own = 2
    elif t.is_fixed_size_list(dtype) or t.is_struct(dtype):
        own = 1
    elif dtype.num_fields == 0:
        own = 2  # every fixed-width type: validity and values
    else:
        return None
    for i in range(dtype.num_fields):
        child = _buffers(dtype.field(i).type)
        if child is None:
            return None
        own += child
    return own


@dataclass
class Encoded:
    """A message ready to append: the pieces to write, in order, and their sizes."""

    pieces: list[pa.Buffer | bytes | memoryview]
    meta_length: int  # the encapsulated metadata: continuation, length, FlatBuffer, padding
    body_length: int
    raw_by_column: list[int]  # bytes of each column's buffers before compression
    stored_by_column: list[int]  # and as written (prefixes included)
    shrank: list[bool] = dataclasses.field(default_factory=list)  # per body buffer: compressed

    @property
    def length(self) -> int:
        return self.meta_length + self.body_length


def encapsulate(meta: pa.Buffer | bytes | memoryview) -> tuple[bytes, int]:
    """The prefix and trailing padding of an encapsulated message: (prefix+pad bytes, length)."""
    size = len(memoryview(meta))
    total = padded(8 + size)
    return CONTINUATION + struct.pack("<i", total - 8), total


def as_sent(
    meta: pa.Buffer, body: pa.Buffer, layout: BatchLayout, counts: list[int] | None
) -> Encoded:
    """The message as the client encoded it: no byte rewritten."""
    prefix, meta_total = encapsulate(meta)
    pad = meta_total - 8 - meta.size
    pieces: list[pa.Buffer | bytes | memoryview] = [prefix, meta]
    if pad:
        pieces.append(_PAD[:pad])
    pieces.append(body)
    if body.size % ALIGN:
        pieces.append(_PAD[: padded(body.size) - body.size])
    sizes = _column_sizes(layout, counts)
    return Encoded(pieces, meta_total, padded(body.size), sizes, list(sizes))


def _column_sizes(layout: BatchLayout, counts: list[int] | None) -> list[int]:
    if counts is None or sum(counts) != len(layout.buffers):
        return []
    out, i = [], 0
    for n in counts:
        out.append(sum(length for _, length in layout.buffers[i : i + n]))
        i += n
    return out


def compressed(
    body: pa.Buffer,
    layout: BatchLayout,
    counts: list[int],
    compress: Sequence[bool],
    codec: pa.Codec,
    buffers: Sequence[bool] | None = None,
) -> Encoded:
    """A new message: the buffers of columns marked in ``compress`` compressed, others raw.

    A buffer that does not shrink is stored raw too (its -1 prefix costs 8 bytes).
    ``buffers`` (one flag per body buffer, when given) leaves out, raw, the buffers of
    those columns that are not worth trying (``ColumnPlan``: a string column's offsets).
    """
    pieces: list[pa.Buffer | bytes | memoryview] = []
    new_buffers: list[tuple[int, int]] = []
    raw_sizes: list[int] = []
    stored_sizes: list[int] = []
    shrank: list[bool] = []
    pos = 0
    i = 0
    for column, n in enumerate(counts):
        raw = stored = 0
        for k, (offset, length) in enumerate(layout.buffers[i : i + n]):
            if length == 0:
                new_buffers.append((pos, 0))
                shrank.append(False)
                continue
            data = body.slice(offset, length)
            out: bytes | None = None
            if compress[column] and (buffers is None or buffers[i + k]):
                out = codec.compress(data, asbytes=True)
                if len(out) + 8 >= length:
                    out = None
            shrank.append(out is not None)
            if out is not None:
                pieces += [_I64.pack(length), out]
                size = 8 + len(out)
            else:
                pieces += [_I64.pack(NOT_COMPRESSED), data]
                size = 8 + length
            new_buffers.append((pos, size))
            if size % ALIGN:
                pieces.append(_PAD[: padded(size) - size])
            pos += padded(size)
            raw += length
            stored += size
        raw_sizes.append(raw)
        stored_sizes.append(stored)
        i += n
    meta = record_batch_metadata(layout, new_buffers, pos, CODEC_IDS[codec.name])
    prefix, meta_total = encapsulate(meta)
    head = prefix + meta + _PAD[: meta_total - 8 - len(meta)]
    return Encoded([head, *pieces], meta_total, pos, raw_sizes, stored_sizes, shrank)


def record_batch_metadata(
    layout: BatchLayout, buffers: list[tuple[int, int]], body_length: int, codec: int
) -> bytes:
    """A ``Message`` FlatBuffer with a compressed ``RecordBatch`` header.

    Laid out front to back, every offset pointing forward (FlatBuffers' rule
    for uoffsets), scalars aligned to their size relative to the buffer start
    (what the verifier checks):

        root uoffset | Message vtable | Message | RecordBatch vtable | RecordBatch
        | BodyCompression vtable | BodyCompression | nodes | buffers | variadic counts
    """
    out = bytearray(4)  # the root offset, set below

    def align(n: int, extra: int = 0) -> None:
        while (len(out) + extra) % n:
            out.append(0)

    # Message: vtable (5 fields), then the table: soffset, header uoffset, bodyLength,
    # version, header_type
    align(2)
    m_vtable = len(out)
    out += struct.pack("<HHHHHH", 4 + 2 * 4, 20, 16, 18, 4, 8)
    align(8)
    m_table = len(out)
    out += struct.pack("<iIqhBx", m_table - m_vtable, 0, body_length, METADATA_V5, RECORD_BATCH)
    # RecordBatch: length, nodes, buffers, compression, variadicBufferCounts
    align(2)
    r_vtable = len(out)
    has_variadic = layout.variadic is not None
    out += struct.pack(
        "<HHHHHHH", 4 + 2 * 5, 28 if has_variadic else 24, 8, 4, 16, 20, 24 if has_variadic else 0
    )
    align(8)
    r_table = len(out)
    out += struct.pack("<iIqII", r_table - r_vtable, 0, layout.rows, 0, 0)
    if has_variadic:
        out += b"\0\0\0\0"
    # BodyCompression: codec, method (BUFFER)
    align(2)
    c_vtable = len(out)
    out += struct.pack("<HHHH", 8, 8, 4, 5)
    align(4)
    c_table = len(out)
    out += struct.pack("<ibbxx", c_table - c_vtable, codec, 0)

    def vector(field_at_: int, count: int, payload: bytes, elem_align: int) -> None:
        align(elem_align, 4)
        at = len(out)
        struct.pack_into("<I", out, field_at_, at - field_at_)
        out.extend(struct.pack("<I", count))
        out.extend(payload)

    vector(r_table + 4, len(layout.nodes) // 16, layout.nodes, 8)
    vector(r_table + 16, len(buffers), b"".join(_PAIR.pack(o, n) for o, n in buffers), 8)
    if layout.variadic is not None:
        counts = b"".join(_I64.pack(v) for v in layout.variadic)
        vector(r_table + 24, len(layout.variadic), counts, 8)
    struct.pack_into("<I", out, m_table + 4, r_table - (m_table + 4))
    struct.pack_into("<I", out, r_table + 20, c_table - (r_table + 20))
    struct.pack_into("<I", out, 0, m_table)
    align(8)
    return bytes(out)


def batch_messages(buffer: pa.Buffer, *, stream: bool) -> tuple[pa.Schema, list[pa.Message]] | None:
    """The schema and record batch messages of an IPC body, each a view of ``buffer``.

    A file's batches are found through its footer, as pyarrow's file reader
    finds them. None when the body uses dictionaries (their batches are
    decoded by pyarrow's readers, and validation decodes the columns anyway),
    or is malformed in a way this does not name: pyarrow's reader then says
    what is wrong.
    """
    try:
        return _batch_messages(buffer, stream=stream)
    except (StopIteration, EOFError, struct.error, FlatBufferError):
        return None


def _batch_messages(
    buffer: pa.Buffer, *, stream: bool
) -> tuple[pa.Schema, list[pa.Message]] | None:
    if stream:
        reader = pa.ipc.MessageReader.open_stream(buffer)
        first = reader.read_next_message()
        if first.type != "schema":
            return None
        schema = pa.ipc.read_schema(first)
        if _has_dictionary(schema):
            return None
        messages = []
        for message in reader:
            if message.type != "record batch":
                return None
            messages.append(message)
        return schema, messages
    file = pa.ipc.open_file(pa.BufferReader(buffer))
    schema = file.schema
    if _has_dictionary(schema):
        return None
    size = buffer.size
    (footer_size,) = struct.unpack_from("<i", buffer, size - 10)
    footer = buffer.slice(size - 10 - footer_size, footer_size)
    blocks = record_batch_blocks_of(memoryview(footer))
    messages = [pa.ipc.read_message(buffer.slice(o, m + b)) for o, m, b in blocks]
    if len(messages) != file.num_record_batches:
        return None
    return schema, messages


def _has_dictionary(schema: pa.Schema) -> bool:
    stack = [f.type for f in schema]
    while stack:
        dtype = stack.pop()
        if pa.types.is_dictionary(dtype):
            return True
        stack.extend(dtype.field(i).type for i in range(dtype.num_fields))
    return False
