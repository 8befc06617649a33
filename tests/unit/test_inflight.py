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
