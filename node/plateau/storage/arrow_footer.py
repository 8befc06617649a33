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

Every failure is ``ValueError``; callers then read through pyarrow instead.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

MAGIC = b"ARROW1"
_TRAILER = 4 + len(MAGIC)  # int32 footer length + magic
_RECORD_BATCHES_FIELD = 3  # Footer's fourth field
_BLOCK = struct.Struct("<qi4xq")  # offset, metaDataLength, padding, bodyLength
MAX_FOOTER_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Block:
    """One encapsulated message: ``offset`` where it starts, ``length`` bytes in all."""

    offset: int
    length: int


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
    blocks = [Block(o, m + b) for o, m, b in _blocks(footer, _RECORD_BATCHES_FIELD)]
    for block in blocks:
        if block.offset < len(MAGIC) or block.length <= 0 or block.offset + block.length > size:
            raise ValueError(f"block out of the file: {block}")
    return blocks


def _blocks(buf: bytes, field: int) -> list[tuple[int, int, int]]:
    """The vector of Blocks in field ``field`` of the FlatBuffer's root table."""
    try:
        (root,) = struct.unpack_from("<I", buf, 0)
        (vtable_back,) = struct.unpack_from("<i", buf, root)
        vtable = root - vtable_back
        vtable_size, _ = struct.unpack_from("<HH", buf, vtable)
        slot = 4 + 2 * field
        if slot + 2 > vtable_size:
            return []  # field absent: no batches
        (field_offset,) = struct.unpack_from("<H", buf, vtable + slot)
        if field_offset == 0:
            return []
        at = root + field_offset
        (vector_back,) = struct.unpack_from("<I", buf, at)
        vector = at + vector_back
        (count,) = struct.unpack_from("<I", buf, vector)
        if vector + 4 + count * _BLOCK.size > len(buf):
            raise ValueError("block vector runs past the footer")
        return [_BLOCK.unpack_from(buf, vector + 4 + i * _BLOCK.size) for i in range(count)]
    except struct.error as exc:
        raise ValueError(f"malformed Arrow IPC footer: {exc}") from exc
