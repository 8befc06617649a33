"""The append slots' bound: refused at the head when the line is already too long, refused
in line past the bound, never refused while the line is empty or with the bound off."""

from __future__ import annotations

import threading
import time

import pytest

from plateau.protocol.errors import Busy
from plateau.server.append_slots import AppendSlots
from plateau.server.config import ServerSettings
from testkit.waiting import wait_until


def slots(bound_ms: float, concurrency: int = 1) -> AppendSlots:
    return AppendSlots(
        ServerSettings(append_concurrency=concurrency, append_queue_timeout_ms=bound_ms)
    )


def hold_for(s: AppendSlots, seconds: float) -> None:
    with s.slot():
        time.sleep(seconds)


def test_a_long_line_is_refused_at_the_head_with_the_setting_named() -> None:
    s = slots(bound_ms=400)
    for _ in range(3):
        hold_for(s, 0.2)  # the mean hold is learnt from appends that held a slot
    hold = 0.2 * (1 - 0.9**3)  # 54 ms
    release = threading.Event()
    waiters: list[threading.Thread] = []

    def join_line() -> None:
        t = threading.Thread(target=_wait_in_line, args=(s, release))
        t.start()
        waiters.append(t)

    with s.slot():
        s.refuse_early()  # nobody in line: a newcomer is always let through to its body
        join_line()
        wait_until(lambda: s.expected_wait() == pytest.approx(2 * hold, rel=0.1), "one in line")
        s.refuse_early()  # 108 ms expected: within the bound
        for _ in range(7):
            join_line()
        wait_until(lambda: s.expected_wait() == pytest.approx(9 * hold, rel=0.1), "eight in line")
        with pytest.raises(Busy) as refused:
            s.refuse_early()  # 488 ms expected: past it
        release.set()
    for t in waiters:
        t.join(10)
    assert not any(t.is_alive() for t in waiters), "a waiter stalled"
    message = refused.value.message
    assert "server.append_queue_timeout_ms (400 ms)" in message
    assert "8 appends are already waiting" in message and "was not read" in message
    assert refused.value.retry_after == 1.0
    s.refuse_early()  # the line has emptied: let through again


def _wait_in_line(s: AppendSlots, release: threading.Event) -> None:
    try:
        with s.slot():
            release.wait(10)
    except Busy:
        pass  # waited past the bound in line: the other refusal, tested below


def test_an_append_that_waits_past_the_bound_in_line_is_refused() -> None:
    s = slots(bound_ms=20)
    with s.slot():
        started = time.monotonic()
        with pytest.raises(Busy) as refused, s.slot():
            raise AssertionError("took a slot that was held")
        waited = time.monotonic() - started
    assert 0.015 <= waited < 5
    assert "waited 20 ms" in refused.value.message and "was not stored" in refused.value.message
    with s.slot():  # nothing was lost to the refused waiter: the slot is free again
        pass


def test_without_a_bound_nothing_is_refused() -> None:
    s = slots(bound_ms=0)
    done: list[int] = []

    def append(i: int) -> None:
        s.refuse_early()
        with s.slot():
            time.sleep(0.005)
            done.append(i)

    threads = [threading.Thread(target=append, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "an append stalled"
    assert sorted(done) == list(range(16))
