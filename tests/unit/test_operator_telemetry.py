"""The operator's liveness is about progress: a reconcile that never ends fails it."""

from __future__ import annotations

import threading
import time

import pytest

from plateau_operator import telemetry


def test_idle_operator_is_alive() -> None:
    assert telemetry.check_progress(stall_seconds=1.0) == 0.0


def test_a_wedged_reconcile_fails_the_probe_and_a_finished_one_clears_it() -> None:
    release = threading.Event()
    entered = threading.Event()

    def wedged() -> None:
        with telemetry.reconciling("PlateauTopic") as result:
            entered.set()
            release.wait(10)
            result[0] = "ok"

    t = threading.Thread(target=wedged)
    t.start()
    assert entered.wait(5)
    time.sleep(0.3)
    with pytest.raises(telemetry.Stalled, match="PlateauTopic reconcile has run"):
        telemetry.check_progress(stall_seconds=0.2)
    assert telemetry.check_progress(stall_seconds=5.0) >= 0.3
    release.set()
    t.join(5)
    assert telemetry.check_progress(stall_seconds=0.2) == 0.0
    ok = telemetry.RECONCILES.labels("PlateauTopic", "ok")._value.get()
    assert ok >= 1


def test_a_raising_reconcile_counts_as_error_and_leaves_nothing_running() -> None:
    before = telemetry.RECONCILES.labels("PlateauNode", "error")._value.get()
    with pytest.raises(ValueError), telemetry.reconciling("PlateauNode"):
        raise ValueError("boom")
    assert telemetry.RECONCILES.labels("PlateauNode", "error")._value.get() == before + 1
    assert telemetry.oldest_running() is None


def test_many_threads_reconciling_at_once_leave_the_map_consistent() -> None:
    """The in-flight map is lock-free (single dict operations under the GIL)."""
    stop = time.monotonic() + 1.0

    def churn() -> None:
        while time.monotonic() < stop:
            with telemetry.reconciling("PlateauTopic") as result:
                telemetry.oldest_running()
                result[0] = "ok"

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for t in threads:
        t.start()
    while time.monotonic() < stop:
        telemetry.check_progress(stall_seconds=3.0)  # never a stall, never an exception
    for t in threads:
        t.join(5)
        assert not t.is_alive()
    assert telemetry.oldest_running() is None
