"""The storage engine: the one object the server, CLI and tests talk to.

Thread-safe and synchronous: the HTTP server calls it from worker threads, so
a blocking fsync never stalls the event loop and concurrent appends to one
partition share a group commit. Start-up recovers the data directory
(``Recovery``); ``close`` seals every open segment, so a clean shutdown
leaves nothing to recover.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import shutil
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pyarrow as pa

from plateau.metrics import APPENDED_BYTES, APPENDED_ROWS, TOPIC_BUDGET_BYTES, TOPIC_BYTES
from plateau.settings import StorageSettings
from plateau.storage import reading, retention
from plateau.storage.errors import Conflict, InsufficientStorage, NotFound, Unavailable
from plateau.storage.files import BALLAST, Ballast
from plateau.storage.manifest import Manifest, SegmentRow
from plateau.storage.names import check_name
from plateau.storage.partition import Partition
from plateau.storage.reader_cache import ReaderCache
from plateau.storage.recovery import recover
from plateau.storage.snapshot import SnapshotWriter
from plateau.storage.topic_config import TopicConfig, TopicConfigRequest
from plateau.storage.types import (
    Index,
    NodeUsage,
    Order,
    PartitionRead,
    PartitionUsage,
    RecordStatus,
    Span,
    TimeRange,
    TopicRead,
    TopicUsage,
    WritePolicy,
)
from plateau.storage.validation import prepare

log = logging.getLogger(__name__)
ENOSPC = 28


@dataclass
class Topic:
    name: str
    config: TopicConfig
    partitions: dict[str, Partition] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Engine:
    """Owns the manifest, every partition writer, retention and the snapshot."""

    def __init__(self, settings: StorageSettings) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        (self.data_dir / "topics").mkdir(parents=True, exist_ok=True)
        self._lock_file = _lock_data_dir(self.data_dir)
        self._ballast = Ballast(self.data_dir / BALLAST, settings.ballast_bytes)
        self._cache = ReaderCache(
            decoded_bytes=settings.read_cache_bytes,
            # without a decoded cache, the next page would read the dropped pages again
            drop_pages=settings.drop_read_pages and settings.read_cache_bytes > 0,
            decode_ahead=settings.decode_ahead,
            direct_reads=settings.direct_reads,
        )
        self._snapshot = SnapshotWriter(self.data_dir)
        self._sealer = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sealer")
        self._lock = threading.RLock()
        self._retention_lock = threading.Lock()
        self._snapshot_lock = threading.Lock()
        self._relaxed = settings.durability.mode == "relaxed"
        self._closed = threading.Event()
        self._topics: dict[str, Topic] = {}
        self._manifest, recovered = self._open_and_recover()
        for name, config in self._manifest.topics().items():
            topic = Topic(name, config)
            for pname, next_index in self._manifest.partitions(name).items():
                topic.partitions[pname] = self._partition(
                    name, pname, next_index, recovered.get((name, pname), [])
                )
            self._topics[name] = topic
            TOPIC_BUDGET_BYTES.labels(name).set(config.retention.max_bytes)
        for name in self._topics:
            self._enforce(name, publish=False)
        self._publish_snapshot()
        self._timer = threading.Thread(target=self._tick_loop, name="retention", daemon=True)
        self._timer.start()

    def _open_and_recover(self) -> tuple[Manifest, dict[tuple[str, str], list[SegmentRow]]]:
        """Recovery needs a little space (SQLite pages); on a full volume the ballast gives it."""
        for attempt in range(2):
            manifest: Manifest | None = None
            try:
                manifest = Manifest(self.data_dir / "manifest.sqlite")
                recovered = recover(self.data_dir, manifest)
            except (OSError, sqlite3.OperationalError) as exc:
                if manifest is not None:
                    manifest.close()
                if attempt or not _disk_full(exc) or not self._ballast.release():
                    raise
                log.warning("volume full at start: released the ballast to recover")
                continue
            self._ballast.ensure()
            return manifest, recovered
        raise AssertionError("unreachable")

    def _partition(
        self, topic: str, name: str, next_index: Index, sealed: list[SegmentRow]
    ) -> Partition:
        if sealed:
            next_index = Index(max(next_index, sealed[-1].end_index))
        return Partition(
            topic,
            name,
            self.data_dir,
            self._manifest,
            self._sealer,
            self._on_sealed,
            WritePolicy(self._relaxed, self.settings.drop_written_pages),
            next_index,
            sealed,
        )

    def close(self) -> None:
        """Stop background work, seal open segments durably, close the manifest."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._timer.join(timeout=10)
        with self._lock:
            parts = [p for t in self._topics.values() for p in t.partitions.values()]
        for p in parts:
            try:
                p.close()
            except Exception:
                log.exception("closing %s/%s failed; recovery will finish it", p.topic, p.name)
        self._sealer.shutdown(wait=True)
        self._cache.close()
        self._publish_snapshot()
        self._manifest.close()
        self._lock_file.close()

    # --- topics -----------------------------------------------------------------
    def topics(self) -> list[str]:
        with self._lock:
            return sorted(self._topics)

    def _topic(self, topic: str) -> Topic:
        check_name("topic", topic)
        with self._lock:
            t = self._topics.get(topic)
        if t is None:
            raise NotFound(f"topic {topic!r} does not exist")
        return t

    def get_topic(self, topic: str) -> TopicConfig:
        return self._topic(topic).config

    def capacity(self) -> tuple[int, int]:
        """(capacity, reserve) in bytes: configured, else the volume's size."""
        cap = self.settings.capacity_bytes or shutil.disk_usage(self.data_dir).total
        return cap, int(cap * self.settings.reserve_fraction)

    def put_topic(self, topic: str, request: TopicConfigRequest) -> tuple[TopicConfig, bool]:
        """Create or update; returns (config, created). 409 if the budget does not fit."""
        check_name("topic", topic)
        with self._lock:
            existing = self._topics.get(topic)
            created = existing is None
            base = existing.config if existing else self.settings.topic_defaults
            config = request.apply_to(base)
            self._check_budget(topic, config)
            partitions = [str(i) for i in range(config.partitions)]
            self._manifest.put_topic(topic, config, partitions)
            if existing is None:
                existing = Topic(topic, config)
                self._topics[topic] = existing
            existing.config = config
            with existing.lock:
                for p in partitions:
                    if p not in existing.partitions:
                        existing.partitions[p] = self._partition(topic, p, Index(0), [])
        TOPIC_BUDGET_BYTES.labels(topic).set(config.retention.max_bytes)
        self._enforce(topic, publish=True)  # a lowered budget takes effect at once
        return config, created

    def _check_budget(self, topic: str, config: TopicConfig) -> None:
        cap, reserve = self.capacity()
        others = sum(
            t.config.retention.max_bytes for name, t in self._topics.items() if name != topic
        )
        allowed = cap - reserve
        if others + config.retention.max_bytes > allowed:
            raise Conflict(
                f"topic {topic!r} budget of {config.retention.max_bytes} bytes does not fit: "
                f"node capacity {cap} minus reserve {reserve} leaves {allowed - others} bytes "
                f"beside the {others} bytes allocated to other topics"
            )

    def delete_topic(self, topic: str) -> None:
        """Remove the topic and all its data. NotFound if it does not exist."""
        t = self._topic(topic)
        with self._lock:
            self._topics.pop(topic, None)
        for p in t.partitions.values():
            p.abort()
            for row in p.view().sealed:
                self._cache.evict(row.id)
        self._manifest.delete_topic(topic)
        shutil.rmtree(self.data_dir / "topics" / topic, ignore_errors=True)
        for metric in (TOPIC_BYTES, TOPIC_BUDGET_BYTES):
            with contextlib.suppress(KeyError):
                metric.remove(topic)
        self._publish_snapshot()

    def topic_usage(self, topic: str) -> TopicUsage:
        t = self._topic(topic)
        usage = TopicUsage(bytes=0, records=0)
        with t.lock:
            parts = dict(t.partitions)
        for name, p in sorted(parts.items()):
            view = p.view()
            nbytes = sum(r.bytes for r in view.sealed) + sum(s.nbytes for s, _ in view.pending)
            records = view.end - view.start
            usage.partitions[name] = PartitionUsage(
                Span(view.start, view.end), nbytes, records, len(view.sealed) + len(view.pending)
            )
            usage.bytes += nbytes
            usage.records += records
        return usage

    def node_usage(self) -> NodeUsage:
        cap, reserve = self.capacity()
        with self._lock:
            names = list(self._topics)
            allocated = sum(t.config.retention.max_bytes for t in self._topics.values())
        used = sum(self.topic_usage(n).bytes for n in names)
        return NodeUsage(
            capacity_bytes=cap,
            reserve_bytes=reserve,
            allocated_bytes=allocated,
            used_bytes=used,
            free_disk_bytes=shutil.disk_usage(self.data_dir).free,
            topics=len(names),
        )

    # --- data -------------------------------------------------------------------
    def append(self, topic: str, partition: str, table: pa.Table) -> Span:
        """Append all rows of ``table`` or none; returns the indexes assigned.

        Returns after the rows are durable (per the durability mode).
        """
        check_name("topic", topic)
        check_name("partition", partition)
        if self._closed.is_set():
            raise Unavailable("the node is shutting down")
        t = self._topic_for_append(topic)
        table = prepare(table, t.config.segment.format)
        self._check_free_space()
        p = self._partition_for_append(t, partition)
        try:
            span = p.append(table, t.config.segment)
        except (OSError, sqlite3.OperationalError) as exc:
            if _disk_full(exc):
                raise InsufficientStorage(
                    f"volume full while appending to {topic}/{partition}: the append was not "
                    "stored; writes are refused until retention or an operator frees space, "
                    "reads go on"
                ) from exc
            raise
        APPENDED_ROWS.labels(topic).inc(table.num_rows)
        APPENDED_BYTES.labels(topic).inc(table.nbytes)
        return span

    def _topic_for_append(self, topic: str) -> Topic:
        with self._lock:
            t = self._topics.get(topic)
            if t is not None:
                return t
            if not self.settings.auto_create_topics:
                raise NotFound(
                    f"topic {topic!r} does not exist and auto-creation is off; "
                    "create it with PUT /admin/topics/{topic}"
                )
            self.put_topic(topic, TopicConfigRequest())
            return self._topics[topic]

    def _partition_for_append(self, t: Topic, partition: str) -> Partition:
        with t.lock:
            p = t.partitions.get(partition)
            if p is None:
                self._manifest.add_partition(t.name, partition)
                p = self._partition(t.name, partition, Index(0), [])
                t.partitions[partition] = p
            return p

    def _check_free_space(self) -> None:
        free = shutil.disk_usage(self.data_dir).free
        if free < self.settings.min_free_bytes:
            raise Unavailable(
                f"disk nearly full: {free} bytes free, below the floor of "
                f"{self.settings.min_free_bytes}; writes are refused, reads go on"
            )

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
        check_name("partition", partition)
        t = self._topic(topic)
        p = t.partitions.get(partition)
        if p is None:
            return PartitionRead(pa.table({}), None, RecordStatus.ALL)
        return reading.read_range(
            p.view(), self.data_dir, self._cache, start, limit, time_range, max_bytes
        )

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
        t = self._topic(topic)
        for name in cursor:
            check_name("partition", name)
        with t.lock:
            parts = dict(t.partitions)
        names = reading.select_partitions(list(parts), partition_filter)
        return reading.iterate(
            {n: parts[n].view() for n in names},
            self.data_dir,
            self._cache,
            cursor,
            limit,
            order,
            time_range,
            max_bytes,
        )

    # --- background -------------------------------------------------------------
    def _on_sealed(self, topic: str) -> None:
        self._enforce(topic, publish=True)

    def _enforce(self, topic: str, publish: bool) -> int:
        """Retention for one topic; with ``publish`` the snapshot is always republished."""
        with self._lock:
            t = self._topics.get(topic)
        if t is None:
            return 0
        with self._retention_lock:
            with t.lock:
                parts = list(t.partitions.values())
            doomed = retention.enforce(
                topic, parts, t.config.retention, self._manifest, self._cache, self.data_dir
            )
            if doomed or publish:
                self._publish_snapshot()
            for path in doomed:
                path.unlink(missing_ok=True)
        TOPIC_BYTES.labels(topic).set(sum(r.bytes for p in parts for r in p.view().sealed))
        return len(doomed)

    def _publish_snapshot(self) -> None:
        with self._snapshot_lock:
            self._publish_snapshot_locked()

    def _publish_snapshot_locked(self) -> None:
        """Collect and write under one lock, so an older view never overwrites a newer one."""
        doc: dict[str, object] = {}
        with self._lock:
            topics = list(self._topics.values())
        for t in topics:
            with t.lock:
                parts = dict(t.partitions)
            pdoc: dict[str, object] = {}
            for name, p in sorted(parts.items()):
                sealed = p.view().sealed
                pdoc[name] = {
                    "start": sealed[0].first_index if sealed else 0,
                    "end": sealed[-1].end_index if sealed else 0,
                    "segments": [r.to_json() for r in sealed],
                }
            doc[t.name] = {"config": t.config.model_dump(), "partitions": pdoc}
        try:
            self._snapshot.write(doc)
        except OSError:
            log.exception("could not publish snapshot.json")

    def _tick_loop(self) -> None:
        interval = self.settings.retention_interval_seconds
        flush_every = self.settings.durability.relaxed_interval_ms / 1000
        last_retention = time.monotonic()
        while not self._closed.wait(flush_every if self._relaxed else min(interval, 1.0)):
            now = time.monotonic()
            with self._lock:
                topics = list(self._topics.values())
            for t in topics:
                with t.lock:
                    parts = list(t.partitions.values())
                for p in parts:
                    try:
                        if self._relaxed:
                            p.flush()
                        p.roll_if_old(now)
                        p.retry_failed_seal()
                    except Exception:
                        log.exception("background work on %s/%s failed", p.topic, p.name)
            if now - last_retention >= interval:
                last_retention = now
                for t in topics:
                    try:
                        self._enforce(t.name, publish=False)
                    except Exception:
                        log.exception("retention of %s failed", t.name)


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno == ENOSPC
    return "full" in str(exc)  # sqlite3: "database or disk is full"


def _lock_data_dir(data_dir: Path) -> IO[bytes]:
    """One node per data directory: a second writer would corrupt segments and indexes."""
    f = (data_dir / "lock").open("a+b")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise Unavailable(f"data directory {data_dir} is in use by another plateau node") from None
    return f
