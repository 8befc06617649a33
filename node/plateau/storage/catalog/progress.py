"""Is the engine making progress? What liveness and readiness probes ask.

A process that answers HTTP is not a node that works: a deadlock between two
engine locks once left every append hanging while ``/healthz`` said 200, so
Kubernetes never restarted the pod. Every unit of engine work (an append, a
read, a topic change, a seal, a background tick) is tracked from start to
end. The engine is *stalled* when work is in progress and none of it has
finished for ``stall_seconds`` (all of it is stuck), or when one piece of work
has been in progress for twice that (one partition or topic is stuck while the
rest goes on): then ``/healthz`` and ``/readyz`` answer 503 and the kubelet
restarts the pod. An idle node is never stalled. Nothing the engine does
takes that long when it works: a page is at most 16 MiB, a seal a segment.

Lock order: ``_lock`` is a leaf (see ``plateau.storage.catalog.locks``).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Stall:
    """Work has been held for ``seconds`` without anything finishing."""

    seconds: float
    oldest: str
    in_flight: int

    def message(self) -> str:
        return (
            f"engine stalled: {self.oldest} has waited {self.seconds:.0f} s "
            f"({self.in_flight} operations in progress)"
        )


class Progress:
    def __init__(self, stall_seconds: float) -> None:
        self.stall_seconds = stall_seconds
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._in_flight: dict[int, tuple[float, str]] = {}  # insertion order = start order
        self._last_done = time.monotonic()

    @contextmanager
    def track(self, what: str) -> Iterator[None]:
        started = time.monotonic()
        key = next(self._ids)
        with self._lock:
            self._in_flight[key] = (started, what)
        try:
            yield
        finally:
            done = time.monotonic()
            with self._lock:
                del self._in_flight[key]
                self._last_done = done

    def stall(self, now: float | None = None) -> Stall | None:
        """The current stall, if work has waited longer than ``stall_seconds``."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if not self._in_flight:
                return None
            started, what = next(iter(self._in_flight.values()))
            count = len(self._in_flight)
            last_done = self._last_done
        if now - max(started, last_done) >= self.stall_seconds:
            return Stall(now - max(started, last_done), what, count)
        if now - started >= 2 * self.stall_seconds:
            return Stall(now - started, what, count)
        return None
