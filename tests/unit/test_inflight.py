"""The in-flight body budget's accounting: what is held is returned, whatever happens."""

from __future__ import annotations

import asyncio

import pytest

from plateau.protocol.errors import Busy
from plateau.server.inflight import BodyBudget


def test_budget_refuses_a_second_body_that_does_not_fit_and_returns_everything() -> None:
    async def scenario() -> None:
        budget = BodyBudget(100)
        async with budget.hold() as first:
            first.grow_to(60)
            first.grow_to(40)  # never shrinks while held
            assert budget.used == 60
            with pytest.raises(Busy) as refused:
                async with budget.hold() as second:
                    second.grow_to(30)
                    second.grow_to(41)  # a chunked body outgrows what is left
            assert refused.value.status == 429 and refused.value.retry_after >= 1
            assert budget.used == 60
        assert budget.used == 0

    asyncio.run(scenario())


def test_a_lone_body_may_exceed_the_budget() -> None:
    async def scenario() -> None:
        budget = BodyBudget(10)
        async with budget.hold() as only:
            only.grow_to(1000)
            assert budget.used == 1000
        assert budget.used == 0

    asyncio.run(scenario())


async def append(
    budget: BodyBudget, size: int, admitted: list[int], until: asyncio.Event | None = None
) -> None:
    """An append of a ``size``-byte body: noted in ``admitted`` once in, held ``until`` set."""
    async with budget.hold(size):
        admitted.append(size)
        if until is not None:
            await until.wait()


def test_a_body_that_does_not_fit_waits_its_turn_and_is_admitted_when_room_frees() -> None:
    async def scenario() -> None:
        budget = BodyBudget(100, wait_seconds=30)
        admitted: list[int] = []
        first_out = asyncio.Event()
        first = asyncio.create_task(append(budget, 80, admitted, first_out))
        await asyncio.sleep(0)
        big = asyncio.create_task(append(budget, 60, admitted))
        await asyncio.sleep(0)
        # 10 bytes would fit beside the first body, but the big one came earlier: it waits
        small = asyncio.create_task(append(budget, 10, admitted))
        await asyncio.sleep(0.01)
        assert admitted == [80] and budget.waiting == 2 and budget.used == 80
        first_out.set()
        await asyncio.gather(first, big, small)
        assert admitted == [80, 60, 10]
        assert budget.used == 0 and budget.waiting == 0

    asyncio.run(scenario())


def test_a_waiting_body_is_refused_after_the_wait_and_leaves_the_line() -> None:
    async def scenario() -> None:
        budget = BodyBudget(100, wait_seconds=0.05)
        async with budget.hold(90):
            with pytest.raises(Busy) as refused:
                async with budget.hold(50):
                    raise AssertionError("admitted past the budget")
            assert "0.05 s" in str(refused.value) and refused.value.retry_after >= 1
            assert budget.waiting == 0 and budget.used == 90
            # the line is empty again: a body that fits goes straight in
            async with budget.hold(10):
                assert budget.used == 100
        assert budget.used == 0

    asyncio.run(scenario())


def test_a_cancelled_waiter_leaves_the_line_and_lets_the_next_one_in() -> None:
    async def scenario() -> None:
        budget = BodyBudget(100, wait_seconds=30)
        release = asyncio.Event()
        got: list[int] = []
        holder = asyncio.create_task(append(budget, 60, got, release))
        await asyncio.sleep(0)
        gone = asyncio.create_task(append(budget, 90, got))  # waits for the 60 to go
        await asyncio.sleep(0)
        after = asyncio.create_task(
            append(budget, 30, got)
        )  # fits beside 60, but queued behind the 90
        await asyncio.sleep(0.01)
        assert budget.waiting == 2
        gone.cancel()  # its client went away
        await asyncio.sleep(0.01)
        assert got == [60, 30] and budget.waiting == 0
        release.set()
        await asyncio.gather(holder, after)
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert budget.used == 0

    asyncio.run(scenario())


def test_without_a_wait_a_body_that_does_not_fit_is_refused_at_once() -> None:
    async def scenario() -> None:
        budget = BodyBudget(100, wait_seconds=0)
        async with budget.hold(90):
            with pytest.raises(Busy):
                async with budget.hold(50):
                    pass
        assert budget.used == 0

    asyncio.run(scenario())


# --- the append front's threads (hold_blocking) share the budget and the line ----------


def test_a_thread_waits_in_the_same_line_as_the_event_loop() -> None:
    """An event-loop append that came first is admitted first; the thread's body then."""
    import threading

    async def scenario() -> None:
        budget = BodyBudget(100, wait_seconds=30)
        admitted: list[str] = []
        first_out = asyncio.Event()
        first = asyncio.create_task(append(budget, 80, [], first_out))
        await asyncio.sleep(0)
        loop_waiter = asyncio.create_task(append(budget, 60, []))
        await asyncio.sleep(0)

        def thread_append() -> None:
            with budget.hold_blocking(30):
                admitted.append("thread")

        thread = threading.Thread(target=thread_append)
        thread.start()
        while budget.waiting < 2:
            await asyncio.sleep(0.001)
        assert budget.used == 80 and admitted == []
        first_out.set()
        await loop_waiter
        admitted.append("loop")  # (the loop's 60 may still be held while the thread goes in)
        await asyncio.to_thread(thread.join, 10)
        assert not thread.is_alive()
        await first
        assert sorted(admitted) == ["loop", "thread"]
        assert budget.used == 0 and budget.waiting == 0

    asyncio.run(scenario())


def test_a_thread_is_refused_after_the_wait_and_leaves_the_line() -> None:
    budget = BodyBudget(100, wait_seconds=0.05)
    with budget.hold_blocking(90):
        with pytest.raises(Busy) as refused, budget.hold_blocking(50):
            raise AssertionError("admitted past the budget")
        assert refused.value.status == 429
        assert budget.waiting == 0 and budget.used == 90
    assert budget.used == 0


def test_a_thread_is_refused_at_once_without_a_wait() -> None:
    budget = BodyBudget(100)
    with budget.hold_blocking(90), pytest.raises(Busy), budget.hold_blocking(50):
        raise AssertionError("admitted past the budget")
    assert budget.used == 0


def test_stress_threads_and_the_loop_never_pass_the_budget_nor_stall() -> None:
    """8 threads and 8 event-loop tasks hold random bodies 300 times each: what is held
    never passes the limit (but for a lone body), all of it comes back, nobody stalls."""
    import random
    import threading

    budget = BodyBudget(1000, wait_seconds=5)
    over: list[int] = []
    refused: list[int] = []

    def check() -> None:
        if budget.used > budget.limit:
            over.append(budget.used)

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(300):
            try:
                with budget.hold_blocking(rng.randint(1, 600)):
                    check()
            except Busy:
                refused.append(seed)

    async def task(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(300):
            try:
                async with budget.hold(rng.randint(1, 600)):
                    check()
                    await asyncio.sleep(0)
            except Busy:
                refused.append(seed)

    async def scenario() -> None:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        await asyncio.wait_for(asyncio.gather(*(task(100 + i) for i in range(8))), 60)
        for t in threads:
            await asyncio.to_thread(t.join, 60)
        assert not any(t.is_alive() for t in threads), "a thread stalled"

    asyncio.run(scenario())
    assert over == []
    assert refused == []  # 5 s of waiting is plenty: nobody is turned away
    assert budget.used == 0 and budget.waiting == 0
