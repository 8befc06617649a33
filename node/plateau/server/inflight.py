"""A byte budget for append bodies held in memory at once: many clients get 429, not an OOM kill.

Why: a body is read whole before it is decoded (an append is stored whole or
not at all), so without a limit N concurrent clients hold N bodies of up to
``server.max_request_bytes`` each, and a burst of writers can push the node
past its memory limit, where Kubernetes kills it and every writer waits for
recovery.

An append whose declared body does not fit waits for room, in arrival order,
for up to ``server.inflight_wait_seconds``; only then is it refused with 429
and ``Retry-After``, nothing of it read or stored. Why wait at all: with 48
writers of 2.8 MB bodies on a 128 MiB budget the 48th body found the budget
full a few milliseconds before the first one was done, so it was refused, and
its writer's back-off cost more than the wait would have (4.7% of appends
refused, 0.795x the rate without the limit). While it waits nothing of the
body is read: the socket's buffer fills and TCP holds the client back, so a
waiter costs no memory. Why in arrival order: a large body would otherwise
wait forever behind a stream of smaller ones that each fit. A chunked body
(no declared length) is admitted as it grows and refused as soon as it
outgrows the budget, as before: it cannot wait halfway through.

A lone body is always admitted (when nothing else is in flight), so a budget
below ``max_request_bytes`` slows big writers down instead of locking them out.

The limit is the bodies' part of the node's memory budget
(``plateau.storage.catalog.memory``): ``min(server.max_inflight_bytes, budget / 4)``;
what is held and how many wait is reported there for ``/metrics`` and ``GET /admin/node``.

Used only on the event loop's thread, so it needs no lock.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from plateau.protocol.errors import Busy
from plateau.storage.catalog.memory import MemoryBudget

RETRY_AFTER_SECONDS = 1.0


class BodyBudget:
    def __init__(
        self, limit: int, memory: MemoryBudget | None = None, wait_seconds: float = 0.0
    ) -> None:
        self.limit = limit
        self.wait_seconds = wait_seconds
        self._used = 0
        self._memory = memory
        # appends waiting for room, oldest first: (reservation, bytes it waits for, wake-up)
        self._waiting: collections.deque[tuple[Reservation, int, asyncio.Future[None]]] = (
            collections.deque()
        )

    @property
    def used(self) -> int:
        return self._used

    @used.setter
    def used(self, value: int) -> None:
        self._used = value
        if self._memory is not None:
            self._memory.bodies = value

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def fits(self, size: int) -> bool:
        return self._used == 0 or self._used + size <= self.limit

    @asynccontextmanager
    async def hold(self, declared: int = 0) -> AsyncIterator[Reservation]:
        """A reservation of ``declared`` bytes (waited for), growing with the body and
        returned whole on exit."""
        reservation = Reservation(self)
        try:
            if declared > 0:
                await self._admit(reservation, declared)
            yield reservation
        finally:
            self.used -= reservation.bytes
            reservation.bytes = 0
            self._wake()

    async def _admit(self, reservation: Reservation, size: int) -> None:
        if not self._waiting and self.fits(size):
            reservation.take(size)
            return
        if self.wait_seconds <= 0:
            raise reservation.refusal(size, self._used)
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (reservation, size, woken)
        self._waiting.append(entry)
        self._report_waiting()
        try:
            await asyncio.wait_for(asyncio.shield(woken), self.wait_seconds)
        except TimeoutError:
            if not woken.done():  # (done: admitted just as the wait ended; keep it)
                self._leave(entry)
                raise reservation.refusal(size, self._used) from None
        except asyncio.CancelledError:  # the client went away while it waited
            if not woken.done():
                self._leave(entry)
            raise

    def _leave(self, entry: tuple[Reservation, int, asyncio.Future[None]]) -> None:
        self._waiting.remove(entry)
        self._wake()  # the next in line may fit now that this one is gone

    def _wake(self) -> None:
        """Admit waiters from the head of the line while they fit."""
        while self._waiting:
            reservation, size, woken = self._waiting[0]
            if not self.fits(size):
                break
            self._waiting.popleft()
            reservation.take(size)
            woken.set_result(None)
        self._report_waiting()

    def _report_waiting(self) -> None:
        if self._memory is not None:
            self._memory.bodies_waiting = len(self._waiting)


class Reservation:
    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.bytes = 0

    def take(self, size: int) -> None:
        self._budget.used += size - self.bytes
        self.bytes = size

    def refusal(self, size: int, others: int) -> Busy:
        budget = self._budget
        return Busy(
            f"node busy: {others} bytes of other append bodies are in memory and this one "
            f"({size} bytes) would pass their share of memory ({budget.limit}: "
            "server.max_inflight_bytes, at most a quarter of storage.memory_budget_bytes)"
            + (f" for {budget.wait_seconds:g} s" if budget.wait_seconds > 0 else "")
            + "; retry after Retry-After seconds",
            retry_after=RETRY_AFTER_SECONDS,
        )

    def grow_to(self, size: int) -> None:
        """Hold ``size`` bytes in all; raises ``Busy`` (429) if others hold too much."""
        extra = size - self.bytes
        if extra <= 0:
            return
        budget = self._budget
        others = budget.used - self.bytes
        if others > 0 and budget.used + extra > budget.limit:
            raise self.refusal(size, others)
        self.take(size)
