"""The asynchronous client, on ``httpx.AsyncClient``: the same operations as
``PlateauClient`` (``plateau.client.operations``), driven with ``await``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx
import pyarrow as pa

from plateau.client import operations as ops
from plateau.client._base import DEFAULT_URL, ClientBase
from plateau.client.errors import ConnectionFailed
from plateau.client.wire import UNSET, PartitionPage, RetryPolicy, TimeBound, TopicInfo, TopicPage
from plateau.protocol import DEFAULT_PAGE_SIZE
from plateau.protocol.focus import DataFocus
from plateau.protocol.values import Span

T = TypeVar("T")
R = TypeVar("R")


class AsyncPlateauClient(ClientBase):
    """``PlateauClient`` for asyncio code; same semantics, methods are coroutines."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, timeout, retry)
        self._http = httpx.AsyncClient(
            base_url=self.url, headers=self._headers, timeout=timeout, transport=transport
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

    # --- API (see PlateauClient for each method's meaning) ------------------------
    async def topics(self) -> list[str]:
        return await self._run(self._topics())

    async def topic(self, topic: str) -> TopicInfo:
        return await self._run(self._topic(topic))

    async def append(
        self,
        topic: str,
        partition: str,
        data: pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]],
    ) -> Span:
        return await self._run(self._append(topic, partition, data))

    async def read(
        self,
        topic: str,
        partition: str,
        start: int = 0,
        page_size: int = DEFAULT_PAGE_SIZE,
        time_start: TimeBound = None,
        time_end: TimeBound = None,
        focus: DataFocus | None = None,
    ) -> PartitionPage:
        return await self._run(
            self._read(topic, partition, start, page_size, time_start, time_end, focus)
        )

    def read_all(
        self,
        topic: str,
        partition: str,
        start: int = 0,
        page_size: int = DEFAULT_PAGE_SIZE,
        time_start: TimeBound = None,
        time_end: TimeBound = None,
        focus: DataFocus | None = None,
    ) -> AsyncGenerator[PartitionPage, None]:
        return self._steps(
            self._read_all(topic, partition, start, page_size, time_start, time_end, focus)
        )

    def iterate(
        self,
        topic: str,
        cursor: Mapping[str, int] | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        order: str = "asc",
        partition_filter: Sequence[str] | None = None,
        time_start: TimeBound = None,
        time_end: TimeBound = None,
        follow: bool = False,
        poll_interval: float = 1.0,
        focus: DataFocus | None = None,
    ) -> AsyncGenerator[TopicPage, None]:
        return self._steps(
            ops.iterate(
                self._state,
                topic,
                cursor,
                page_size,
                order,
                partition_filter,
                time_start,
                time_end,
                follow,
                poll_interval,
                focus,
            )
        )

    async def put_topic(
        self,
        topic: str,
        *,
        partitions: int | None = None,
        max_bytes: int | None = None,
        max_age_seconds: int | None = UNSET,
        segment_format: str | None = None,
        segment_max_rows: int | None = None,
        segment_max_bytes: int | None = None,
        segment_max_age_seconds: float | None = None,
        segment_compression: str | None = None,
        owner: Mapping[str, str] | None = None,
        adopt: bool = False,
        body: Mapping[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        return await self._run(
            self._put_topic(
                topic,
                partitions=partitions,
                max_bytes=max_bytes,
                max_age_seconds=max_age_seconds,
                segment_format=segment_format,
                segment_max_rows=segment_max_rows,
                segment_max_bytes=segment_max_bytes,
                segment_max_age_seconds=segment_max_age_seconds,
                segment_compression=segment_compression,
                owner=owner,
                adopt=adopt,
                body=body,
            )
        )

    async def get_topic(self, topic: str) -> dict[str, Any] | None:
        return await self._run(self._get_topic(topic))

    async def delete_topic(self, topic: str, owner_uid: str | None = None) -> None:
        await self._run(self._delete_topic(topic, owner_uid))

    async def node_info(self, topics: bool = False) -> dict[str, Any] | None:
        return await self._run(self._node_info(topics))
