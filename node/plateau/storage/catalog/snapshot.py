"""``snapshot.json``: the sealed segments, for readers that must not open SQLite.

Spark mounts the volume read-only and cannot open a WAL database (a WAL
reader writes ``-shm``), so after every seal and deletion the node replaces
this file atomically. A reader that loaded an older snapshot may find a
segment deleted by retention; it skips it (the data was past its budget).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from plateau.storage.data.durable_io import publish

SNAPSHOT = "snapshot.json"
VERSION = 1


class SnapshotWriter:
    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / SNAPSHOT
        self._lock = threading.Lock()
        self._generation = 0
        if self._path.exists():
            try:
                self._generation = int(json.loads(self._path.read_text())["generation"])
            except (ValueError, KeyError, TypeError):
                self._generation = 0

    def write(self, topics: dict[str, Any]) -> None:
        """``topics``: name -> {"config": ..., "partitions": {p: {"start","end","segments"}}}."""
        with self._lock:
            self._generation += 1
            doc = {
                "version": VERSION,
                "generation": self._generation,
                "written_at": time.time(),
                "topics": topics,
            }
            data = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()

            def write(f: BinaryIO) -> None:
                f.write(data)

            publish(self._path, write)
