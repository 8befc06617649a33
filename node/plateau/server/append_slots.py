"""The engine's append slots, and the 429 of a node that cannot serve an append in time.

Why a bound at all: with more closed-loop writers than the disk serves, every
acknowledgement waits in line for one of ``server.append_concurrency`` slots.
Little's law sets that wait: 48 writers of 2.8 MB bodies on a disk that takes
220 MB/s wait 0.6 s each, whatever the server does, and refusing nobody only
makes every writer wait that long. ``server.append_queue_timeout_ms`` (0: off,
the default) bounds it, in two places:

- **At the head, before the body is read** (``refuse_early``): when the line is
  already long enough that a newcomer would wait past the bound (the appends in
  line, times the slots' recent mean hold, over the slots), it gets 429 at once;
  its body is read and dropped to keep the connection (``append_front._skip_body``),
  but never decoded nor held in the body budget, and its writer learns in
  microseconds instead of after the bound. Refused only after the bound, each
  such body was first received whole and held for the bound: on the 48-writer
  bench that cost 9-13% of the rate.
- **After the body, in line** (``slot``): an append that still waits longer than
  the bound for its slot (the estimate was low, a burst arrived) gets the same
  429; nothing of it is stored. This is the bound's guarantee: no acknowledged
  append waited in line longer than it.

Both refusals carry ``Retry-After`` and a message naming the setting.

The mean hold (``_hold_s``) is an exponentially weighted mean, updated without a
lock by each holder as it leaves: two holders leaving at once may lose one
sample, which only ages the estimate by one append. Lock order: this module
takes no lock of its own; ``FifoGate._lock`` is a leaf.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Gauge

from plateau.protocol.errors import Busy
from plateau.server.config import ServerSettings
from plateau.server.fifo_gate import FifoGate

RETRY_AFTER_SECONDS = 1.0
"""Retry-After of a saturated node's 429 (the header counts whole seconds)."""

HOLD_WEIGHT = 0.1
"""Weight of the newest hold in the mean: about the last ten appends count."""


class AppendSlots:
    def __init__(self, server: ServerSettings, waiting: Gauge | None = None) -> None:
        self._slots = server.append_concurrency
        self._bound_s = server.append_queue_timeout_ms / 1000
        self._gate = FifoGate(self._slots, waiting)
        self._hold_s = 0.0

    @property
    def bounded(self) -> bool:
        return self._bound_s > 0

    def expected_wait(self) -> float:
        """Seconds a newcomer would wait in line: the appends ahead of it, plus itself,
        each taking one slot for the recent mean hold, served ``slots`` at a time."""
        return (self._gate.waiting + 1) * self._hold_s / self._slots

    def refuse_early(self) -> None:
        """429 before the body is read, when the line would keep this append past the bound."""
        if not self.bounded or self._gate.waiting == 0:
            return
        expected = self.expected_wait()
        if expected > self._bound_s:
            raise self._busy(
                f"{self._gate.waiting} appends are already waiting for them, about "
                f"{expected * 1000:.0f} ms",
                "was not read",
            )

    @contextmanager
    def slot(self) -> Iterator[None]:
        """One slot for the block, or 429 once the append waited past the bound."""
        if not self._gate.acquire(self._bound_s if self.bounded else None):
            raise self._busy(f"this append waited {self._bound_s * 1000:g} ms", "was not stored")
        taken = time.perf_counter()
        try:
            yield
        finally:
            self._gate.release()
            self._hold_s += HOLD_WEIGHT * (time.perf_counter() - taken - self._hold_s)

    def _busy(self, why: str, outcome: str) -> Busy:
        return Busy(
            f"the node is saturated: {why} for one of its {self._slots} append slots, past "
            f"server.append_queue_timeout_ms ({self._bound_s * 1000:g} ms); this append "
            f"{outcome}; retry after Retry-After seconds",
            retry_after=RETRY_AFTER_SECONDS,
        )
