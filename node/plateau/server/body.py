"""Request bodies read with a size limit, so an oversize append is refused early.

The declared Content-Length is checked before a byte is read; the running
total is checked while streaming (chunked bodies, lying clients). Chunks are
copied once: joined, or, for a large append body, into recycled memory
(``body_pool``); that is the only copy of the body the server makes. With a
``Reservation`` the body's bytes also count against the node's in-flight
budget (``inflight``), from its declared length on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request

from plateau.protocol.errors import InvalidInput, PayloadTooLarge
from plateau.server.body_pool import MIN_POOLED_BYTES, Pieces
from plateau.server.inflight import Reservation


def too_large(limit: int) -> PayloadTooLarge:
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
        raise too_large(limit)
    return length


async def _chunks(
    request: Request, limit: int, declared: int, held: Reservation | None
) -> AsyncIterator[bytes]:
    if held is not None:
        held.grow_to(declared)
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        if held is not None:
            held.grow_to(size)
        if chunk:
            yield chunk


async def read_body(request: Request, limit: int, held: Reservation | None = None) -> bytes:
    declared = check_declared_length(request, limit)
    return b"".join([chunk async for chunk in _chunks(request, limit, declared, held)])


async def read_append_body(
    request: Request, limit: int, held: Reservation | None, pooled: bool
) -> bytes | Pieces:
    """Like ``read_body``; with ``pooled``, a body declared at ``MIN_POOLED_BYTES`` or more
    is left in its pieces for ``BodyPool.gather`` (Arrow bodies; JSON is parsed from
    ``bytes``). A body shorter than declared (the client went away) never reaches a
    decoder: the server reports the disconnect first.
    """
    declared = check_declared_length(request, limit)
    chunks = [chunk async for chunk in _chunks(request, limit, declared, held)]
    if pooled and declared >= MIN_POOLED_BYTES:
        return Pieces(chunks, sum(len(c) for c in chunks))
    return b"".join(chunks)
