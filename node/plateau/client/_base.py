"""What the sync and async clients share: settings, headers, request building."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import pyarrow as pa

from plateau.client import operations as ops
from plateau.client.errors import ConnectionFailed, PlateauClientError
from plateau.client.wire import (
    UNSET,
    PartitionPage,
    RetryPolicy,
    TimeBound,
    TopicInfo,
    quote_name,
    to_table,
    topic_request,
)
from plateau.protocol import ADMIN_NODE_PATH, ADMIN_TOPIC_PATH
from plateau.protocol.focus import DataFocus
from plateau.protocol.values import Span

DEFAULT_URL = "http://127.0.0.1:3030"


class ClientBase:
    """Builds each operation's generator; subclasses only drive them."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        if "://" not in url:
            url = f"http://{url}"
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"user-agent": "plateau-client"}
        if token:
            self._headers["authorization"] = f"Bearer {token}"
        self._state = ops.ClientState(retry=retry or RetryPolicy())

    def _connection_failed(self, exc: httpx.HTTPError) -> PlateauClientError:
        """Say what went wrong in the user's terms, and whether the request went out."""
        detail = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.UnsupportedProtocol):
            return PlateauClientError(None, f"bad node URL {self.url!r}: {detail}")
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
            return ConnectionFailed(f"cannot reach the node at {self.url}: {detail}", False)
        if isinstance(exc, httpx.TimeoutException):
            return ConnectionFailed(
                f"no reply from the node at {self.url} within {self.timeout:g}s"
            )
        return ConnectionFailed(f"connection to the node at {self.url} failed: {detail}")

    @staticmethod
    def _request_args(call: ops.Call) -> dict[str, Any]:
        return {
            "params": list(call.params),
            "headers": dict(call.headers),
            "content": call.content,
            "json": call.json,
        }

    # --- operations, shared by both clients -------------------------------------
    def _topics(self) -> ops.Op[list[str]]:
        return ops.topics(self._state)

    def _topic(self, topic: str) -> ops.Op[TopicInfo]:
        return ops.topic(self._state, topic)

    def _append(
        self,
        topic: str,
        partition: str,
        data: pa.Table | pa.RecordBatch | Sequence[Mapping[str, Any]],
    ) -> ops.Op[Span]:
        return ops.append(self._state, topic, partition, to_table(data))

    def _read(
        self,
        topic: str,
        partition: str,
        start: int,
        page_size: int,
        time_start: TimeBound,
        time_end: TimeBound,
        focus: DataFocus | None = None,
    ) -> ops.Op[PartitionPage]:
        return ops.read(
            self._state, topic, partition, start, page_size, time_start, time_end, focus
        )

    def _read_all(
        self,
        topic: str,
        partition: str,
        start: int,
        page_size: int,
        time_start: TimeBound,
        time_end: TimeBound,
        focus: DataFocus | None = None,
    ) -> ops.StreamOp[PartitionPage]:
        return ops.read_all(
            self._state, topic, partition, start, page_size, time_start, time_end, focus
        )

    def _put_topic(
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
    ) -> ops.Op[dict[str, Any] | None]:
        request = dict(body or {})
        request.update(
            topic_request(
                partitions,
                max_bytes,
                max_age_seconds,
                segment_format,
                segment_max_rows,
                segment_max_bytes,
                segment_max_age_seconds,
                segment_compression,
                owner,
                adopt,
            )
        )
        return ops.admin(
            self._state, "PUT", ADMIN_TOPIC_PATH.format(topic=quote_name(topic)), request
        )

    def _get_topic(self, topic: str) -> ops.Op[dict[str, Any] | None]:
        return ops.admin(self._state, "GET", ADMIN_TOPIC_PATH.format(topic=quote_name(topic)))

    def _delete_topic(
        self, topic: str, owner_uid: str | None = None
    ) -> ops.Op[dict[str, Any] | None]:
        params = [] if owner_uid is None else [("owner_uid", owner_uid)]
        return ops.admin(
            self._state, "DELETE", ADMIN_TOPIC_PATH.format(topic=quote_name(topic)), params=params
        )

    def _node_info(self, topics: bool = False) -> ops.Op[dict[str, Any] | None]:
        params = [("topics", "true")] if topics else []
        return ops.admin(self._state, "GET", ADMIN_NODE_PATH, params=params)
