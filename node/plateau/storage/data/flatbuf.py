"""Reading FlatBuffers by hand: the few Arrow IPC tables the node looks into.

Why not a FlatBuffers library: the node reads three fields of two tables
(``arrow_footer``, ``ipc_messages``), which a few struct unpacks do, and the
generated Arrow bindings would be a dependency for that alone. A FlatBuffer
is a root ``uoffset`` to a table; a table starts with a signed offset back to
its vtable, whose ``uint16`` entries give each field's offset in the table
(0: absent, the default applies); a table or vector field holds a ``uoffset``
forward to it; a vector is a ``uint32`` count and its elements.
"""

from __future__ import annotations

import struct
from typing import TypeAlias

Buf: TypeAlias = bytes | bytearray | memoryview


class FlatBufferError(ValueError):
    """Malformed FlatBuffer: callers read the data through pyarrow instead, or refuse it."""


def root_table(buf: Buf) -> int:
    (root,) = struct.unpack_from("<I", buf, 0)
    return int(root)


def field_at(buf: Buf, table: int, field: int) -> int | None:
    """Where field ``field`` of the table at ``table`` lies, or None when it is absent."""
    (vtable_back,) = struct.unpack_from("<i", buf, table)
    vtable = table - vtable_back
    vtable_size, _ = struct.unpack_from("<HH", buf, vtable)
    slot = 4 + 2 * field
    if slot + 2 > vtable_size:
        return None
    (offset,) = struct.unpack_from("<H", buf, vtable + slot)
    return table + offset if offset else None


def table_at(buf: Buf, table: int, field: int) -> int | None:
    """The table a table-valued field points to, or None when the field is absent."""
    at = field_at(buf, table, field)
    if at is None:
        return None
    (forward,) = struct.unpack_from("<I", buf, at)
    return at + int(forward)


def vector_at(buf: Buf, table: int, field: int, element: int) -> tuple[int, int] | None:
    """(start of the elements, count) of a vector field of ``element``-byte items, or None."""
    start = table_at(buf, table, field)
    if start is None:
        return None
    (count,) = struct.unpack_from("<I", buf, start)
    if start + 4 + count * element > len(buf):
        raise FlatBufferError("a vector runs past the end of the buffer")
    return start + 4, count
