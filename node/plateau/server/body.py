"""Request bodies read with a size limit, so an oversize append is refused early.

The declared Content-Length is checked before a byte is read; the running
total is checked while streaming (chunked bodies, lying clients). Chunks are
joined once: that join is the only copy of the body the server makes. With a
``Reservation`` the body's bytes also count against the node's in-flight
budget (``inflight``), from its declared length on.
"""

from __future__ import annotations

from starlette.requests import Request

from plateau.protocol.errors import InvalidInput, PayloadTooLarge
from plateau.server.inflight import Reservation


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"request body exceeds {limit} bytes; split it into smaller appends", max_bytes=limit
    )


def check_declared_length(request: Request, limit: int) -> int:
    """The declared body length (0 if none); 413 past ``limit``."""
    declared = request.headers.get("content-length")
    if declared is None:
        return 0
    try:
        length = int(declared)
    except ValueError:
        raise InvalidInput(f"bad Content-Length {declared!r}") from None
    if length > limit:
        raise _too_large(limit)
    return length


async def read_body(request: Request, limit: int, held: Reservation | None = None) -> bytes:
    declared = check_declared_length(request, limit)
    if held is not None:
        held.grow_to(declared)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if held is not None:
            held.grow_to(size)
        if chunk:
            chunks.append(chunk)
    return b"".join(chunks)
