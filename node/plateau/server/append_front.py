"""Appends and partition reads on a thread per connection; the rest handed to uvicorn, one port.

Why: with 4 closed-loop writers of 1.4 MB Arrow bodies the node's rate was
its HTTP stack's. In one run of bench/ingest_floor.py a bare uvicorn app
(httptools, uvloop, as the node runs it) that only received each body and
wrote and fdatasynced it in a thread did 0.76x plateau's Rust server, as
much as the whole node; a thread per connection on blocking sockets doing the
same did 1.86x on a third of the CPU. Through the event loop every 64 KiB
piece of a body is a callback on the loop's thread, and every hop between it
and the append threads waits for the GIL. Here one thread receives the body
with ``recv_into`` straight into recycled memory (``body_pool``, the GIL
released), decodes, appends, waits for the fsync and replies: no hand-off.

How one port serves both: ``AppendFront`` owns the node's listening socket.
A connection's thread *peeks* at the next request's head (``MSG_PEEK``: the
bytes stay in the socket). A plain append (POST to the append path, a
Content-Length, no chunked body, no upgrade) is consumed and served here, with
the same checks, replies and errors as ``data_plane.append``; so is a partition
read (GET of a partition's records, no body), through the event loop's own
``data_plane.read_partition_now``. Anything else
(another route, a chunked body, a head that did not arrive in one piece,
more than ``server.append_connections`` connections) hands the socket,
unread, to uvicorn's event loop (``loop.connect_accepted_socket`` with
uvicorn's own protocol), which serves the connection from then on as if it
had accepted it. So every other request keeps uvicorn's HTTP handling, and
a connection's requests are answered in order.

Lock order: ``_lock`` (the set of connections served here) is a leaf. A thread
holds at most one slot of one gate (``fifo_gate``: appends, reads) at a time,
and never ``_lock`` while it waits for one.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import unquote

import httptools
import pyarrow as pa
from starlette.requests import Request

from plateau.protocol import JSON
from plateau.protocol.errors import Busy, PlateauError
from plateau.protocol.names import check_name
from plateau.server.auth import bearer_token, check_token
from plateau.server.body import too_large
from plateau.server.codecs import append_media_type, decode_append_messages
from plateau.server.data_plane import (
    APPEND_ROUTE,
    READ_PARTITION_ROUTE,
    STAGE_BODY,
    STAGE_DECODE,
    STAGE_QUEUE,
    read_partition_now,
    rejection_reason,
)
from plateau.server.errors import (
    error_headers,
    response_for,
)
from plateau.server.fifo_gate import FifoGate
from plateau.server.front_wire import (
    Adopt,
    Gone,
    Head,
    consume,
    fill,
    json_reply,
    linger,
    reply_head,
    send,
    send_pieces,
)
from plateau.server.metrics import (
    APPEND_CONNECTIONS,
    APPEND_GATE_WAITING,
    FRONT_READS,
    REJECTED_APPENDS,
)
from plateau.server.reply_pieces import PiecesResponse
from plateau.server.state import NodeState

log = logging.getLogger("plateau.server")

QUEUE_RETRY_AFTER_SECONDS = 1.0
"""Retry-After of a saturated node's 429 (the header counts whole seconds)."""

MAX_HEAD_BYTES = 64 * 1024
READ_SLOTS = 40
"""Partition reads at once on connection threads: anyio's default thread limit, which
bounded them through the event loop (each builds a page outside the memory budget)."""
IO_SECONDS = 30.0
"""A body that stops arriving, or a reply that stops being taken, for this long: the
connection is dropped (nothing of such a body stored)."""


@dataclass
class _Read:
    """A partition read's head, already consumed from the socket (a GET has no body)."""

    topic: str
    partition: str
    path: str
    query: bytes
    headers: dict[str, str]
    keep_alive: bool


@dataclass
class _Append:
    """A plain append's head, already consumed from the socket."""

    topic: str
    partition: str
    headers: dict[str, str]
    length: int
    keep_alive: bool

    @property
    def expects_continue(self) -> bool:
        """The client holds the body back until it gets ``100 Continue``."""
        return self.headers.get("expect", "").lower() == "100-continue"


class AppendFront:
    def __init__(
        self, state: NodeState, sock: socket.socket, adopt: Adopt, idle_seconds: float
    ) -> None:
        self._state = state
        self._sock = sock
        self._adopt = adopt
        self._idle_seconds = idle_seconds
        self._max = state.settings.server.append_connections
        self._gate = FifoGate(state.settings.server.append_concurrency, APPEND_GATE_WAITING)
        self._read_gate = FifoGate(READ_SLOTS)
        self._lock = threading.Lock()
        self._served: dict[socket.socket, threading.Thread] = {}
        self._closing = False
        self._acceptor = threading.Thread(target=self._accept, name="append-accept", daemon=True)

    def start(self, backlog: int) -> None:
        self._sock.setblocking(True)
        self._sock.listen(backlog)
        self._acceptor.start()

    def close(self, timeout: float = 30.0) -> None:
        """Stop accepting; appends under way finish and reply, idle connections close."""
        self._closing = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._acceptor.join(timeout)
        with self._lock:
            served = list(self._served.items())
        for conn, _ in served:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RD)  # a waiting peek returns; a reply still goes out
        deadline = time.monotonic() + timeout
        for _, thread in served:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._closing:
                    return
                log.exception("accept failed")
                time.sleep(0.1)  # (EMFILE: give descriptors a chance to be closed)
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            with self._lock:
                full = len(self._served) >= self._max
                if not full:
                    self._served[conn] = thread
                    APPEND_CONNECTIONS.set(len(self._served))
            if full:
                self._adopt(conn)
            else:
                thread.start()

    def _serve(self, conn: socket.socket) -> None:
        handed_over = False
        try:
            while not self._closing:
                request = self._next_request(conn)
                if request is None:
                    return
                if isinstance(request, _Read):
                    pieces, keep = self._answer_read(request)
                elif isinstance(request, _Append):
                    reply, keep = self._answer(conn, request)
                    pieces = [reply]
                else:  # "other"
                    handed_over = True
                    return
                send_pieces(conn, pieces)  # a page is not copied to join its head
                if not keep:
                    linger(conn)
                    return
        except (Gone, OSError):
            return
        except Exception:  # a bug: logged, this connection dropped, the node goes on
            log.exception("append connection failed")
        finally:
            with self._lock:
                self._served.pop(conn, None)
                APPEND_CONNECTIONS.set(len(self._served))
            if handed_over and not self._closing:
                self._adopt(conn)
            else:
                conn.close()

    def _next_request(self, conn: socket.socket) -> _Append | _Read | str | None:
        """The next request if it is a plain append or a partition read (its head consumed);
        "other" if the event loop should serve it (nothing consumed); None if the client
        closed."""
        conn.settimeout(self._idle_seconds)
        try:
            peeked = conn.recv(MAX_HEAD_BYTES, socket.MSG_PEEK)
        except TimeoutError:
            return None  # idle past the keep-alive timeout, as uvicorn closes it
        if not peeked:
            return None
        end = peeked.find(b"\r\n\r\n")
        if end < 0:
            return "other"  # a head in several pieces: the event loop waits for the rest
        head = Head()
        parser = head.parser = httptools.HttpRequestParser(head)
        try:
            parser.feed_data(peeked[: end + 4])
        except httptools.HttpParserError:
            return "other"  # uvicorn answers a malformed request its own way
        if not head.complete:
            return "other"
        # percent-decoded, as uvicorn gives the event loop's routes their path
        url = httptools.parse_url(head.url)
        path = unquote(url.path.decode("latin-1"))
        headers = head.headers
        if not head.plain_framing:
            return "other"
        if parser.get_method() == b"GET":
            read = READ_PARTITION_ROUTE.pattern.match(path)
            if read is None or headers.get("content-length", "0") != "0":
                return "other"
            conn.settimeout(IO_SECONDS)  # from here a stall, not an idle connection
            consume(conn, end + 4)
            return _Read(
                read["topic"],
                read["partition"],
                path,
                url.query or b"",
                headers,
                head.keep_alive,
            )
        if parser.get_method() != b"POST":
            return "other"
        match = APPEND_ROUTE.pattern.match(path)  # the event loop's own matcher
        if match is None or "content-length" not in headers:
            return "other"
        try:
            length = int(headers["content-length"])
        except ValueError:
            return "other"
        if length < 0:
            return "other"
        conn.settimeout(IO_SECONDS)
        consume(conn, end + 4)
        return _Append(match["topic"], match["partition"], headers, length, head.keep_alive)

    @contextlib.contextmanager
    def _append_slot(self) -> Iterator[None]:
        """One of the engine's append slots, or 429 once ``append_queue_timeout_ms`` passed."""
        server = self._state.settings.server
        wait_ms = server.append_queue_timeout_ms
        if not self._gate.acquire(wait_ms / 1000 if wait_ms > 0 else None):
            raise Busy(
                f"the node is saturated: this append waited {wait_ms:g} ms for one of its "
                f"{server.append_concurrency} append slots (server.append_queue_timeout_ms) "
                "and was not stored; retry after Retry-After seconds",
                retry_after=QUEUE_RETRY_AFTER_SECONDS,
            )
        try:
            yield
        finally:
            self._gate.release()

    def _answer(self, conn: socket.socket, append: _Append) -> tuple[bytes, bool]:
        """The reply to one append, and whether the connection can take another request."""
        state = self._state
        started = time.perf_counter()
        body_read = False
        try:
            check_token(bearer_token(append.headers.get("authorization")), state.write_tokens)
            topic = check_name("topic", append.topic)
            partition = check_name("partition", append.partition)
            media = append_media_type(append.headers.get("content-type"))
            limit = state.settings.server.max_request_bytes
            if append.length > limit:
                raise too_large(limit)
            with state.bodies.hold_blocking(append.length):
                if append.expects_continue:
                    send(conn, b"HTTP/1.1 100 Continue\r\n\r\n")
                body = _read_body(conn, append.length, state, media != JSON)
                body_read = True
                received = time.perf_counter()
                STAGE_BODY.observe(received - started)
                with self._append_slot():
                    decoding = time.perf_counter()
                    STAGE_QUEUE.observe(decoding - received)
                    table, messages = decode_append_messages(media, body)
                    STAGE_DECODE.observe(time.perf_counter() - decoding)
                    span = state.engine.append(topic, partition, table, messages)
            keep = append.keep_alive
            return json_reply(200, {"span": span.to_json()}, keep), keep
        except PlateauError as exc:
            reason = rejection_reason(exc)
            if reason is not None:
                REJECTED_APPENDS.labels(reason=reason).inc()
            if exc.status >= 500:
                log.warning(
                    "POST /topic/%s/partition/%s -> %d: %s",
                    append.topic,
                    append.partition,
                    exc.status,
                    exc.message,
                )
            keep = append.keep_alive and (body_read or self._skip_body(conn, append))
            error = {**exc.details(), "message": exc.message, "code": exc.status}
            return json_reply(exc.status, error, keep, error_headers(exc)), keep
        except Gone:
            raise
        except Exception as exc:  # a bug, or the disk failing: a 500, as on the event loop
            log.exception("POST /topic/%s/partition/%s failed", append.topic, append.partition)
            error = {"message": f"internal error: {type(exc).__name__}", "code": 500}
            return json_reply(500, error, False), False

    def _answer_read(self, read: _Read) -> tuple[list[bytes | memoryview | pa.Buffer], bool]:
        """A partition read served on this thread: the reply's head and body, and whether
        the connection can take another request."""
        scope = {
            "type": "http",
            "method": "GET",
            "path": read.path,
            "query_string": read.query,
            "headers": [
                (k.encode("latin-1"), v.encode("latin-1")) for k, v in read.headers.items()
            ],
            "root_path": "",
        }
        request = Request(scope)
        FRONT_READS.inc()
        try:
            with self._read_gate.slot():
                response = read_partition_now(request, self._state, read.topic, read.partition)
        except Exception as exc:  # refused, a bug, or the disk failing: as on the event loop
            response = response_for(exc, request)
        head = reply_head(response.status_code, response.raw_headers, read.keep_alive)
        if isinstance(response, PiecesResponse):
            return [head, *response.pieces.pieces], read.keep_alive
        return [head, response.body], read.keep_alive

    def _skip_body(self, conn: socket.socket, append: _Append) -> bool:
        """After a refusal before the body was read: read and drop it, so that the
        connection can take the next request (as uvicorn does). Not a body past
        ``max_request_bytes``, nor one the client holds back for a 100 Continue it did not
        get: those connections close after the reply. True if the body was dropped."""
        if append.expects_continue or append.length > self._state.settings.server.max_request_bytes:
            return False
        try:
            consume(conn, append.length)
        except Gone:
            return False
        return True


def _read_body(conn: socket.socket, size: int, state: NodeState, pooled: bool) -> bytes | pa.Buffer:
    """Exactly ``size`` bytes; a large Arrow body straight into a body-pool region."""
    if pooled and size:
        lease = state.body_pool.lease(size)
        lease.receive(lambda target: fill(conn, target))
        return lease.buffer()
    buf = bytearray(size)
    fill(conn, memoryview(buf))
    return bytes(buf)
