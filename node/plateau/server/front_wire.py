"""HTTP/1.1 on a blocking socket, for the connection threads of ``append_front``.

Why a module of its own: what a thread needs to speak HTTP on a socket it
owns (peek at a head, receive exactly N bytes, reply, close politely, hand the
socket to uvicorn) is plumbing, apart from what is served on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import socket
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httptools
import pyarrow as pa

from plateau.protocol import JSON
from plateau.server.jsonout import dumps

Adopt = Callable[[socket.socket], None]
"""Hands a socket, its next request unread, to the event loop's HTTP server."""


class Gone(Exception):
    """The client went away mid-request: the connection is dropped, nothing stored."""


@dataclass
class Head:
    url: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    complete: bool = False
    keep_alive: bool = False
    parser: httptools.HttpRequestParser | None = None

    @property
    def plain_framing(self) -> bool:
        """No chunked body and no protocol switch: what the connection threads serve (the
        event loop serves the rest)."""
        return "transfer-encoding" not in self.headers and "upgrade" not in self.headers

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.complete = True
        # asked here: once a bodiless request is complete the parser has moved on to the
        # next one, and says keep-alive whatever this one said
        assert self.parser is not None
        self.keep_alive = self.parser.should_keep_alive()


IOV_BATCH = 512
"""At most this many pieces per ``sendmsg`` (Linux's ``IOV_MAX`` is 1024)."""
LINGER_SECONDS = 2.0
LINGER_BYTES = 64 << 20


def linger(conn: socket.socket) -> None:
    """Close after a reply as HTTP servers do: stop sending, then read what the client still
    sends for a moment. Closing with unread bytes makes the kernel send a reset, and a
    reset can drop the reply (a 413 sent before its body) before the client reads it."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(LINGER_SECONDS)
        deadline, seen = time.monotonic() + LINGER_SECONDS, 0
        while time.monotonic() < deadline and seen < LINGER_BYTES:
            got = conn.recv(1 << 16)
            if not got:
                return
            seen += len(got)


def send(conn: socket.socket, data: bytes | memoryview) -> None:
    """All of ``data``; the socket's timeout bounds each stall, not the whole reply.

    Why not ``sendall``: its timeout is the total time to send everything, so a
    reader on a slow link fetching a 16 MiB page would be cut off at a fixed
    duration however steadily it reads; uvicorn waits as long as the client
    keeps taking bytes, and so does this."""
    view = memoryview(data)
    try:
        while view:
            view = view[conn.send(view) :]
    except OSError as exc:  # the client's side, not the node's: told apart from disk errors
        raise Gone from exc


def send_pieces(conn: socket.socket, pieces: Sequence[bytes | memoryview | pa.Buffer]) -> None:
    """All of ``pieces`` in order, as ``send`` sends one, with ``sendmsg`` (scatter-gather:
    the kernel copies each piece once, nothing is joined first; ``reply_pieces``).
    ``IOV_BATCH`` pieces at a time; a partial send resumes inside the piece it stopped in."""
    views = [memoryview(p).cast("B") for p in pieces]
    views = [v for v in views if v.nbytes]
    i = 0
    try:
        while i < len(views):
            sent = conn.sendmsg(views[i : i + IOV_BATCH])
            while sent:
                n = views[i].nbytes
                if sent < n:
                    views[i] = views[i][sent:]
                    break
                sent -= n
                i += 1
    except OSError as exc:  # the client's side, as in ``send``
        raise Gone from exc


def consume(conn: socket.socket, n: int) -> None:
    """Read and drop ``n`` bytes from the socket (a peeked head, a refused body)."""
    try:
        while n:
            got = conn.recv(min(n, 1 << 16))
            if not got:
                raise Gone
            n -= len(got)
    except OSError as exc:
        raise Gone from exc


def fill(conn: socket.socket, target: memoryview) -> int:
    """Exactly ``len(target)`` bytes, in one system call while the client keeps sending.

    Why ``MSG_WAITALL`` on a blocking socket: a socket with a Python timeout is
    non-blocking underneath, so each ``recv_into`` returned what the socket buffer
    held and then retook the GIL. With 48 writers sending 2.5 MB bodies, the
    receiving threads retook it dozens of times a body, and the appends inside the
    gate waited on them (their ``decode`` stage ~0.2 ms alone, 4 ms among them).
    Here the kernel fills the whole body before the thread comes back. The
    socket's timeout becomes ``SO_RCVTIMEO`` meanwhile: a stall that long ends the
    call with what arrived (or ``EAGAIN``), so it still bounds a stall, not the
    whole body.
    """
    timeout = conn.gettimeout()
    got = 0
    try:
        conn.settimeout(None)
        if timeout is not None:
            whole = int(timeout)
            stall = struct.pack("ll", whole, int((timeout - whole) * 1e6))
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, stall)
        while got < len(target):
            n = conn.recv_into(target[got:], 0, socket.MSG_WAITALL)
            if not n:
                raise Gone
            got += n
    except OSError as exc:  # (EAGAIN too: the body stopped arriving)
        raise Gone from exc
    finally:
        with contextlib.suppress(OSError):
            conn.settimeout(timeout)
    return got


def phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:  # a status the standard library does not name: the line stays valid
        return ""


def reply_head(status: int, headers: list[tuple[bytes, bytes]], keep_alive: bool) -> bytes:
    """Status line and headers, with a ``date`` as uvicorn sends (RFC 9110 asks a server
    with a clock for one) and ``connection: close`` when the connection ends after it."""
    lines = [f"HTTP/1.1 {status} {phrase(status)}".encode(), b"date: " + _http_date()]
    lines += [k + b": " + v for k, v in headers]
    if not keep_alive:
        lines.append(b"connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


def json_reply(
    status: int, value: object, keep_alive: bool, headers: dict[str, str] | None = None
) -> bytes:
    body = dumps(value)
    fields = [(b"content-type", JSON.encode()), (b"content-length", str(len(body)).encode())]
    fields += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    return reply_head(status, fields, keep_alive) + body


_date_cache: tuple[int, bytes] = (0, b"")


def _http_date() -> bytes:
    """The current second's HTTP date, formatted once a second (a tuple swap: thread-safe)."""
    global _date_cache
    now = int(time.time())
    second, text = _date_cache
    if second != now:
        text = email.utils.formatdate(now, usegmt=True).encode()
        _date_cache = (now, text)
    return text


def adopter(loop: asyncio.AbstractEventLoop, protocol: Callable[[], asyncio.Protocol]) -> Adopt:
    """An ``Adopt`` that gives sockets to ``loop``'s ``protocol`` (uvicorn's HTTP protocol)."""
    tasks: set[asyncio.Task[object]] = set()

    async def take(sock: socket.socket) -> None:
        try:
            await loop.connect_accepted_socket(protocol, sock)
        except OSError:
            sock.close()

    def start(sock: socket.socket) -> None:
        task = loop.create_task(take(sock))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def adopt(sock: socket.socket) -> None:
        sock.setblocking(False)
        try:
            loop.call_soon_threadsafe(start, sock)
        except RuntimeError:  # the loop is closed: the node is stopping
            sock.close()

    return adopt
