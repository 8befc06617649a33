"""When the engine counts as stalled (what /healthz reports), on a clock the test sets."""

from __future__ import annotations

import threading
import time

from plateau.storage.catalog.progress import Progress


def test_idle_is_never_stalled_and_all_stuck_is_after_stall_seconds() -> None:
    p = Progress(stall_seconds=10)
    now = time.monotonic()
    assert p.stall(now + 1000) is None
    entered = threading.Event()
    leave = threading.Event()

    def stuck() -> None:
        with p.track("append t/0"):
            entered.set()
            leave.wait(10)

    t = threading.Thread(target=stuck)
    t.start()
    entered.wait(5)
    try:
        start = time.monotonic()
        assert p.stall(start + 5) is None
        stall = p.stall(start + 11)
        assert stall is not None and stall.oldest == "append t/0" and stall.in_flight == 1
        assert "append t/0" in stall.message()
    finally:
        leave.set()
        t.join()
    assert p.stall(time.monotonic() + 1000) is None


def test_one_stuck_operation_is_a_stall_even_while_others_finish() -> None:
    p = Progress(stall_seconds=0.2)
    leave = threading.Event()
    entered = threading.Event()

    def stuck() -> None:
        with p.track("append t/3"):
            entered.set()
            leave.wait(10)

    t = threading.Thread(target=stuck)
    t.start()
    entered.wait(5)
    began = time.monotonic()
    seen = []
    try:
        while time.monotonic() - began < 0.6:
            with p.track("append t/0"):
                pass  # the rest of the engine goes on
            seen.append((time.monotonic() - began, p.stall()))
            time.sleep(0.01)
    finally:
        leave.set()
        t.join()
    assert all(stall is None for age, stall in seen if age < 0.35)
    late = [stall for age, stall in seen if age > 0.45]
    assert late and all(s is not None and s.oldest == "append t/3" for s in late)
