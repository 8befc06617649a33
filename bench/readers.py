"""The read benchmark's HTTP clients: one keep-alive connection per reader thread.

Why two: the benchmark measures how fast the *node* serves pages, and its
client shares the machine's two cores with the node. httpx (what
``plateau.client`` uses) spends about 1.4 ms of CPU on each 1.28 MB reply
(h11 parses the body in 64 KiB pieces and the body is joined several times),
about as much as the node spends serving it; a single sequential reader then
waits on its own parsing half the time and the figure measures the client.
The standard library's ``http.client`` reads a Content-Length body with one
buffered ``read`` in C, at about 0.35 ms a page, so the default ``stdlib``
client leaves the node as the bottleneck. ``--client httpx`` shows what a
Python reader built on httpx gets.
"""

from __future__ import annotations

import http.client
from typing import Protocol
from urllib.parse import urlencode, urlsplit

import httpx

CLIENTS = ("stdlib", "httpx")


class Reply(Protocol):
    status: int
    body: bytes

    def header(self, name: str) -> str | None: ...


class _Reply:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.body = body
        self._headers = headers

    def header(self, name: str) -> str | None:
        return self._headers.get(name.lower())


class Reader(Protocol):
    def request(
        self, method: str, path: str, params: dict[str, int], body: bytes, headers: dict[str, str]
    ) -> Reply: ...

    def close(self) -> None: ...


class StdlibReader:
    """``http.client`` on one persistent connection (reopened if the node closed it)."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float = 60.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"the stdlib reader speaks plain http only, not {url!r}")
        self._conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        self._headers = headers

    def request(
        self, method: str, path: str, params: dict[str, int], body: bytes, headers: dict[str, str]
    ) -> Reply:
        target = f"{path}?{urlencode(params)}" if params else path
        self._conn.request(method, target, body=body or None, headers=self._headers | headers)
        response = self._conn.getresponse()
        data = response.read()
        return _Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)

    def close(self) -> None:
        self._conn.close()


class HttpxReader:
    def __init__(self, url: str, headers: dict[str, str], timeout: float = 60.0) -> None:
        self._client = httpx.Client(base_url=url, timeout=timeout, headers=headers)

    def request(
        self, method: str, path: str, params: dict[str, int], body: bytes, headers: dict[str, str]
    ) -> Reply:
        r = self._client.request(method, path, params=params, content=body or None, headers=headers)
        return _Reply(r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content)

    def close(self) -> None:
        self._client.close()


def open_reader(kind: str, url: str, headers: dict[str, str]) -> Reader:
    if kind == "stdlib":
        return StdlibReader(url, headers)
    if kind == "httpx":
        return HttpxReader(url, headers)
    raise ValueError(f"unknown client {kind!r}; use one of {', '.join(CLIENTS)}")
