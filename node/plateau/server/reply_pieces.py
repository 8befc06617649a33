"""Arrow replies kept as the pieces they are made of, sent with one ``sendmsg`` each.

Why: a decoded page (a parquet topic's, or any page not sent as stored) was
encoded into one new buffer of its size, so its bytes were copied twice on
the way out: into that buffer, then into the kernel's socket buffer. A page is
1.4 MB; with four readers of a parquet topic that first copy (and the fresh
memory it was written to) was a fifth of the node's CPU (``perf``:
``memmove``, and the page faults of the reply buffers). pyarrow's IPC writer
hands a Python sink the body buffers themselves (``pa.Buffer`` views of the
decoded columns; only the small parts it makes, metadata, padding, rebased
offsets of a slice, are new), so the reply is those pieces, and the kernel
copies each one once (``socket.sendmsg``, scatter-gather).

The pieces keep the columns they view alive until sent: the page's own rows,
which the reply held anyway. ``codecs.arrow_pieces`` and ``codecs.encode_stored``
make them; ``front_wire.send_pieces`` sends them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

import pyarrow as pa
from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

Piece: TypeAlias = bytes | pa.Buffer | memoryview
COALESCE_BELOW = 4096
"""Pieces smaller than this are joined with their neighbours (a copy of a few KiB) so a
page of many columns stays well inside one ``sendmsg``'s vector."""


class ReplyPieces:
    """An encoded reply: its bytes in order, as ``pieces``, ``nbytes`` in all."""

    def __init__(self, pieces: Sequence[Piece]) -> None:
        self.pieces = list(pieces)
        self.nbytes = sum(_size(p) for p in self.pieces)

    def join(self) -> memoryview:
        """One copy of the whole reply, for a path that needs its bytes in one piece.

        Why not ``b"".join``: a page is over a MiB, so each join was a fresh
        ``mmap`` of pages the kernel faulted in, zeroed and unmapped again (perf:
        over half of the node's CPU at 8M rows/s of stored pages). Arrow's pool
        hands the same memory back page after page.
        """
        buffer = pa.allocate_buffer(self.nbytes)
        out = pa.FixedSizeBufferWriter(buffer)
        for piece in self.pieces:
            out.write(piece)
        return memoryview(buffer)


class ReplySink:
    """A write-only file for ``pa.PythonFile``: keeps what Arrow writes, coalescing small
    writes, never copying a large buffer."""

    def __init__(self) -> None:
        self.pieces: list[Piece] = []
        self._small: list[Piece] = []
        self._small_size = 0
        self._pos = 0
        self.closed = False

    def write(self, data: Piece) -> int:
        n = _size(data)
        self._pos += n
        if n < COALESCE_BELOW:
            self._small.append(data)
            self._small_size += n
            if self._small_size >= COALESCE_BELOW:
                self._flush_small()
        else:
            self._flush_small()
            self.pieces.append(data)
        return n

    def _flush_small(self) -> None:
        if self._small:
            self.pieces.append(b"".join(memoryview(p) for p in self._small))
            self._small = []
            self._small_size = 0

    def tell(self) -> int:
        return self._pos

    def flush(self) -> None:
        self._flush_small()

    def close(self) -> None:
        self._flush_small()
        self.closed = True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False


class PiecesResponse(Response):
    """A ``Response`` whose body stays in pieces for a connection thread that sends them
    (``append_front``); on the event loop it is joined once and sent as usual."""

    def __init__(
        self,
        body: ReplyPieces,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        self.pieces = body
        super().__init__(None, 200, headers, media_type, background)
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.raw_headers.append((b"content-length", str(body.nbytes).encode()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.body = self.pieces.join()
        await super().__call__(scope, receive, send)


def _size(piece: Piece) -> int:
    return piece.size if isinstance(piece, pa.Buffer) else len(piece)
