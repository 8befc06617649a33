"""HTTP/1.1 over a raw socket, for tests that control what is on one connection.

Why not httpx: keep-alive, pipelining, a request sent in pieces or a client
that goes away mid-body are what these tests are about, and a client library
hides them.
"""

from __future__ import annotations

import http.client
import socket
from typing import IO


def head(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    """A request head; Content-Length from ``body`` unless the headers say chunked."""
    lines = [f"{method} {path} HTTP/1.1", "Host: node", *(f"{k}: {v}" for k, v in headers.items())]
    if body and "Transfer-Encoding" not in headers:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def response(f: IO[bytes]) -> tuple[int, dict[str, str], bytes]:
    """One response from a connection's buffered reader (several may follow on it)."""
    status_line = f.readline()
    if not status_line:
        raise ConnectionError("connection closed before a response")
    status = int(status_line.split()[1])
    headers = {k.lower(): v for k, v in http.client.parse_headers(f).items()}
    body = f.read(int(headers.get("content-length", "0")))
    return status, headers, body


def connect(port: int) -> tuple[socket.socket, IO[bytes]]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    return sock, sock.makefile("rb")
