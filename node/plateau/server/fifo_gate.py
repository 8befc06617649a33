"""At most N holders at once, the rest served in arrival order: the connection threads' bound.

Used by ``append_front`` for appends (``server.append_concurrency``) and for
partition reads (as many at once as the event loop's thread pool allows).

Why: with ``server.threaded_appends`` every connection has its own thread, and
with 48 writers (tests/integration/test_memory_limit.py's shape) 48 threads
were inside decode and ``Engine.append`` together, each taking the GIL back
after every write, fsync and lock. Which thread gets the GIL next is up to the
OS, so some appends waited far longer than others: the write stage averaged
99 ms and the node-side time of an append had a p50 of 17 ms but a p99 of 546
ms, and the clients' p99 was 713 ms against 287 ms through the event loop
(which receives bodies one at a time, so few appends are ever in the engine
together). Four appends at once keep the disk as busy as four writers do
(the 4-writer benchmark's rate), and the others wait here, in arrival order,
on a lock of their own, off the GIL's contention.

Only the work after the body has arrived is gated: a client that sends its
body slowly holds no slot, so slow clients cannot lock out fast ones. A slot
is handed straight to the longest waiter when it is freed, so a newcomer
never overtakes the line.

A waiter may give up (``acquire(timeout)``: appends, with
``server.append_queue_timeout_ms``): it leaves the line holding nothing, and
the line closes up behind it. A slot handed to it in the instant between its
timeout and its taking ``_lock`` to leave is kept (the hand-off released its
turn; taking that turn cannot block), so a slot is never lost to a waiter
that stopped waiting.

Reads are bounded for memory, not fairness: each builds a page of up to
``server.max_page_bytes`` outside the memory budget, and through the event
loop at most anyio's 40 threads did so at once; the same bound holds here.

Lock order: ``_lock`` is a leaf; under it a waiter's own lock is only
released, which never blocks.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Gauge


class FifoGate:
    def __init__(self, slots: int, waiting: Gauge | None = None) -> None:
        if slots < 1:
            raise ValueError(f"a gate needs at least one slot, not {slots}")
        self._waiting = waiting
        self._lock = threading.Lock()
        self._free = slots
        self._line: collections.deque[threading.Lock] = collections.deque()

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one slot for the block, waiting in arrival order for it. (A wait with a
        timeout is ``acquire(timeout)``/``release()``: its caller decides what giving up
        means, and an exception from the block is never mistaken for the timeout.)"""
        self.acquire()
        try:
            yield
        finally:
            self.release()

    def acquire(self, timeout: float | None = None) -> bool:
        with self._lock:
            if self._free > 0 and not self._line:
                self._free -= 1
                return True
            turn = threading.Lock()
            turn.acquire()
            self._line.append(turn)
            self._publish()
        # released by the holder that hands this waiter its slot
        if turn.acquire(timeout=-1 if timeout is None else timeout):
            return True
        with self._lock:
            if turn in self._line:
                self._line.remove(turn)
                self._publish()
                return False
        # handed the slot between the timeout and the lock: it is ours after all
        turn.acquire()
        return True

    def release(self) -> None:
        with self._lock:
            if self._line:
                self._line.popleft().release()  # the slot goes on to the longest waiter
                self._publish()
            else:
                self._free += 1

    def _publish(self) -> None:
        if self._waiting is not None:
            self._waiting.set(len(self._line))

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._line)
