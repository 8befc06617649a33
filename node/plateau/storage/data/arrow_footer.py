"""Where each record batch of an Arrow IPC file lies, read from the file's footer.

Why by hand: pyarrow reads a batch only through its own file reader, which
reads through the page cache; a history scan reads each byte once, so the
node reads batches itself with ``O_DIRECT`` (``direct_io``) and needs their
byte ranges. pyarrow does not expose them, so this reads them from the
footer, a small FlatBuffer defined by Arrow's ``File.fbs``::

    <magic "ARROW1" + padding> <stream of messages> <footer> <int32 footer size> "ARROW1"

    struct Block { offset: long; metaDataLength: int; bodyLength: long; }   // 24 bytes
    table Footer { version: short; schema: Schema; dictionaries: [Block];
                   recordBatches: [Block]; custom_metadata: [KeyValue]; }

Each block's metadata (``Message.fbs``) also gives its batch's row count,
which readers need at open, and its buffers' codec, which decides whether a
page can be sent as stored (``batch_header``): ``table Message { version; header: MessageHeader
(a union: type, then table); bodyLength; ... }`` with ``table RecordBatch {
length: long; ... }``. Reading those few hundred bytes per batch is far
cheaper than decoding a column of each batch to count its rows.

Every failure is ``ValueError``; callers then read through pyarrow instead.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from plateau.storage.data.flatbuf import field_at as _field
from plateau.storage.data.flatbuf import root_table as _root
from plateau.storage.data.flatbuf import table_at, vector_at

MAGIC = b"ARROW1"
_TRAILER = 4 + len(MAGIC)  # int32 footer length + magic
_RECORD_BATCHES_FIELD = 3  # Footer's fourth field
_BLOCK = struct.Struct("<qi4xq")  # offset, metaDataLength, padding, bodyLength
MAX_FOOTER_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Block:
    """One encapsulated message: where it starts, its metadata's and its body's size."""

    offset: int
    meta_length: int
    body_length: int

    @property
    def length(self) -> int:
        return self.meta_length + self.body_length


def record_batch_blocks(fd: int) -> list[Block]:
    """The record batches' blocks of the Arrow IPC file open as ``fd``, in file order."""
    size = os.fstat(fd).st_size
    if size < len(MAGIC) * 2 + _TRAILER:
        raise ValueError("too short for an Arrow IPC file")
    trailer = os.pread(fd, _TRAILER, size - _TRAILER)
    (footer_size,) = struct.unpack_from("<i", trailer)
    if trailer[4:] != MAGIC or not 0 < footer_size <= min(MAX_FOOTER_BYTES, size - _TRAILER):
        raise ValueError("no Arrow IPC footer")
    footer = os.pread(fd, footer_size, size - _TRAILER - footer_size)
    if len(footer) != footer_size:
        raise ValueError("short read of the footer")
    blocks = [Block(o, m, b) for o, m, b in _blocks(footer, _RECORD_BATCHES_FIELD)]
    for block in blocks:
        if block.offset < len(MAGIC) or block.meta_length <= 0 or block.body_length < 0:
            raise ValueError(f"block out of the file: {block}")
        if block.offset + block.length > size:
            raise ValueError(f"block out of the file: {block}")
    return blocks


def record_batch_blocks_of(footer: bytes | memoryview) -> list[tuple[int, int, int]]:
    """(offset, metadata length, body length) of each batch listed in a footer's bytes."""
    return _blocks(footer, _RECORD_BATCHES_FIELD)


def batch_metadata(fd: int, blocks: list[Block]) -> list[bytes]:
    """Each record batch's encapsulated metadata (its prefix and FlatBuffer), no body.

    Each metadata is a few hundred bytes at the start of its block: the
    kernel is asked for all of them first (``WILLNEED``), so a cold file costs
    one round of parallel reads instead of one read per batch.
    """
    for block in blocks:
        os.posix_fadvise(fd, block.offset, block.meta_length, os.POSIX_FADV_WILLNEED)
    return [os.pread(fd, b.meta_length, b.offset) for b in blocks]


def flatbuffer_of(meta: bytes) -> bytes:
    """An encapsulated message's metadata without its prefix (the pre-1.0 format has no
    continuation marker)."""
    return meta[8:] if meta[:4] == _CONTINUATION else meta[4:]


_CONTINUATION = b"\xff\xff\xff\xff"
_MESSAGE_HEADER = 2  # Message.header (header_type is field 1)
_MESSAGE_HEADER_TYPE = 1
_RECORD_BATCH_COMPRESSION = 3  # RecordBatch.compression (length is field 0)
RECORD_BATCH = 3  # MessageHeader's RecordBatch member
LZ4_FRAME = 0  # BodyCompression.codec: its default
ZSTD = 1


@dataclass(frozen=True)
class BatchHeader:
    """What a reader needs of a record batch before it reads the batch's body."""

    rows: int  # RecordBatch.length
    codec: int | None  # BodyCompression.codec: 0 LZ4_FRAME, 1 ZSTD; None: plain buffers


def batch_header(meta: bytes) -> BatchHeader:
    """The row count and codec of one encapsulated record batch message's metadata.

    One parser for both, so that a reader that opens a segment reads each
    batch's metadata once (rows for the index, the codec to decide whether a
    page can go out as stored)."""
    buf = flatbuffer_of(meta)
    try:
        message = _root(buf)
        kind = _field(buf, message, _MESSAGE_HEADER_TYPE)
        if kind is None or buf[kind] != RECORD_BATCH:
            raise ValueError("the message is not a record batch")
        header = table_at(buf, message, _MESSAGE_HEADER)
        if header is None:
            raise ValueError("the message has no header")
        length = _field(buf, header, 0)  # RecordBatch.length; absent: the default, 0
        (rows,) = struct.unpack_from("<q", buf, length) if length is not None else (0,)
        compression = table_at(buf, header, _RECORD_BATCH_COMPRESSION)
        codec = None
        if compression is not None:
            at = _field(buf, compression, 0)
            codec = buf[at] if at is not None else LZ4_FRAME
    except (struct.error, IndexError) as exc:
        raise ValueError(f"malformed record batch metadata: {exc}") from exc
    if rows < 0:
        raise ValueError(f"negative row count {rows}")
    return BatchHeader(int(rows), codec)


def _blocks(buf: bytes | memoryview, field: int) -> list[tuple[int, int, int]]:
    """The vector of Blocks in field ``field`` of the FlatBuffer's root table."""
    try:
        at = vector_at(buf, _root(buf), field, _BLOCK.size)
        if at is None:
            return []  # field absent: no batches
        start, count = at
        return [_BLOCK.unpack_from(buf, start + i * _BLOCK.size) for i in range(count)]
    except struct.error as exc:
        raise ValueError(f"malformed Arrow IPC footer: {exc}") from exc


def footer_with_blocks(empty_footer: bytes, blocks: list[Block]) -> bytes:
    """``empty_footer`` (pyarrow's, of a file with no batch) listing ``blocks`` as its batches.

    The new Block vector goes after the old footer and its field's uoffset is
    pointed at it: every offset stays forward, the schema table is pyarrow's
    own bytes, untouched. The old, empty vector stays behind, unreferenced.
    """
    out = bytearray(empty_footer)
    at = _field(out, _root(out), _RECORD_BATCHES_FIELD)
    if at is None:
        raise ValueError("the footer has no recordBatches field to point elsewhere")
    while (len(out) + 4) % 8:  # the elements are 8-aligned, the count just before them
        out.append(0)
    struct.pack_into("<I", out, at, len(out) - at)
    out += struct.pack("<I", len(blocks))
    for b in blocks:
        out += _BLOCK.pack(b.offset, b.meta_length, b.body_length)
    while len(out) % 8:
        out.append(0)
    return bytes(out)
