"""An ``httpx`` transport on the standard library's ``http.client``, for bulk reads.

Why: a page of records is a megabyte or more of Arrow. ``httpx``'s own
transport receives it in 64 KiB pieces through ``h11`` and joins them, and
that cost 250 ns of CPU per 132-byte row, three times what the same pages
cost through this transport (84 ns; ``http.client`` reads a body of known
length in one call). In Spark's url mode the reader shares the CPU with the
JVM and the node, so that difference decided how fast a topic could be read.
Everything above the transport (retries, error mapping, page parsing) is
the client's own, unchanged.

``PlateauClient`` on this transport also skips ``httpx.Client`` itself
(``send``): building an ``httpx.Request`` (URL parsing, merging, cookies)
cost another 280 us of CPU per request, as much as the exchange on the
socket. The reply is still an ``httpx.Response``, so the client parses and
maps it exactly as before.

What it does not do, and ``httpx``'s transport does: HTTP proxies
(``HTTP_PROXY`` and the like are ignored; the connection goes straight to the
node), HTTP/2, and ``httpx``'s certificate settings (TLS verifies against the
system's CA store, or ``SSL_CERT_FILE``).

Connections: one per request in flight, kept for reuse afterwards in an idle
list (``list.append``/``pop`` are atomic, so threads sharing a client need no
lock). A kept connection the node has closed (it closes idle ones after 5 s) is
seen before use, as its socket reads ready, and replaced. If the node closes
it just as a request goes out, a GET or HEAD is sent again once on a new
connection (sending it again cannot change anything); any other request
fails as sent, as with ``httpx``.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx

REPEATABLE = frozenset({"GET", "HEAD"})
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


Key = tuple[str, str, int]  # scheme, host, port


@dataclass(frozen=True)
class Origin:
    """A base URL split once: where to connect, the Host header, the path prefix."""

    key: Key
    host: str
    prefix: str

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError as exc:
            raise httpx.UnsupportedProtocol(f"bad port in {url!r}: {exc}") from exc
        key = (scheme, parts.hostname or "", port)
        return cls(key=key, host=parts.netloc, prefix=parts.path.rstrip("/"))


class DirectTransport(httpx.BaseTransport):
    def __init__(self) -> None:
        self._idle: dict[Key, list[http.client.HTTPConnection]] = {}
        self._tls: ssl.SSLContext | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        key = (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))
        timeouts: dict[str, Any] = request.extensions.get("timeout") or {}
        body = request.read() or None
        target = url.raw_path.decode("ascii")
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        return self._roundtrip(key, request.method, target, body, headers, timeouts, request)

    def send(
        self,
        origin: Origin,
        method: str,
        path: str,
        params: Sequence[tuple[str, str]],
        headers: Mapping[str, str],
        body: bytes | None,
        timeout: float,
    ) -> httpx.Response:
        """``method path?params`` with no ``httpx.Request`` built; fails as ``httpx`` would."""
        target = origin.prefix + path
        if params:
            target += "?" + urlencode(params, quote_via=quote, safe="")
        lines = [("host", origin.host), *headers.items()]
        timeouts = {"connect": timeout, "read": timeout}
        return self._roundtrip(origin.key, method, target, body, lines, timeouts, None)

    def _roundtrip(
        self,
        key: Key,
        method: str,
        target: str,
        body: bytes | None,
        headers: list[tuple[str, str]],
        timeouts: Mapping[str, Any],
        request: httpx.Request | None,
    ) -> httpx.Response:
        conn, reused = self._kept(key, timeouts), True
        if conn is None:
            conn, reused = self._new(key, timeouts), False
        try:
            try:
                reply, content = _exchange(conn, method, target, body, headers)
            except STALE:
                conn.close()
                if not reused or method not in REPEATABLE:
                    raise
                conn = self._new(key, timeouts)
                reply, content = _exchange(conn, method, target, body, headers)
        except BaseException as exc:
            conn.close()
            raise _as_httpx(exc, request) from exc
        if reply.will_close:
            conn.close()
        else:
            self._idle.setdefault(key, []).append(conn)
        return httpx.Response(
            reply.status, headers=reply.getheaders(), content=content, request=request
        )

    def close(self) -> None:
        for conns in self._idle.values():
            while conns:
                conns.pop().close()

    def _kept(self, key: Key, timeouts: Mapping[str, Any]) -> http.client.HTTPConnection | None:
        """An idle connection still open; one the node closed reads as ready (EOF)."""
        kept = self._idle.setdefault(key, [])
        while True:
            try:
                conn = kept.pop()
            except IndexError:
                return None
            if conn.sock is not None and not select.select([conn.sock], [], [], 0)[0]:
                conn.sock.settimeout(timeouts.get("read"))
                return conn
            conn.close()

    def _new(self, key: Key, timeouts: Mapping[str, Any]) -> http.client.HTTPConnection:
        """A connected connection (errors as ``httpx`` connect errors: nothing was sent)."""
        scheme, host, port = key
        conn: http.client.HTTPConnection
        if scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            conn = http.client.HTTPSConnection(
                host, port, timeout=timeouts.get("connect"), context=self._tls
            )
        elif scheme == "http":
            conn = http.client.HTTPConnection(host, port, timeout=timeouts.get("connect"))
        else:
            raise httpx.UnsupportedProtocol(f"scheme {scheme!r} is not http or https")
        try:
            conn.connect()
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "connect timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        assert conn.sock is not None
        conn.sock.settimeout(timeouts.get("read"))
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn


def _exchange(
    conn: http.client.HTTPConnection,
    method: str,
    target: str,
    body: bytes | None,
    headers: list[tuple[str, str]],
) -> tuple[http.client.HTTPResponse, bytes]:
    """One request and its whole reply body (one read call when its length is known)."""
    conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
    for name, value in headers:
        conn.putheader(name, value)
    if body is not None and not any(n.lower() == "content-length" for n, _ in headers):
        conn.putheader("content-length", str(len(body)))
    conn.endheaders(body)
    reply = conn.getresponse()
    return reply, reply.read()


def _as_httpx(exc: BaseException, request: httpx.Request | None) -> BaseException:
    """``exc`` as the ``httpx`` error the client maps; the request may have gone out."""
    if isinstance(exc, httpx.HTTPError) or not isinstance(exc, OSError | http.client.HTTPException):
        return exc
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        return httpx.ReadTimeout(detail, request=request)
    if isinstance(exc, http.client.HTTPException):
        return httpx.RemoteProtocolError(detail, request=request)
    return httpx.ReadError(detail, request=request)
