"""The background uploader: every sealed segment of an archived topic goes to the archive.

Order: the oldest unarchived sealed segment first, across the node
(``upload_concurrency`` at once), but within a partition strictly in index
order: a partition's next segment is claimed only once the previous one is
recorded, so each partition's archived span grows without holes.

Durability ordering, per segment (each step only after the one before it):

1. the object is uploaded to its deterministic key and verified (size, footer);
2. its SQLite row is committed (``Manifest.record_archived``);
3. the topic's manifest object is replaced, listing it (``ArchiveStatus.publish``);
4. only now may retention delete the local segment (``ArchiveStatus.is_archived``).

A ``kill -9`` anywhere: a segment without its SQLite row is uploaded again on
the next start, to the same key (an overwrite, never a second copy); the
manifest objects are rewritten from SQLite at every start, before retention
may delete anything of an archive-required topic.

Failures back off per topic (1 s doubling up to ``retry_max_seconds``) and
set the topic's state (``ArchiveStatus``); a refusal of the credentials makes
the client read its credentials file again. ``close`` stops promptly: an
upload in progress is left to finish or fail on its daemon thread and is
never recorded after the engine closed (the next start uploads it again).

Locks: ``_lock`` (with its condition ``_wake``) guards the in-flight and
dirty sets only: a leaf, no I/O and no other lock under it. No lock is held
across a network call; the partitions' views and the status take their own
leaf-or-lower locks with ``_lock`` released.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from plateau.protocol.archive import ArchivedSegment, ArchiveManifest, manifest_key, segment_key
from plateau.protocol.topic_config import TopicConfig
from plateau.storage.archive.convert import clean_tmp, stage
from plateau.storage.archive.status import ArchiveStatus, Mark
from plateau.storage.archive.store import Archive, ArchiveError, classify
from plateau.storage.catalog.manifest import Manifest, SegmentRow
from plateau.storage.config import ArchiveSettings
from plateau.storage.metrics import ARCHIVE_FAILURES, ARCHIVE_UPLOADED_BYTES, ARCHIVE_UPLOADS
from plateau.storage.partition import Partition

log = logging.getLogger(__name__)
IDLE_WAIT = 1.0  # seconds between looks when no nudge came (a seal nudges at once)

Sources = Callable[[], list[tuple[str, TopicConfig, list[Partition]]]]
"""The archive-enabled topics: name, config and partitions, read when work is chosen."""

Job = tuple[str, TopicConfig, Partition, SegmentRow]


class Uploader:
    def __init__(
        self,
        archive: Archive,
        manifest: Manifest,
        status: ArchiveStatus,
        sources: Sources,
        data_dir: Path,
        settings: ArchiveSettings,
        on_archived: Callable[[str], None],
    ) -> None:
        self.archive = archive
        self._manifest = manifest
        self._status = status
        self._sources = sources
        self._data_dir = data_dir
        self._settings = settings
        self._on_archived = on_archived
        self._tmp = clean_tmp(data_dir)
        self._stop = threading.Event()
        self._lock = threading.Lock()  # leaf: the sets below
        self._wake = threading.Condition(self._lock)
        self._inflight: set[Mark] = set()
        self._dirty: set[str] = set()  # topics whose manifest object must be rewritten
        self._publishing: set[str] = set()
        self._bucket_ok = False
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Rewrite every archived topic's manifest object, then upload; all in the background
        (an unreachable archive must not hold the node's start)."""
        with self._lock:
            self._dirty.update(name for name, _, _ in self._sources())
        for i in range(self._settings.upload_concurrency):
            t = threading.Thread(target=self._run, name=f"archive-upload-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def nudge(self) -> None:
        """A segment was sealed (or a topic's archive turned on): look for work now."""
        with self._wake:
            self._wake.notify_all()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the threads; one still in a network call after ``timeout`` is left behind."""
        self._stop.set()
        self.nudge()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def idle(self) -> bool:
        """Nothing in flight and no manifest object waiting (for tests and benchmarks)."""
        with self._lock:
            return not self._inflight and not self._dirty and not self._publishing

    # --- the loop ---------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._publish_one():
                    continue
                job = self._claim()
            except Exception:
                log.exception("archive uploader: choosing work failed")
                job = None
            if job is None:
                self._sleep()
                continue
            topic, config, part, row = job
            try:
                self._upload(topic, config, part, row)
            except FileNotFoundError:
                log.info("%s left the disk before it was archived", row.path)
            except Exception as exc:
                self._failed(topic, exc, f"uploading {row.path}")
            finally:
                with self._lock:
                    self._inflight.discard((topic, row.partition))

    def _sleep(self) -> None:
        wait = IDLE_WAIT
        retry_at = self._status.retry_at()
        if retry_at:
            wait = max(0.05, min(wait, retry_at - time.monotonic()))
        with self._wake:
            if not self._stop.is_set():
                self._wake.wait(wait)

    def _claim(self) -> Job | None:
        """The oldest segment that is next in its partition, not in flight, of a topic not
        backing off; marked in flight."""
        now = time.monotonic()
        candidates: list[Job] = []
        for topic, config, parts in self._sources():
            if self._status.waiting(topic, now):
                continue
            for p in parts:
                mark = self._status.recorded(topic, p.name)
                for row in p.view().sealed:
                    if row.end_index > mark:
                        candidates.append((topic, config, p, row))
                        break
        candidates.sort(key=lambda job: job[3].id)
        for job in candidates:
            topic, _, p, row = job
            with self._lock:
                if (topic, p.name) in self._inflight:
                    continue
                self._inflight.add((topic, p.name))
            # another thread may have recorded it since the scan (it leaves _inflight after
            # recording, so a claim made after that sees the new mark here)
            if row.end_index > self._status.recorded(topic, p.name):
                return job
            with self._lock:
                self._inflight.discard((topic, p.name))
        return None

    def _ready(self) -> None:
        if not self._bucket_ok:
            self.archive.check_bucket()
            self._bucket_ok = True

    def _upload(self, topic: str, config: TopicConfig, part: Partition, row: SegmentRow) -> None:
        self._ready()
        staged = stage(row, self._data_dir, self._tmp, config.segment.codec())
        key = segment_key(topic, row.partition, row.first_index, row.end_index)
        try:
            if staged.rows != row.rows:
                raise ArchiveError("Behind", f"{row.path} holds {staged.rows} rows, not {row.rows}")
            sent = self.archive.put_file(key, staged.path)
            span = (row.first_index, row.end_index) if staged.span_in_footer else None
            try:
                etag = self.archive.verify(key, sent.size, staged.rows, span)
            except ArchiveError:
                self.archive.discard(key)  # not recorded: no reader may meet it
                raise
        finally:
            staged.discard()
        seg = ArchivedSegment(
            partition=row.partition,
            start=row.first_index,
            end=row.end_index,
            min_time_ms=row.min_time_ms,
            max_time_ms=row.max_time_ms,
            bytes=sent.size,
            key=key,
            etag=etag,
            schema=staged.fields(),
            archived_at=time.time(),
        )
        if part.deleted or self._stop.is_set():
            return  # a deleted topic records nothing; a stopping node records it next start
        self._manifest.record_archived(seg, topic)
        self._status.record(topic, row.partition, row.end_index)
        ARCHIVE_UPLOADS.labels(topic, "ok").inc()
        ARCHIVE_UPLOADED_BYTES.labels(topic).inc(sent.size)
        with self._lock:
            self._dirty.add(topic)

    def _publish_one(self) -> bool:
        """Rewrite one dirty topic's manifest object; False when none waits.

        Uploads that finish while a topic's manifest object is being written
        mark it dirty again, so they share the next write (coalesced).
        """
        now = time.monotonic()
        with self._lock:
            ready = [t for t in self._dirty if t not in self._publishing]
        ready = [t for t in ready if not self._status.waiting(t, now)]
        if not ready:
            return False
        topic = ready[0]
        with self._lock:
            if topic in self._publishing or topic not in self._dirty:
                return True
            self._dirty.discard(topic)
            self._publishing.add(topic)
        try:
            if topic not in {name for name, _, _ in self._sources()}:
                return True  # deleted (or no longer archived): leave its object as it is
            self._ready()
            marks = self._status.recorded_marks(topic)  # before reading: it lists at least these
            doc = ArchiveManifest(
                topic=topic,
                updated_at=time.time(),
                segments=self._manifest.archived_segments(topic),
            )
            body = doc.model_dump_json(by_alias=True, indent=1).encode()
            self.archive.put_bytes(manifest_key(topic), body)
            self._status.publish(marks)
        except Exception as exc:
            with self._lock:
                self._dirty.add(topic)
            self._failed(topic, exc, "writing the manifest object")
            return True
        finally:
            with self._lock:
                self._publishing.discard(topic)
        self._on_archived(topic)
        return True

    def _failed(self, topic: str, exc: BaseException, doing: str) -> None:
        err = classify(exc)
        self._bucket_ok = False
        if err.state == "Unauthorized" and self._settings.credentials_file is not None:
            try:
                self.archive.refresh()
            except Exception as again:
                err = classify(again)
        delay = self._status.failed(topic, err.state, err.message, self._settings.retry_max_seconds)
        ARCHIVE_FAILURES.labels(topic, err.state).inc()
        if doing.startswith("uploading"):
            ARCHIVE_UPLOADS.labels(topic, "failed").inc()
        log.warning("archive of %s: %s failed (%s), retrying in %.0f s", topic, doing, err, delay)
