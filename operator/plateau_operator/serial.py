"""One reconcile per object at a time.

kopf runs a resource's change handlers and its timer as separate tasks, and
sync handlers in a thread pool, so without this a timer holding a stale body
could apply an old spec after a change handler applied the new one, or write
an older ``observedGeneration`` over a newer one. Every reconcile of an
object runs under that object's lock and re-reads the object inside it, so
the last writer always acted on the newest spec.

Lock order: ``ObjectLocks._registry`` is taken only for dictionary updates and
never held while waiting for an object's lock; a thread holds at most one
object lock at a time (a reconcile never reconciles another object). No I/O
happens under ``_registry``; an object's lock covers that object's reconcile
(its API calls and node calls, each with a timeout), which is the point.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

Key = tuple[str, str, str]  # (kind, namespace, name)


@dataclass
class _Entry:
    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0  # threads holding or waiting for the lock; the entry goes at 0


class ObjectLocks:
    def __init__(self) -> None:
        self._registry = threading.Lock()
        self._entries: dict[Key, _Entry] = {}

    @contextmanager
    def hold(self, key: Key, timeout: float = -1) -> Iterator[bool]:
        """Holds ``key``'s lock for the block; yields False when ``timeout`` passed first."""
        with self._registry:
            entry = self._entries.setdefault(key, _Entry())
            entry.users += 1
        acquired = entry.lock.acquire(timeout=timeout)
        try:
            yield acquired
        finally:
            if acquired:
                entry.lock.release()
            with self._registry:
                entry.users -= 1
                if entry.users == 0:
                    self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._registry:
            return len(self._entries)
