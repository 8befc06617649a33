"""The synchronous client, on ``httpx.Client``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from plateau.client import operations as ops
from plateau.client._base import ClientBase, as_method
from plateau.client.direct import DirectTransport, Origin
from plateau.client.errors import ConnectionFailed
from plateau.protocol import JSON

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


def _method(
    operation: Callable[Concatenate[ops.ClientState, P], ops.Op[R]],
) -> Callable[Concatenate[PlateauClient, P], R]:
    """A method that runs ``operation`` to its result; its parameters are the operation's."""

    def method(self: PlateauClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._run(operation(self._state, *args, **kwargs))

    as_method(method, operation)
    return method


def _stream(
    operation: Callable[Concatenate[ops.ClientState, P], ops.StreamOp[T]],
) -> Callable[Concatenate[PlateauClient, P], Generator[T, None, None]]:
    """A method that hands out the pages ``operation`` emits, as they come."""

    def method(
        self: PlateauClient, /, *args: P.args, **kwargs: P.kwargs
    ) -> Generator[T, None, None]:
        return self._steps(operation(self._state, *args, **kwargs))

    as_method(method, operation)
    return method


class PlateauClient(ClientBase[httpx.BaseTransport]):
    """A plateau node's HTTP API. One instance keeps one connection pool; close it (or use
    ``with``) when done.

    Appends are split when the node answers 413 and retried when it answers
    429 (see ``RetryPolicy``); an append whose connection breaks is never
    resent, because the node may already have written it (``ConnectionFailed``).
    Reads and admin GET/PUT are resent after a lost connection.
    """

    def _open(self, transport: httpx.BaseTransport | None) -> None:
        self._http = httpx.Client(
            base_url=self.url, headers=self._headers, timeout=self.timeout, transport=transport
        )
        # on DirectTransport requests skip httpx.Client (see plateau.client.direct)
        self._direct = transport if isinstance(transport, DirectTransport) else None
        self._origin: Origin | None = None

    def __enter__(self) -> PlateauClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- driver -------------------------------------------------------------------
    def _send(self, call: ops.Call) -> httpx.Response:
        try:
            if self._direct is not None:
                return self._send_direct(self._direct, call)
            return self._http.request(call.method, call.path, **self._request_args(call))
        except httpx.HTTPError as exc:
            raise self._connection_failed(exc) from exc

    def _send_direct(self, transport: DirectTransport, call: ops.Call) -> httpx.Response:
        """What ``httpx.Client`` would send for ``call``: same headers, body and JSON form
        (the transport adds Content-Length to a body)."""
        if self._origin is None:
            self._origin = Origin.of(self.url)
        headers = {**self._headers, **call.headers}
        body = call.content
        if call.json is not None:
            body = json.dumps(
                call.json, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            ).encode()
            headers["content-type"] = JSON
        return transport.send(
            self._origin, call.method, call.path, call.params, headers, body, self.timeout
        )

    def _steps(self, op: ops.StreamOp[T] | ops.Op[Any]) -> Generator[T, None, None]:
        reply: httpx.Response | None = None
        failure: ConnectionFailed | None = None
        while True:
            try:
                step = op.throw(failure) if failure else op.send(reply)
            except StopIteration:
                return
            reply, failure = None, None
            if isinstance(step, ops.Call):
                try:
                    reply = self._send(step)
                except ConnectionFailed as exc:
                    failure = exc
            elif isinstance(step, ops.Sleep):
                time.sleep(step.seconds)
            else:
                yield step.value

    def _run(self, op: ops.Op[R]) -> R:
        result: list[R] = []

        def capture() -> ops.Op[None]:
            result.append((yield from op))

        for _ in self._steps(capture()):
            raise AssertionError("a single-result operation emitted a page")
        return result[0]

    # --- API: each method is an operation of plateau.client.operations, driven here ------
    topics = _method(ops.topics)
    topic = _method(ops.topic)
    append = _method(ops.append)
    read = _method(ops.read)
    read_all = _stream(ops.read_all)
    iterate = _stream(ops.iterate)
    put_topic = _method(ops.put_topic)
    get_topic = _method(ops.get_topic)
    delete_topic = _method(ops.delete_topic)
    node_info = _method(ops.node_info)
