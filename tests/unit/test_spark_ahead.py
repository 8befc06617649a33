"""read_ahead: the url-mode page fetch on its own thread (no JVM; plain generators).

Stress tests: every one fails on a stall (a deadline, never a timing figure).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plateau.spark.url_prefetch import read_ahead
from testkit.waiting import wait_until

DEADLINE_S = 20.0


class Boom(RuntimeError):
    pass


def numbers(n: int, fail_at: int | None, closed: list[bool]) -> Generator[int, None, None]:
    try:
        for i in range(n):
            if i == fail_at:
                raise Boom(f"at {i}")
            yield i
    finally:
        closed.append(True)


def ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "plateau-read-ahead"]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 50), st.one_of(st.none(), st.integers(0, 60)), st.integers(1, 3))
def test_items_in_order_and_the_error_where_it_was_raised(
    n: int, fail_at: int | None, depth: int
) -> None:
    closed: list[bool] = []
    got: list[int] = []
    fails = fail_at is not None and fail_at < n
    if fails:
        with pytest.raises(Boom, match=f"at {fail_at}"):
            got.extend(read_ahead(numbers(n, fail_at, closed), depth))
        assert got == list(range(fail_at or 0))
    else:
        got.extend(read_ahead(numbers(n, fail_at, closed), depth))
        assert got == list(range(n))
    wait_until(lambda: closed == [True], "the producer closed")


def test_a_consumer_that_stops_early_stops_the_thread() -> None:
    closings: list[bool] = []
    for k in range(200):
        pages = read_ahead(numbers(10**9, None, closings))
        for _ in range(k % 5 + 1):
            next(pages)
        pages.close()  # what Spark does to a task's iterator under a limit
    wait_until(lambda: len(closings) == 200, "every producer closed once its consumer stopped")
    wait_until(lambda: not ahead_threads(), "no read-ahead thread outliving its consumer")


def test_closing_does_not_wait_for_a_slow_fetch() -> None:
    started = threading.Event()
    release = threading.Event()
    closed: list[bool] = []

    def slow() -> Generator[int, None, None]:
        try:
            yield 0
            started.set()
            release.wait(DEADLINE_S)  # a page the node takes long to send
            yield 1
        finally:
            closed.append(True)

    pages = read_ahead(slow())
    assert next(pages) == 0
    wait_until(started.is_set, "the second fetch to start")
    done = threading.Event()

    def close() -> None:
        pages.close()
        done.set()

    closer = threading.Thread(target=close)
    closer.start()
    wait_until(done.is_set, "close() without waiting for the fetch in flight")
    release.set()
    wait_until(lambda: closed == [True], "the producer closed once its fetch ended")


def test_many_readers_at_once() -> None:
    """Sixteen tasks' readers on one process, consumers slower or faster than producers."""
    results: dict[int, int] = {}
    errors: list[BaseException] = []

    def task(t: int) -> None:
        try:
            total = 0
            for i in read_ahead(numbers(3000, None, [])):
                total += i
                if i % (t + 7) == 0:
                    time.sleep(0)  # hand the GIL over at varying points
            results[t] = total
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=task, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not [t for t in threads if t.is_alive()], "stalled"
    assert not errors
    assert results == dict.fromkeys(range(16), sum(range(3000)))
    wait_until(lambda: not ahead_threads(), "no read-ahead thread left behind")
