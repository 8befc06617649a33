"""When each custom resource is next reconciled without a change: the operator's own timer.

kopf's timers put a finalizer on every object they run for (kopf stops them
before the object goes). A PlateauNode must not carry one: its children go
by owner references, and a finalizer nobody removes (operator uninstalled or
crash-looping) would wedge its deletion and its namespace's. So the periodic
re-apply that puts back what a node lost runs from this book instead, fed by
kopf's watch events (``on.event`` needs no finalizer), for both kinds alike.
``nudge`` makes a known object due now: a topic's reconcile that changed its
node's budgets nudges the node, whose status shows them.

Lock order: ``_lock`` is a leaf (dictionary updates only, no I/O, no callbacks).
"""

from __future__ import annotations

import threading
import time

from plateau_operator.serial import Key


class ResyncBook:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._due: dict[Key, float] = {}
        self._running: set[Key] = set()
        self._retries: dict[Key, int] = {}  # consecutive reconciles that asked for a retry
        self._again: set[Key] = set()  # nudged while running: due again as soon as it ends

    def see(self, key: Key) -> None:
        """A watch event for ``key``: known objects keep their turn, new ones are due now."""
        with self._lock:
            self._due.setdefault(key, time.monotonic())

    def nudge(self, key: Key) -> None:
        """Something ``key``'s status shows changed (a topic changed its node's budgets):
        a known key is due now, or, if a reconcile of it is running (it may have read
        before the change), again right after it. Unknown keys stay unknown."""
        with self._lock:
            if key not in self._due:
                return
            if key in self._running:
                self._again.add(key)
            else:
                self._due[key] = min(self._due[key], time.monotonic())

    def forget(self, key: Key) -> None:
        with self._lock:
            self._due.pop(key, None)
            self._retries.pop(key, None)
            self._again.discard(key)

    def done(self, key: Key, retry_after: float | None) -> None:
        """A reconcile of ``key`` finished: next one after ``retry_after`` or the interval."""
        delay = self.interval if retry_after is None else min(retry_after, self.interval)
        with self._lock:
            self._running.discard(key)
            if retry_after is None:
                self._retries.pop(key, None)
            elif key in self._due:
                self._retries[key] = self._retries.get(key, 0) + 1
            if key in self._again:
                self._again.discard(key)
                delay = 0.0
            if key in self._due:
                self._due[key] = time.monotonic() + delay

    def attempt(self, key: Key) -> int:
        """How many reconciles of ``key`` in a row asked to be retried (for backoffs)."""
        with self._lock:
            return self._retries.get(key, 0)

    def take_due(self, now: float | None = None) -> list[Key]:
        """Keys whose turn has come and that no resync is running; marked running."""
        now = time.monotonic() if now is None else now
        with self._lock:
            due = [k for k, t in self._due.items() if t <= now and k not in self._running]
            self._running.update(due)
            return sorted(due)

    def keys(self) -> list[Key]:
        with self._lock:
            return sorted(self._due)
