"""The storage engine: the one object the server, CLI and tests talk to.

Thread-safe and synchronous: the HTTP server calls it from worker threads
(``anyio.to_thread``), so a blocking fsync never stalls the event loop and
concurrent appends to one partition share a group commit.
"""

from __future__ import annotations

import pyarrow as pa

from plateau.settings import StorageSettings
from plateau.storage.topic_config import TopicConfig, TopicConfigRequest
from plateau.storage.types import (
    NodeUsage,
    Order,
    PartitionRead,
    Span,
    TimeRange,
    TopicRead,
    TopicUsage,
)


class Engine:
    """Owns the manifest, every partition writer, retention and the snapshot."""

    def __init__(self, settings: StorageSettings) -> None:
        """Open (or create) the data directory and recover: see ``plateau.storage.recovery``."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop background work, seal open segments durably, close the manifest."""
        raise NotImplementedError

    # --- topics -----------------------------------------------------------------
    def topics(self) -> list[str]:
        raise NotImplementedError

    def get_topic(self, topic: str) -> TopicConfig:
        """Raises NotFound for an unknown topic, InvalidInput for a bad name."""
        raise NotImplementedError

    def put_topic(self, topic: str, request: TopicConfigRequest) -> tuple[TopicConfig, bool]:
        """Create or update; returns (config, created). Conflict (409) if the budget does not fit."""
        raise NotImplementedError

    def delete_topic(self, topic: str) -> None:
        """Remove the topic and all its data. NotFound if it does not exist."""
        raise NotImplementedError

    def topic_usage(self, topic: str) -> TopicUsage:
        raise NotImplementedError

    def node_usage(self) -> NodeUsage:
        raise NotImplementedError

    # --- data -------------------------------------------------------------------
    def append(self, topic: str, partition: str, table: pa.Table) -> Span:
        """Append all rows of ``table`` or none; returns the indexes assigned.

        Adds a ``time`` column (arrival, epoch ms) when the table has none.
        Raises InvalidInput (bad schema/time/name), NotFound (unknown topic with
        auto-create off), Busy (429), Unavailable/InsufficientStorage (disk).
        Returns after the rows are durable (per the durability mode).
        """
        raise NotImplementedError

    def read_partition(
        self,
        topic: str,
        partition: str,
        start: int,
        limit: int,
        time_range: TimeRange | None = None,
        max_bytes: int | None = None,
    ) -> PartitionRead:
        """Up to ``limit`` durable records from index ``start`` on, one schema per reply."""
        raise NotImplementedError

    def iterate_topic(
        self,
        topic: str,
        cursor: dict[str, int],
        limit: int,
        order: Order = Order.ASC,
        time_range: TimeRange | None = None,
        partition_filter: list[str] | None = None,
        max_bytes: int | None = None,
    ) -> TopicRead:
        """One page of records across partitions, continuing from ``cursor``."""
        raise NotImplementedError
