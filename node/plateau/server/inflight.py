"""A byte budget for append bodies held in memory at once: many clients get 429, not an OOM kill.

Why: a body is read whole before it is decoded (an append is stored whole or
not at all), so without a limit N concurrent clients hold N bodies of up to
``server.max_request_bytes`` each, and a burst of writers can push the node
past its memory limit, where Kubernetes kills it and every writer waits for
recovery. With the budget, a body that does not fit is refused at once with
429 and ``Retry-After``, before it is read (its declared Content-Length) or as
soon as a chunked body outgrows it, the same load shedding as a busy
partition: nothing of it is stored, the client retries.

A lone body is always admitted (when nothing else is in flight), so a budget
below ``max_request_bytes`` slows big writers down instead of locking them out.

The limit is the bodies' part of the node's memory budget
(``plateau.storage.catalog.memory``): ``min(server.max_inflight_bytes, budget / 4)``;
what is held is reported there for ``/metrics`` and ``GET /admin/node``.

Used only on the event loop's thread, so it needs no lock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from plateau.protocol.errors import Busy
from plateau.storage.catalog.memory import MemoryBudget

RETRY_AFTER_SECONDS = 1.0


class BodyBudget:
    def __init__(self, limit: int, memory: MemoryBudget | None = None) -> None:
        self.limit = limit
        self._used = 0
        self._memory = memory

    @property
    def used(self) -> int:
        return self._used

    @used.setter
    def used(self, value: int) -> None:
        self._used = value
        if self._memory is not None:
            self._memory.bodies = value

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[Reservation]:
        """A reservation that grows with the body and is returned whole on exit."""
        reservation = Reservation(self)
        try:
            yield reservation
        finally:
            self.used -= reservation.bytes
            reservation.bytes = 0


class Reservation:
    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.bytes = 0

    def grow_to(self, size: int) -> None:
        """Hold ``size`` bytes in all; raises ``Busy`` (429) if others hold too much."""
        extra = size - self.bytes
        if extra <= 0:
            return
        budget = self._budget
        others = budget.used - self.bytes
        if others > 0 and budget.used + extra > budget.limit:
            raise Busy(
                f"node busy: {others} bytes of other append bodies are in memory and this one "
                f"({size} bytes) would pass their share of memory ({budget.limit}: "
                "server.max_inflight_bytes, at most a quarter of storage.memory_budget_bytes); "
                "retry after Retry-After seconds",
                retry_after=RETRY_AFTER_SECONDS,
            )
        budget.used += extra
        self.bytes = size
