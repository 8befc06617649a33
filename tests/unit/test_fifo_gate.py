"""The connection threads' gate: at most N holders at once, the rest in arrival order, no stall."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable

import pytest

from plateau.server.fifo_gate import FifoGate
from testkit.waiting import wait_until


def run_all(worker: Callable[[int], None], n: int) -> None:
    """``worker(0..n-1)`` on threads at once; fails if one has not finished within 60 s."""
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread stalled in the gate"


def waiting(gate: FifoGate, n: int) -> bool:
    return gate.waiting == n


def test_waiters_get_their_slot_in_arrival_order() -> None:
    gate = FifoGate(1)
    order: list[int] = []
    threads: list[threading.Thread] = []

    def append(i: int) -> None:
        with gate.slot():
            order.append(i)

    with gate.slot():  # the one slot is taken: everyone after this waits in line
        for i in range(6):
            t = threading.Thread(target=append, args=(i,))
            t.start()
            threads.append(t)
            # i is in line before i+1 comes
            wait_until(functools.partial(waiting, gate, i + 1), f"{i + 1} in line", interval=0.001)
    for t in threads:
        t.join(10)
    assert order == list(range(6))


def test_a_newcomer_does_not_overtake_the_line() -> None:
    """A freed slot goes to the longest waiter, even when a new thread asks at that moment."""
    gate = FifoGate(1)
    got: list[str] = []

    def waiter() -> None:
        with gate.slot():
            got.append("waiter")

    with gate.slot():
        t = threading.Thread(target=waiter)
        t.start()
        wait_until(lambda: gate.waiting == 1, "one waiter", interval=0.001)
    with gate.slot():  # asks right after the release: the waiter had the slot first
        got.append("newcomer")
    t.join(10)
    assert got[0] == "waiter"


def test_never_more_than_the_slots_at_once_and_no_stall() -> None:
    """32 threads x 200 passes through 3 slots; fails if more than 3 are ever inside, or if
    any thread is still waiting when the others are long done (a lost wake-up)."""
    gate = FifoGate(3)
    inside = 0
    peak = 0
    lock = threading.Lock()
    passes = [0] * 32

    def worker(w: int) -> None:
        nonlocal inside, peak
        for _ in range(200):
            with gate.slot():
                with lock:
                    inside += 1
                    peak = max(peak, inside)
                time.sleep(0)  # let others run while this one holds its slot
                with lock:
                    inside -= 1
            passes[w] += 1

    run_all(worker, 32)
    assert passes == [200] * 32
    assert peak <= 3
    assert gate.waiting == 0


def test_a_slot_is_freed_when_the_append_fails() -> None:
    gate = FifoGate(1)
    with pytest.raises(RuntimeError), gate.slot():
        raise RuntimeError("the disk failed")
    done = threading.Event()

    def after() -> None:
        with gate.slot():
            done.set()

    threading.Thread(target=after).start()
    assert done.wait(10)


def test_a_gate_has_at_least_one_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        FifoGate(0)


def test_a_waiter_past_its_timeout_leaves_the_line_holding_nothing() -> None:
    gate = FifoGate(1)
    with gate.slot():
        started = time.monotonic()
        assert gate.acquire(0.05) is False
        assert time.monotonic() - started >= 0.05
        assert gate.waiting == 0
        assert gate.acquire(0.01) is False
        assert gate.waiting == 0
    # nothing was taken by the waiters that gave up: the one slot is free again
    assert gate.acquire(0) is True
    gate.release()


def test_a_waiter_behind_one_that_gave_up_is_served_next() -> None:
    """The line closes up: the slot freed goes to the next waiter, not to the one gone."""
    gate = FifoGate(1)
    got = threading.Event()

    def patient() -> None:
        with gate.slot():
            got.set()

    with gate.slot():
        impatient = threading.Thread(target=gate.acquire, args=(0.05,))
        impatient.start()
        wait_until(lambda: gate.waiting == 1, "the impatient one in line", interval=0.001)
        t = threading.Thread(target=patient)
        t.start()
        wait_until(lambda: gate.waiting == 2, "both in line", interval=0.001)
        impatient.join(10)
        assert gate.waiting == 1
    assert got.wait(10)
    t.join(10)


def test_timeouts_racing_releases_lose_no_slot_and_never_overfill() -> None:
    """32 threads x 300 tries with timeouts about as long as a holder holds: a slot
    handed to a waiter at the moment it gives up must be kept (or the gate shrinks), and
    never more than 2 may be inside. Fails on a lost slot (the last acquire stalls), an
    extra one (peak > 2) or a thread that never returns."""
    gate = FifoGate(2)
    inside = 0
    peak = 0
    lock = threading.Lock()
    served = [0] * 32
    refused = [0] * 32

    def worker(w: int) -> None:
        nonlocal inside, peak
        for i in range(300):
            if not gate.acquire(0.0002 * (1 + (w + i) % 5)):
                refused[w] += 1
                continue
            try:
                with lock:
                    inside += 1
                    peak = max(peak, inside)
                time.sleep(0)
                with lock:
                    inside -= 1
            finally:
                gate.release()
            served[w] += 1

    run_all(worker, 32)
    assert [s + r for s, r in zip(served, refused, strict=True)] == [300] * 32
    assert sum(refused) > 0, "no timeout happened: the race was not exercised"
    assert peak <= 2
    assert gate.waiting == 0
    # both slots are still there
    assert gate.acquire(0) and gate.acquire(0)
    assert not gate.acquire(0.001)
