"""The synchronous client, on ``httpx.Client``."""

from __future__ import annotations

import json
import time
from collections.abc import Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx
import pyarrow as pa

from plateau.client import operations as ops
from plateau.client._base import DEFAULT_URL, ClientBase
from plateau.client.direct import DirectTransport, Origin
from plateau.client.errors import ConnectionFailed
from plateau.client.wire import UNSET, PartitionPage, RetryPolicy, TimeBound, TopicInfo, TopicPage
from plateau.protocol import DEFAULT_PAGE_SIZE, JSON
from plateau.protocol.focus import DataFocus
from plateau.protocol.values import Span

T = TypeVar("T")
R = TypeVar("R")


class PlateauClient(ClientBase):
    """A plateau node's HTTP API. One instance keeps one connection pool; close it (or use
    ``with``) when done.

    Appends are split when the node answers 413 and retried when it answers
    429 (see ``RetryPolicy``); an append whose connection breaks is never
    resent, because the node may already have written it (``ConnectionFailed``).
    Reads and admin GET/PUT are resent after a lost connection.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(url, token, timeout, retry)
        self._http = httpx.Client(
            base_url=self.url, headers=self._headers, timeout=timeout, transport=transport
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

    # --- API ----------------------------------------------------------------------
    def topics(self) -> list[str]:
        return self._run(self._topics())

    def topic(self, topic: str) -> TopicInfo:
        """Partition spans and bytes of a topic."""
        return self._run(self._topic(topic))

    def append(
        self,
        topic: str,
        partition: str,
        data: pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]],
    ) -> Span:
        """Append rows (a table, a batch or row dicts); returns the indexes they got."""
        return self._run(self._append(topic, partition, data))

    def read(
        self,
        topic: str,
        partition: str,
        start: int = 0,
        page_size: int = DEFAULT_PAGE_SIZE,
        time_start: TimeBound = None,
        time_end: TimeBound = None,
        focus: DataFocus | None = None,
    ) -> PartitionPage:
        """One page of a partition from index ``start``: ``(table, span, status)``."""
        return self._run(
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
    ) -> Generator[PartitionPage, None, None]:
        """Pages from ``start`` up to the partition's end at the time of reading."""
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
    ) -> Generator[TopicPage, None, None]:
        """Topic pages across partitions, ``(table, cursor, status)``; see ``ops.iterate``."""
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

    def put_topic(
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
        """Create or update a topic; only the fields given change (idempotent).

        ``owner`` (kind, namespace, name, uid) claims the topic; another owner's
        claim is refused with ``ConflictError`` (``reason="OwnerConflict"``)
        unless ``adopt``. The reply carries ``owner``, ``claim`` and
        ``previous_owner`` beside the resolved config.
        """
        return self._run(
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

    def get_topic(self, topic: str) -> dict[str, Any] | None:
        """A topic's configuration and usage."""
        return self._run(self._get_topic(topic))

    def delete_topic(self, topic: str, owner_uid: str | None = None) -> None:
        """Delete a topic and all its data; with ``owner_uid``, only if that owner holds it
        (else ``ConflictError``, ``reason="OwnerConflict"``, nothing deleted)."""
        self._run(self._delete_topic(topic, owner_uid))

    def node_info(self, topics: bool = False) -> dict[str, Any] | None:
        """The node's capacity, allocated and used bytes; with ``topics``, every topic's usage
        too (``topic_usage``: name to the ``usage`` that ``get_topic`` gives), in one call."""
        return self._run(self._node_info(topics))
