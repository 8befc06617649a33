"""``snapshot.json``: the sealed segments, for readers that must not open SQLite.

Spark mounts the volume read-only and cannot open a WAL database (a WAL
reader writes ``-shm``), so after every seal and deletion the node replaces
this file atomically. A reader that loaded an older snapshot may find a
segment deleted by retention; it skips it (the data was past its budget).
The document's shape and version are ``plateau.protocol.snapshot``'s; this
module gathers the catalog into it and makes the write atomic and durable.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from plateau.protocol.snapshot import (
    SNAPSHOT_FILE,
    Snapshot,
    SnapshotError,
    SnapshotPartition,
    SnapshotSegment,
    SnapshotTopic,
    decode,
    encode,
)
from plateau.storage.catalog.manifest import SegmentRow
from plateau.storage.data.durable_io import publish
from plateau.storage.data.group_commit import GroupCommit
from plateau.storage.topics import Topic

log = logging.getLogger(__name__)


class SnapshotWriter:
    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / SNAPSHOT_FILE
        self._lock = threading.Lock()
        self._generation = 0
        try:  # generations keep growing across restarts
            self._generation = decode(self._path.read_bytes()).generation
        except (OSError, SnapshotError):
            self._generation = 0

    def write(self, topics: Iterable[Topic]) -> None:
        """Publish every topic's sealed segments as they are now."""
        listed = {t.name: _topic(t) for t in topics}
        with self._lock:
            self._generation += 1
            data = encode(
                Snapshot(generation=self._generation, written_at=time.time(), topics=listed)
            )

            def write(f: BinaryIO) -> None:
                f.write(data)

            publish(self._path, write)


class SnapshotPublisher:
    """When ``snapshot.json`` is written: one write serves every request made before it.

    ``publish`` waits (a deletion must not unlink a file the published snapshot
    still names); ``request`` does not (after a seal, readers see the new segment
    a moment later). Why not wait after a seal: a snapshot is a file write with
    two fsyncs, and waiting for it capped the seal rate, so with 64 partitions
    sealing small segments early, open segments filled memory and appends got 429.
    The group commit runs one write at a time, so an older view never wins.
    """

    def __init__(self, data_dir: Path, topics: Callable[[], Iterable[Topic]]) -> None:
        self._writer = SnapshotWriter(data_dir)
        self._topics = topics
        self._requests = itertools.count(1)
        self._commit = GroupCommit(self._write, timed=False)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshot")

    def publish(self) -> None:
        """Return once a snapshot taken after this call is written."""
        request = next(self._requests)
        self._commit.written(request)
        self._commit.wait(request)

    def request(self) -> None:
        """Have a snapshot written soon, without waiting for it."""
        request = next(self._requests)
        self._commit.written(request)
        with contextlib.suppress(RuntimeError):  # shut down: close() publishes one last time
            self._worker.submit(self._commit.wait, request)

    def close(self) -> None:
        """Finish requested writes; ``publish`` still works after (the last one at close)."""
        self._worker.shutdown(wait=True)

    def _write(self) -> None:
        try:
            self._writer.write(self._topics())
        except OSError:
            log.exception("could not publish snapshot.json")


def _topic(topic: Topic) -> SnapshotTopic:
    partitions: dict[str, SnapshotPartition] = {}
    for name, p in sorted(topic.by_name().items()):
        sealed = p.view().sealed
        partitions[name] = SnapshotPartition(
            start=sealed[0].first_index if sealed else 0,
            end=sealed[-1].end_index if sealed else 0,
            segments=tuple(_segment(r) for r in sealed),
        )
    config, _owner = topic.state()
    return SnapshotTopic(config=config, partitions=partitions)


def _segment(row: SegmentRow) -> SnapshotSegment:
    return SnapshotSegment(
        id=row.id,
        path=row.path,
        format=row.format,
        first_index=row.first_index,
        end_index=row.end_index,
        rows=row.rows,
        bytes=row.bytes,
        min_time_ms=row.min_time_ms,
        max_time_ms=row.max_time_ms,
    )
