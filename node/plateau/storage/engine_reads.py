"""The engine's read side: partition reads, topic iteration, the spans readers see.

A mixin of ``Engine``, which owns everything it reads (the catalog's topics, the
reader cache, the archive); apart so that the engine's module holds its state,
topics and appends, and the read path can be read on its own. Reads take no
engine lock: a partition's ``view()`` is a consistent copy, and a file that
retention deleted under a read only makes it start over (``_retrying_deleted``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa

from plateau.protocol.focus import DataFocus
from plateau.protocol.names import check_name
from plateau.protocol.values import Order, RecordStatus, Span
from plateau.storage import record_reads
from plateau.storage.archive.history import ArchivedRun, ArchiveReads
from plateau.storage.catalog.memory import MemoryBudget
from plateau.storage.engine_parts import EngineParts
from plateau.storage.metrics import ARCHIVE_READ_RECORDS, ARCHIVE_READS
from plateau.storage.partition import PartitionView
from plateau.storage.stored_reads import StoredRead, read_stored
from plateau.storage.types import PartitionRead, TimeRange, TopicRead

READ_ATTEMPTS = 3
R = TypeVar("R")


class EngineReads(EngineParts):
    """Reads of ``Engine``'s topics; the attributes below (and ``EngineParts``') are the
    engine's."""

    memory: MemoryBudget
    stored_reads: bool

    @functools.cached_property
    def _archive_reads(self) -> ArchiveReads | None:
        """Reads below the local disk, from the archive (None without one); made once."""
        archive = self.archive
        if archive is None:
            return None
        reads = ArchiveReads(
            lambda: archive.fs,
            archive.url.root(),
            self.memory.archive_cache_limit,  # its part of the node's memory budget
            self._manifest.archived_segments,
            self.archive_status.recorded,
        )
        self.memory.archive_cache_used = lambda: reads.reader.cached_bytes
        return reads

    def _archived(self, topic: str) -> Callable[[str, PartitionView], ArchivedRun | None] | None:
        """A partition's archived segments below its local start, per view (None: no archive)."""
        reads = self._archive_reads
        if reads is None:
            return None
        return lambda name, view: reads.run(topic, name, view.start)

    def readable_spans(self, topic: str) -> dict[str, Span]:
        """Each partition's readable indexes: from its oldest archived one, if that is older
        than the local disk's (what ``GET /topic/{t}`` reports, so readers see one history)."""
        archived = self._archived(topic)
        spans: dict[str, Span] = {}
        for name, p in sorted(self._catalog.get(topic).by_name().items()):
            view = p.view()
            run = None if archived is None else archived(name, view)
            spans[name] = Span(view.start if run is None else run.start, view.end)
        return spans

    def read_partition(
        self,
        topic: str,
        partition: str,
        start: int,
        limit: int,
        time_range: TimeRange | None = None,
        max_bytes: int | None = None,
        focus: DataFocus | None = None,
    ) -> PartitionRead:
        """Up to ``limit`` durable records from index ``start`` on, one schema per reply.

        With a ``focus``, only what it selects (see ``focus``), read without
        the columns it leaves out. Indexes no longer on the local disk are read from
        the archive (``archived`` counts them).

        The rows may be slices of a whole decoded row group or append body
        (``record_reads._compact`` is skipped): the caller, the server, encodes
        them into its reply at once and drops them, so what they keep alive is
        held for that long only, and a 10,000-row page of a 65,536-row Parquet
        row group is no longer copied once before the reply copies it again.
        """
        check_name("partition", partition)
        archived = self._archived(topic)

        def read() -> PartitionRead:
            t = self._catalog.get(topic)
            with t.lock:
                p = t.partitions.get(partition)
            if p is None:
                return PartitionRead(pa.table({}), None, RecordStatus.ALL)
            view = p.view()
            run = archived(partition, view) if archived and start < view.start else None
            return record_reads.read_range(
                view,
                self.data_dir,
                self._cache,
                start,
                limit,
                time_range,
                max_bytes,
                focus,
                run,
                compact=False,
                forward=True,
            )

        with self.progress.track(f"read {topic}/{partition}"):
            result = self._retrying_deleted(read)
        _count_archived(topic, result.archived)
        table = _focused(result.table, focus)
        return PartitionRead(table, result.span, result.status, result.archived)

    def read_stored(
        self, topic: str, partition: str, start: int, limit: int, codecs: frozenset[int]
    ) -> StoredRead | None:
        """``read_partition``'s page as the segment stores it, when it is whole stored batches
        (``stored_reads``); None: read it with ``read_partition``.

        Not for rows in the archive (``start`` below the local disk's, with an
        archive): those are read decoded.
        """
        check_name("partition", partition)
        if not self.stored_reads:
            return None
        archived = self._archived(topic)

        def read() -> StoredRead | None:
            t = self._catalog.get(topic)
            with t.lock:
                p = t.partitions.get(partition)
            if p is None:
                return None
            view = p.view()
            if archived is not None and start < view.start:
                return None
            return read_stored(view, self.data_dir, self._cache, start, limit, codecs)

        with self.progress.track(f"read {topic}/{partition}"):
            return self._retrying_deleted(read)

    def iterate_topic(
        self,
        topic: str,
        cursor: dict[str, int],
        limit: int,
        order: Order = Order.ASC,
        time_range: TimeRange | None = None,
        partition_filter: list[str] | None = None,
        max_bytes: int | None = None,
        focus: DataFocus | None = None,
    ) -> TopicRead:
        """One page of records across partitions, continuing from ``cursor``."""
        for name in cursor:
            check_name("partition", name)

        def read() -> TopicRead:
            parts = self._catalog.get(topic).by_name()
            names = record_reads.select_partitions(list(parts), partition_filter)
            return record_reads.iterate(
                {n: parts[n].view for n in names},
                self.data_dir,
                self._cache,
                cursor,
                limit,
                order,
                time_range,
                max_bytes,
                focus,
                self._archived(topic),
            )

        with self.progress.track(f"iterate {topic}"):
            result = self._retrying_deleted(read)
        _count_archived(topic, result.archived)
        table = _focused(result.table, focus)
        return TopicRead(table, result.next, result.status, result.archived)

    def _retrying_deleted(self, read: Callable[[], R]) -> R:
        """A read whose segment retention (or a topic deletion) removed meanwhile starts over.

        The view it took named a file that is gone; a fresh view no longer does
        (or the topic is gone: NotFound).
        """
        for _ in range(READ_ATTEMPTS - 1):
            try:
                return read()
            except FileNotFoundError:
                continue
        return read()


def _count_archived(topic: str, records: int) -> None:
    if records:
        ARCHIVE_READS.labels(topic).inc()
        ARCHIVE_READ_RECORDS.labels(topic).inc(records)


def _focused(table: pa.Table, focus: DataFocus | None) -> pa.Table:
    """``table`` under ``focus``; a reply without a schema (nothing to read) stays as it is."""
    if focus is None or not table.num_columns:
        return table
    return focus.apply(table)
