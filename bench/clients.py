"""The benchmarks' HTTP clients: one keep-alive connection per writer or reader thread.

Why two: the benchmarks measure the *node*, and their clients share the
machine's two cores with it. httpx (what ``plateau.client`` uses) spends
about 1.4 ms of CPU on each 1.28 MB reply (h11 parses the body in 64 KiB
pieces and the body is joined several times), about as much as the node
spends serving it, and about 1.2 ms on each 1.28 MB append; a single
sequential reader then waits on its own parsing half the time, and writers
take CPU the node needs. The standard library's ``http.client`` reads a
Content-Length body with one buffered ``read`` in C (about 0.35 ms a page)
and sends a body with one ``sendall``, so the default ``stdlib`` client
leaves the node as the bottleneck. ``--client httpx`` shows what Python
clients built on httpx get.
"""

from __future__ import annotations

import http.client
from typing import Protocol
from urllib.parse import urlencode, urlsplit

import httpx

Params = dict[str, int] | list[tuple[str, str]]
"""Query parameters: a dict, or pairs (repeated keys, as the data focus sends them)."""

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


class TransportError(Exception):
    """The request did not get an HTTP reply (connection refused, reset, timed out)."""


class Client(Protocol):
    def request(
        self, method: str, path: str, params: Params, body: bytes, headers: dict[str, str]
    ) -> Reply: ...

    def close(self) -> None: ...


class StdlibClient:
    """``http.client`` on one persistent connection (reopened if the node closed it)."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float = 60.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"the stdlib client speaks plain http only, not {url!r}")
        self._conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
        self._headers = headers

    def request(
        self, method: str, path: str, params: Params, body: bytes, headers: dict[str, str]
    ) -> Reply:
        target = f"{path}?{urlencode(params)}" if params else path
        try:
            self._conn.request(method, target, body=body or None, headers=self._headers | headers)
            response = self._conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self._conn.close()  # the next request reconnects
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        return _Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)

    def close(self) -> None:
        self._conn.close()


class HttpxClient:
    def __init__(self, url: str, headers: dict[str, str], timeout: float = 60.0) -> None:
        self._client = httpx.Client(base_url=url, timeout=timeout, headers=headers)

    def request(
        self, method: str, path: str, params: Params, body: bytes, headers: dict[str, str]
    ) -> Reply:
        try:
            r = self._client.request(
                method, path, params=_pairs(params), content=body or None, headers=headers
            )
        except httpx.HTTPError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        return _Reply(r.status_code, {k.lower(): v for k, v in r.headers.items()}, r.content)

    def close(self) -> None:
        self._client.close()


def open_client(kind: str, url: str, headers: dict[str, str] | None = None) -> Client:
    if kind == "stdlib":
        return StdlibClient(url, headers or {})
    if kind == "httpx":
        return HttpxClient(url, headers or {})
    raise ValueError(f"unknown client {kind!r}; use one of {', '.join(CLIENTS)}")


def _pairs(params: Params) -> tuple[tuple[str, str], ...]:
    # a tuple: httpx's types take pairs of str in one, not in a list (invariant)
    return (
        tuple((k, str(v)) for k, v in params.items()) if isinstance(params, dict) else tuple(params)
    )
