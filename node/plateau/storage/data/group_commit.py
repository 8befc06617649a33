"""Group commit: many appenders, one fsync.

Each appender writes under the partition lock, notes the sequence number
(rows written so far) its data ends at, releases the lock and calls ``wait``.
The first waiter becomes the syncer: it fsyncs everything written up to that
moment; waiters that arrive meanwhile are covered by the next fsync, so a
burst of N appends costs about two fsyncs instead of N. ``close`` syncs what
is left and refuses further syncs, so a sealed file is never fsynced after
its descriptor is closed.

The engine uses the same pattern for ``snapshot.json``: every seal and
deletion asks for a snapshot, and one write covers all that asked meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from plateau.storage.metrics import FSYNC_SECONDS


class GroupCommit:
    def __init__(self, sync: Callable[[], None], timed: bool = True) -> None:
        self._sync = sync
        self._timed = timed  # observe plateau_fsync_seconds
        self._cond = threading.Condition()
        self._written = 0
        self._synced = 0
        self._syncing = False
        self._closed = False

    @property
    def synced(self) -> int:
        return self._synced

    def written(self, seq: int) -> None:
        """Record that data up to ``seq`` is in the page cache (called under the writer's lock)."""
        with self._cond:
            self._written = max(self._written, seq)

    def wait(self, seq: int) -> None:
        """Return once data up to ``seq`` is fsynced."""
        with self._cond:
            while self._synced < seq:
                if self._syncing:
                    self._cond.wait()
                    continue
                if self._closed:
                    raise RuntimeError("group commit closed before data was synced")
                self._syncing = True
                target = self._written
                self._cond.release()
                try:
                    started = time.perf_counter()
                    self._sync()
                    if self._timed:
                        FSYNC_SECONDS.observe(time.perf_counter() - started)
                finally:
                    self._cond.acquire()
                    self._syncing = False
                    self._cond.notify_all()
                self._synced = max(self._synced, target)

    def close(self, final: Callable[[], None]) -> None:
        """Sync everything written, then run ``final`` (which closes the file) exclusively."""
        self.wait(self._written)
        with self._cond:
            while self._syncing:
                self._cond.wait()
            self._closed = True
            final()
            self._synced = self._written
            self._cond.notify_all()
