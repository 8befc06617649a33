"""``snapshot.json``: the sealed segments, for readers that must not open SQLite.

Spark mounts the volume read-only and cannot open a WAL database (a WAL
reader writes ``-shm``), so after every seal and deletion the node replaces
this file atomically. A reader that loaded an older snapshot may find a
segment deleted by retention; it skips it (the data was past its budget).
The document's shape and version are ``plateau.protocol.snapshot``'s; this
module gathers the catalog into it and makes the write atomic and durable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
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
from plateau.storage.topics import Topic


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
