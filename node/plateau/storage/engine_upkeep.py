"""The engine's background upkeep: retention after seals and uploads, and the timer.

A mixin of ``Engine``, which owns the catalog, the manifest and the snapshot it
works on. The timer thread (``_tick_loop``, named ``retention``) rolls segments
past their age, retries failed seals, flushes under relaxed durability and runs
retention every ``retention_interval_seconds``; sealers and the uploader call
``_on_sealed`` / ``_on_archived`` as they finish. Retention of a topic runs
under its ``retention_lock`` (see ``Engine`` for the lock order); the files it
dooms are unlinked only after a snapshot that no longer names them is published.
"""

from __future__ import annotations

import logging
import threading
import time

from plateau.protocol.topic_config import TopicConfig
from plateau.storage import retention
from plateau.storage.archive import Uploader
from plateau.storage.config import StorageSettings
from plateau.storage.engine_parts import EngineParts
from plateau.storage.metrics import TOPIC_BYTES
from plateau.storage.partition import Partition
from plateau.storage.snapshot_writer import SnapshotPublisher
from plateau.storage.topics import Topic

log = logging.getLogger(__name__)


class EngineUpkeep(EngineParts):
    """Retention and timed work on ``Engine``'s topics; the attributes below (and
    ``EngineParts``') are the engine's."""

    settings: StorageSettings
    _snapshot: SnapshotPublisher
    _uploader: Uploader | None
    _closed: threading.Event
    _relaxed: bool

    def _on_sealed(self, topic: str) -> None:
        t = self._catalog.find(topic)
        if t is not None:
            self._enforce(t, publish=True)
            if self._uploader is not None and t.config.archive.enabled:
                self._uploader.nudge()

    def _archived_topics(self) -> list[tuple[str, TopicConfig, list[Partition]]]:
        """The uploader's work: every archive-enabled topic with its partitions."""
        out = []
        for t in self._catalog.current():
            config = t.config
            if config.archive.enabled and not t.deleted:
                out.append((t.name, config, t.all()))
        return out

    def _on_archived(self, topic: str) -> None:
        """A manifest object now lists more: retention may delete what it held."""
        t = self._catalog.find(topic)
        if t is not None and not self._closed.is_set():
            self._enforce(t, publish=False)  # a snapshot only if it deleted something

    def _enforce(self, t: Topic, publish: bool) -> int:
        """Retention for one topic; with ``publish`` the snapshot is always republished."""
        with t.retention_lock:
            if t.deleted:
                return 0
            parts = t.all()
            archived = self.archive_status.is_archived if self.archive is not None else None
            doomed, plan = retention.enforce(
                t.name, parts, t.config, self._manifest, self._cache, self.data_dir, archived
            )
            t.archive_held = (len(plan.held), plan.held_bytes) if plan.held else None
            for _ in range(plan.deleted_unarchived):
                self.archive_status.deleted_unarchived(t.name)
        TOPIC_BYTES.labels(t.name).set(sum(r.bytes for p in parts for r in p.view().sealed))
        if doomed:
            self._snapshot.publish()  # no longer names the doomed files: now they may go
        elif publish:
            self._snapshot.request()
        for path in doomed:
            path.unlink(missing_ok=True)
        return len(doomed)

    def _tick_loop(self) -> None:
        interval = self.settings.retention_interval_seconds
        flush_every = self.settings.durability.relaxed_interval_ms / 1000
        last_retention = time.monotonic()
        while not self._closed.wait(flush_every if self._relaxed else min(interval, 1.0)):
            with self.progress.track("background tick"):
                last_retention = self._tick(interval, last_retention)

    def _tick(self, interval: float, last_retention: float) -> float:
        now = time.monotonic()
        topics = self._catalog.current()
        for t in topics:
            for p in t.all():
                try:
                    if self._relaxed:
                        p.flush()
                    p.roll_if_old(now)
                    p.retry_failed_seal()
                except Exception:
                    log.exception("background work on %s/%s failed", p.topic, p.name)
        if now - last_retention < interval:
            return last_retention
        for t in topics:
            try:
                self._enforce(t, publish=False)
                if t.config.archive.enabled:
                    self.archive_status.export_lag(t.name, t.all())
            except Exception:
                log.exception("retention of %s failed", t.name)
        return now
