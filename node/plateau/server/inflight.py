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

The event loop's appends wait with ``hold``, the connection threads of
``append_front`` (``server.threaded_appends``) with ``hold_blocking``, in one
line. Lock order: ``_lock`` is a leaf; nothing is called under it but the
waiters' wake-ups, which only schedule (``call_soon_threadsafe``,
``Event.set``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from plateau.protocol.errors import Busy
from plateau.storage.catalog.memory import MemoryBudget

RETRY_AFTER_SECONDS = 1.0


@dataclass(eq=False)
class _Waiter:
    reservation: Reservation
    size: int
    wake: Callable[[], None]
    admitted: bool = False


class BodyBudget:
    def __init__(
        self, limit: int, memory: MemoryBudget | None = None, wait_seconds: float = 0.0
    ) -> None:
        self.limit = limit
        self.wait_seconds = wait_seconds
        self._lock = threading.Lock()
        self._used = 0
        self._memory = memory
        self._waiting: collections.deque[_Waiter] = collections.deque()  # oldest first

    @property
    def used(self) -> int:
        return self._used

    def _set_used(self, value: int) -> None:
        """Called under ``_lock``."""
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
        returned whole on exit. On the event loop."""
        reservation = Reservation(self)
        try:
            if declared > 0:
                await self._admit(reservation, declared)
            yield reservation
        finally:
            self._release(reservation)

    @contextlib.contextmanager
    def hold_blocking(self, declared: int) -> Iterator[Reservation]:
        """``hold`` for a thread of its own (``append_front``'s): the wait blocks it."""
        reservation = Reservation(self)
        try:
            if declared > 0:
                self._admit_blocking(reservation, declared)
            yield reservation
        finally:
            self._release(reservation)

    def _release(self, reservation: Reservation) -> None:
        with self._lock:
            self._set_used(self._used - reservation.bytes)
            reservation.bytes = 0
            self._wake()

    def _enqueue(
        self, reservation: Reservation, size: int, wake: Callable[[], None]
    ) -> _Waiter | None:
        """Admit at once (None) if nobody waits and it fits; else a waiter in line, or
        ``Busy`` when waiting is off."""
        with self._lock:
            if not self._waiting and self.fits(size):
                reservation.take(size)
                return None
            if self.wait_seconds <= 0:
                raise reservation.refusal(size, self._used)
            waiter = _Waiter(reservation, size, wake)
            self._waiting.append(waiter)
            self._report_waiting()
            return waiter

    def _give_up(self, waiter: _Waiter) -> bool:
        """Leave the line unless admitted meanwhile; True if it left."""
        with self._lock:
            if waiter.admitted:
                return False
            self._waiting.remove(waiter)
            self._wake()  # the next in line may fit now that this one is gone
            return True

    async def _admit(self, reservation: Reservation, size: int) -> None:
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()

        def resolve() -> None:
            if not woken.done():
                woken.set_result(None)

        def wake() -> None:
            loop.call_soon_threadsafe(resolve)

        waiter = self._enqueue(reservation, size, wake)
        if waiter is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(woken), self.wait_seconds)
        except TimeoutError:
            if self._give_up(waiter):  # (not left: admitted just as the wait ended; keep it)
                raise reservation.refusal(size, self._used) from None
        except asyncio.CancelledError:  # the client went away while it waited
            self._give_up(waiter)
            raise

    def _admit_blocking(self, reservation: Reservation, size: int) -> None:
        woken = threading.Event()
        waiter = self._enqueue(reservation, size, woken.set)
        if waiter is None:
            return
        if not woken.wait(self.wait_seconds) and self._give_up(waiter):
            raise reservation.refusal(size, self._used)

    def _wake(self) -> None:
        """Admit waiters from the head of the line while they fit. Under ``_lock``."""
        while self._waiting:
            waiter = self._waiting[0]
            if not self.fits(waiter.size):
                break
            self._waiting.popleft()
            waiter.reservation.take(waiter.size)
            waiter.admitted = True
            waiter.wake()
        self._report_waiting()

    def _report_waiting(self) -> None:
        if self._memory is not None:
            self._memory.bodies_waiting = len(self._waiting)


class Reservation:
    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.bytes = 0

    def take(self, size: int) -> None:
        """Hold ``size`` bytes in all. Under the budget's lock."""
        self._budget._set_used(self._budget.used + size - self.bytes)
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
        budget = self._budget
        with budget._lock:
            extra = size - self.bytes
            if extra <= 0:
                return
            others = budget.used - self.bytes
            if others > 0 and budget.used + extra > budget.limit:
                raise self.refusal(size, others)
            self.take(size)
