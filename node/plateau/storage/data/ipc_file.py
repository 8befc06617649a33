"""An Arrow IPC file written message by message, from the request's buffers (``append_file``).

The layout is Arrow's file format, as pyarrow writes it::

    "ARROW1\\0\\0" <schema message> <batch message>* <end-of-stream> <footer> <int32> "ARROW1"

Durability ordering (the open segment relies on it): a batch is acknowledged
only after its bytes are fsynced (group commit); until the footer is
written the file is read back as a stream (``recovery``), and a torn tail
is cut at the last whole message. The footer is written last, at seal.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pyarrow as pa

from plateau.storage.data.append_file import AppendFile
from plateau.storage.data.arrow_footer import MAGIC, Block, footer_with_blocks
from plateau.storage.data.ipc_messages import Encoded

FILE_START = MAGIC + b"\0\0"
END_OF_STREAM = b"\xff\xff\xff\xff\0\0\0\0"


def empty_footer(schema: pa.Schema) -> bytes:
    """pyarrow's footer for ``schema`` with no batch: the schema table is pyarrow's own."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema):
        pass
    data: bytes = sink.getvalue().to_pybytes()
    (size,) = struct.unpack_from("<i", data, len(data) - 10)
    return data[len(data) - 10 - size : len(data) - 10]


class IpcFileWriter:
    """Appends encoded batch messages to ``file``; mutated only under the partition lock."""

    def __init__(self, file: AppendFile, schema: pa.Schema) -> None:
        self.file = file
        self.schema = schema
        self.blocks: list[Block] = []
        self.position = file.write([FILE_START, schema.serialize()])

    def append(self, messages: Sequence[Encoded]) -> None:
        """Write ``messages`` after the last one; on an error, cut the file back to before them."""
        start = self.position
        pieces = [p for m in messages for p in m.pieces]
        try:
            written = self.file.write(pieces)
        except BaseException:
            self.file.cut(start)
            raise
        pos = start
        for m in messages:
            self.blocks.append(Block(pos, m.meta_length, m.body_length))
            pos += m.length
        if pos != start + written:
            self.file.cut(start)
            raise OSError(f"wrote {written} bytes of messages measuring {pos - start}")
        self.position = pos

    def finish(self) -> None:
        """End of stream, then the footer: the file becomes a complete Arrow IPC file, synced."""
        footer = footer_with_blocks(empty_footer(self.schema), self.blocks)
        self.file.write([END_OF_STREAM, footer, struct.pack("<i", len(footer)), MAGIC])
        self.file.finish()
