"""The storage engine: the one object the server, CLI and tests talk to.

Thread-safe and synchronous: the HTTP server calls it from worker threads, so
a blocking fsync never stalls the event loop and concurrent appends to one
partition share a group commit. Start-up recovers the data directory
(``Recovery``); ``close`` seals every open segment, so a clean shutdown
leaves nothing to recover.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import sqlite3
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from plateau.protocol.errors import InsufficientStorage, NotFound, Unavailable
from plateau.protocol.names import check_name
from plateau.protocol.replies import Memory, NodeInfo, TopicUsage
from plateau.protocol.topic_config import TopicConfig, TopicConfigRequest, TopicOwner
from plateau.protocol.values import Span
from plateau.storage import usage
from plateau.storage.archive import Archive, ArchiveStatus, Uploader
from plateau.storage.catalog.manifest import Manifest, SegmentRow
from plateau.storage.catalog.memory import MemoryBudget, MemoryFull, default_budget
from plateau.storage.catalog.progress import Progress
from plateau.storage.config import StorageSettings
from plateau.storage.data.durable_io import BALLAST, Ballast, disk_full, lock_data_dir
from plateau.storage.data.reader_cache import ReaderCache
from plateau.storage.data.recycle import Recycler
from plateau.storage.data.validation import prepare
from plateau.storage.engine_reads import EngineReads
from plateau.storage.engine_upkeep import EngineUpkeep
from plateau.storage.metrics import (
    APPENDED_BYTES,
    APPENDED_ROWS,
    ARCHIVE_LAG_BYTES,
    ARCHIVE_LAG_SECONDS,
    ARCHIVE_LAG_SEGMENTS,
    EARLY_SEALS,
    TOPIC_BUDGET_BYTES,
    TOPIC_BYTES,
)
from plateau.storage.partition import Partition, PartitionContext
from plateau.storage.recovery import recover
from plateau.storage.sealing import lower_thread_priority
from plateau.storage.snapshot_writer import SnapshotPublisher
from plateau.storage.topics import Catalog, PutResult, Topic
from plateau.storage.types import (
    Index,
    WritePolicy,
)

log = logging.getLogger(__name__)
SEALER_THREADS = 4
"""An arrow seal is mostly waits (the last fsync, the footer's, the rename's directory
fsync, the manifest's commit: 10-15 ms); under a memory limit open segments are sealed
early, 50-60 a second with 48 writers on 64 partitions, and two threads did not keep up:
appends got 429 until memory was freed (``bench/ingest.py --partitions 64 --writers 48
--memory-limit 1610612736 --compare-unlimited``: 625 against 58 429s, 0.72x against 0.82x
the unlimited rate). Parquet seals are capped apart (``sealing.REWRITES_AT_ONCE``)."""


class Engine(EngineReads, EngineUpkeep):
    """Owns the manifest, every partition writer, retention and the snapshot.

    Its reads are in ``EngineReads`` (``engine_reads``) and its background upkeep in
    ``EngineUpkeep`` (``engine_upkeep``); the attributes they share are declared in
    ``EngineParts`` and set here.

    Locks, in the order they may be taken (``plateau.storage.catalog.locks`` checks it
    in debug runs): the catalog's ``admin_lock`` (topic create/update/delete and
    new partitions, one at a time; they write the manifest under it, appends
    never wait for it) -> a topic's ``retention_lock`` -> a partition's lock ->
    the manifest's lock -> the catalog's dict locks, which guard only their
    dicts: no I/O, retention or sealing ever happens under them. The engine
    itself holds no lock of its own: ``snapshot.json`` is written through a
    group commit, and early sealing is one thread at a time by a lock that is
    only ever try-acquired.
    """

    def __init__(self, settings: StorageSettings) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir.resolve()
        (self.data_dir / "topics").mkdir(parents=True, exist_ok=True)
        self._lock_file = lock_data_dir(self.data_dir)
        self._ballast = Ballast(self.data_dir / BALLAST, settings.ballast_bytes)
        self.memory = MemoryBudget(
            default_budget(settings.memory_budget_bytes, settings.memory_overhead_bytes),
            settings.read_cache_bytes,
            settings.archive.read_cache_bytes if settings.archive.url else 0,
        )
        self._cache = ReaderCache(
            decoded_bytes=self.memory.read_cache_limit,
            # without a decoded cache, the next page would read the dropped pages again
            drop_pages=settings.drop_read_pages and self.memory.read_cache_limit > 0,
            decode_ahead=settings.decode_ahead,
            direct_reads=settings.direct_reads,
        )
        self.memory.read_cache_used = self._cache.decoded_bytes
        self.stored_reads = settings.stored_reads
        self.progress = Progress(settings.stall_seconds)
        self._snapshot = SnapshotPublisher(self.data_dir, lambda: self._catalog.current())
        self._sealer = ThreadPoolExecutor(
            max_workers=SEALER_THREADS,
            thread_name_prefix="sealer",
            initializer=lower_thread_priority,
            initargs=(settings.sealer_nice,),
        )
        # one thread at a time seals early (only ever try-acquired, so it orders with nothing)
        self._relieving = threading.Lock()
        self._relaxed = settings.durability.mode == "relaxed"
        self._closed = threading.Event()
        # kept write-ahead files are a cache: gone before the recovery needs the room
        self.recycler = Recycler(self.data_dir, settings.recycled_write_ahead_files)
        self.recycler.reset()
        self._manifest, recovered = self._open_and_recover()
        # the archive (None without storage.archive.url): reads GET objects through .fs
        self.archive: Archive | None = Archive(settings.archive) if settings.archive.url else None
        self.archive_status = ArchiveStatus(self._manifest, settings.archive.url)
        self._uploader: Uploader | None = None
        policy = WritePolicy(self._relaxed, settings.drop_written_pages, settings.direct_writes)
        self._ctx = PartitionContext(
            self.data_dir,
            self._manifest,
            self._sealer,
            self._on_sealed,
            policy,
            self.memory,
            self.progress,
            # only O_DIRECT segments reuse them (``OpenSegment.create``), so none are kept
            # when no segment could take them
            recycler=self.recycler if self.recycler.limit > 0 and policy.direct else None,
        )
        self._catalog = Catalog(
            self._manifest,
            settings.topic_defaults,
            self._partition,
            self.capacity,
            self.data_dir,
            settings.archive.url,
        )
        self._catalog.load(recovered)
        for topic in self._catalog.current():
            self._enforce(topic, publish=False)
        self._snapshot.publish()
        if self.archive is not None:
            self._uploader = Uploader(
                self.archive,
                self._manifest,
                self.archive_status,
                self._archived_topics,
                self.data_dir,
                settings.archive,
                self._on_archived,
            )
            self._uploader.start()
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
                if attempt or not disk_full(exc) or not self._ballast.release():
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
        return Partition(topic, name, self._ctx, next_index, sealed)

    def close(self) -> None:
        """Stop background work, seal open segments durably, close the manifest."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._uploader is not None:
            self._uploader.close()  # an upload in flight is finished or redone next start
        self._timer.join(timeout=10)
        for p in self._catalog.all_partitions():
            try:
                p.close()
            except Exception:
                log.exception("closing %s/%s failed; recovery will finish it", p.topic, p.name)
        self._sealer.shutdown(wait=True)
        self.recycler.release()  # after the last seal: a stopped node holds no kept files
        self._snapshot.close()
        self._cache.close()
        self._snapshot.publish()
        self._manifest.close()
        self._lock_file.close()

    # --- topics -----------------------------------------------------------------
    def topics(self) -> list[str]:
        return self._catalog.names()

    def _topic(self, topic: str) -> Topic:
        return self._catalog.get(topic)

    def get_topic(self, topic: str) -> TopicConfig:
        return self._topic(topic).config

    def topic_state(self, topic: str) -> tuple[TopicConfig, TopicOwner | None]:
        """A topic's config and owner, as one consistent pair."""
        return self._topic(topic).state()

    def capacity(self) -> tuple[int, int]:
        """(capacity, reserve) in bytes: configured, else the volume's size."""
        cap = self.settings.capacity_bytes or shutil.disk_usage(self.data_dir).total
        return cap, int(cap * self.settings.reserve_fraction)

    def put_topic(self, topic: str, request: TopicConfigRequest) -> PutResult:
        """Create or update; the result has the config, whether it was created and the
        owner decision. 409 (nothing changed) for another owner's topic, fewer partitions
        or a raised budget that does not fit."""
        check_name("topic", topic)
        with self.progress.track(f"put topic {topic}"):
            t, result = self._catalog.put(topic, request)
            self._enforce(t, publish=True)  # a lowered budget takes effect at once
        if self._uploader is not None and t.config.archive.enabled:
            self._uploader.nudge()  # archive just turned on: upload what is sealed
        return result

    def delete_topic(self, topic: str, owner_uid: str | None = None) -> None:
        """Remove the topic and all its data (its indexes are kept). NotFound if missing;
        with ``owner_uid``, 409 (nothing deleted) unless that owner holds the topic."""
        with self.progress.track(f"delete topic {topic}"):
            parts, trash = self._catalog.delete(topic, owner_uid)
            self.archive_status.forget(topic)
            for p in parts:
                for row in p.view().sealed:
                    self._cache.evict(row.id)
            self._snapshot.publish()
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        lags = (ARCHIVE_LAG_SEGMENTS, ARCHIVE_LAG_BYTES, ARCHIVE_LAG_SECONDS)
        for metric in (TOPIC_BYTES, TOPIC_BUDGET_BYTES, *lags):
            with contextlib.suppress(KeyError):
                metric.remove(topic)

    def topic_usage(self, topic: str) -> TopicUsage:
        """What the topic stores now, as ``GET /admin/topics/{t}`` replies it."""
        t = self._topic(topic)
        archive = None
        if t.config.archive.enabled:
            archive = self.archive_status.report(
                topic,
                t.config,
                list(t.by_name().values()),
                self._manifest.archived_spans(topic),
                held=t.archive_held is not None,
            )
        return usage.topic_usage(t.by_name(), archive)

    def node_usage(self, with_topics: bool = False) -> NodeInfo:
        """Capacity, budgets and bytes stored, as ``GET /admin/node`` replies them; with
        ``with_topics`` every topic's usage too (the same figures ``used_bytes`` sums)."""
        cap, reserve = self.capacity()
        topics = self._catalog.current()
        allocated = sum(t.config.retention.max_bytes for t in topics)
        usages: dict[str, TopicUsage] = {}
        for t in topics:
            with contextlib.suppress(NotFound):  # deleted meanwhile
                usages[t.name] = self.topic_usage(t.name)
        memory = self.memory
        return NodeInfo(
            capacity_bytes=cap,
            reserve_bytes=reserve,
            allocated_bytes=allocated,
            used_bytes=sum(u.bytes for u in usages.values()),
            free_disk_bytes=shutil.disk_usage(self.data_dir).free,
            topics=len(topics),
            memory=Memory.model_validate(
                {"budget_bytes": memory.total, "source": memory.source, "parts": memory.parts()}
            ),
            topic_usage=dict(sorted(usages.items())) if with_topics else None,
        )

    # --- data -------------------------------------------------------------------
    def append(
        self,
        topic: str,
        partition: str,
        table: pa.Table,
        messages: Sequence[pa.Message] | None = None,
    ) -> Span:
        """Append all rows of ``table`` or none; returns the indexes assigned.

        Returns after the rows are durable (per the durability mode). ``messages``:
        the table's Arrow IPC batch messages as received, written as they are when
        validation leaves the table unchanged (``Partition.append``).
        """
        check_name("topic", topic)
        check_name("partition", partition)
        if self._closed.is_set():
            raise Unavailable("the node is shutting down")
        with self.progress.track(f"append {topic}/{partition}"):
            t = self._topic_for_append(topic)
            if t.archive_held is not None:
                usage.check_archive_behind(t, self.archive_status, self.archive is not None)
            prepared = prepare(table, t.config.segment.format)
            if prepared is not table:
                table, messages = prepared, None  # changed: encoded again from the table
            self._check_free_space()
            p = self._catalog.partition(t, partition)
            nbytes = table.nbytes  # once: each call walks the buffers and drops the GIL
            try:
                span = self._append_with_room(p, t, table, messages, nbytes)
            except (OSError, sqlite3.OperationalError) as exc:
                if disk_full(exc):
                    raise InsufficientStorage(
                        f"volume full while appending to {topic}/{partition}: the append was "
                        "not stored; writes are refused until retention or an operator frees "
                        "space, reads go on"
                    ) from exc
                raise
        APPENDED_ROWS.labels(topic).inc(table.num_rows)
        APPENDED_BYTES.labels(topic).inc(nbytes)
        if self.memory.seal_early_excess():
            self._seal_early()
        return span

    def _append_with_room(
        self,
        p: Partition,
        t: Topic,
        table: pa.Table,
        messages: Sequence[pa.Message] | None,
        nbytes: int,
    ) -> Span:
        """``p.append``, waiting up to ``memory_wait_seconds`` for room when open segments
        fill their part of the memory budget (``MemoryFull``: raised before anything is
        written). The wait holds no lock; another append may take the room first, so it
        tries again until the deadline, then the 429 goes to the client."""
        deadline = time.monotonic() + self.settings.memory_wait_seconds
        while True:
            try:
                return p.append(table, t.config.segment, t.config.archive.enabled, messages, nbytes)
            except MemoryFull:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
            self._seal_early()  # in case open segments, not seals, hold the memory
            self.memory.wait_for_room(nbytes, left)

    def _topic_for_append(self, topic: str) -> Topic:
        t = self._catalog.find(topic)
        if t is not None:
            return t
        if not self.settings.auto_create_topics:
            raise NotFound(
                f"topic {topic!r} does not exist and auto-creation is off; "
                "create it with PUT /admin/topics/{topic}"
            )
        t = self._catalog.ensure(topic)
        self._snapshot.publish()
        return t

    def _seal_early(self) -> None:
        """Memory is short: hand the largest open segments to the sealer, one thread at a time."""
        if not self._relieving.acquire(blocking=False):
            return  # another thread is at it
        try:
            excess = self.memory.seal_early_excess()
            parts = self._catalog.all_partitions()
            parts.sort(key=lambda p: p.open_bytes(), reverse=True)
            for p in parts:
                if excess <= 0:
                    break
                handed = p.roll_early()
                if handed:
                    EARLY_SEALS.inc()
                    excess -= handed
        finally:
            self._relieving.release()

    def _check_free_space(self) -> None:
        free = shutil.disk_usage(self.data_dir).free
        if free < self.settings.min_free_bytes and self.recycler.release() > 0:
            free = shutil.disk_usage(self.data_dir).free  # kept write-ahead files gave room
        if free < self.settings.min_free_bytes:
            raise Unavailable(
                f"disk nearly full: {free} bytes free, below the floor of "
                f"{self.settings.min_free_bytes}; writes are refused, reads go on"
            )
