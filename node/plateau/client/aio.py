"""The asynchronous client, on ``httpx.AsyncClient``: the same operations as
``PlateauClient`` (``plateau.client.operations``), driven with ``await``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from plateau.client import operations as ops
from plateau.client._base import ClientBase, as_method
from plateau.client.errors import ConnectionFailed

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


def _method(
    operation: Callable[Concatenate[ops.ClientState, P], ops.Op[R]],
) -> Callable[Concatenate[AsyncPlateauClient, P], Coroutine[Any, Any, R]]:
    """A coroutine method that runs ``operation`` to its result."""

    async def method(self: AsyncPlateauClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await self._run(operation(self._state, *args, **kwargs))

    as_method(method, operation)
    return method


def _stream(
    operation: Callable[Concatenate[ops.ClientState, P], ops.StreamOp[T]],
) -> Callable[Concatenate[AsyncPlateauClient, P], AsyncGenerator[T, None]]:
    """A method that hands out the pages ``operation`` emits, as an async generator."""

    def method(
        self: AsyncPlateauClient, /, *args: P.args, **kwargs: P.kwargs
    ) -> AsyncGenerator[T, None]:
        return self._steps(operation(self._state, *args, **kwargs))

    as_method(method, operation)
    return method


class AsyncPlateauClient(ClientBase[httpx.AsyncBaseTransport]):
    """``PlateauClient`` for asyncio code; same semantics, methods are coroutines."""

    def _open(self, transport: httpx.AsyncBaseTransport | None) -> None:
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self._headers, timeout=self.timeout, transport=transport
        )

    async def __aenter__(self) -> AsyncPlateauClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- driver -------------------------------------------------------------------
    async def _send(self, call: ops.Call) -> httpx.Response:
        try:
            return await self._http.request(call.method, call.path, **self._request_args(call))
        except httpx.HTTPError as exc:
            raise self._connection_failed(exc) from exc

    async def _steps(self, op: ops.StreamOp[T] | ops.Op[Any]) -> AsyncGenerator[T, None]:
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
                    reply = await self._send(step)
                except ConnectionFailed as exc:
                    failure = exc
            elif isinstance(step, ops.Sleep):
                await asyncio.sleep(step.seconds)
            else:
                yield step.value

    async def _run(self, op: ops.Op[R]) -> R:
        result: list[R] = []

        def capture() -> ops.Op[None]:
            result.append((yield from op))

        async for _ in self._steps(capture()):
            raise AssertionError("a single-result operation emitted a page")
        return result[0]

    # --- API: the operations of PlateauClient, as coroutines and async iterators -------
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
