"""The lock-order check: an inversion fails where it is written, not only when it deadlocks."""

from __future__ import annotations

import threading
import time

import pytest

from plateau.protocol.topic_config import TopicConfigRequest
from plateau.storage.catalog.locks import CheckedLock, LockOrderError, Rank, ranked
from tests.conftest import EngineFactory


def test_taking_a_lower_rank_while_holding_a_higher_one_raises() -> None:
    admin = CheckedLock(Rank.ADMIN, "admin")
    partition = CheckedLock(Rank.PARTITION, "partition")
    topics = CheckedLock(Rank.TOPICS, "topics")
    with admin, partition, topics:  # in order: fine
        pass
    with partition, pytest.raises(LockOrderError, match=r"taking admin .* holding partition"):
        admin.acquire()
    assert not admin.locked()
    with topics, pytest.raises(LockOrderError):  # a leaf: nothing may be taken under it
        partition.acquire()
    other = CheckedLock(Rank.PARTITION, "another partition")
    with partition, pytest.raises(LockOrderError):  # two of one rank: no order between them
        other.acquire()


def test_held_locks_are_per_thread_and_conditions_work() -> None:
    lock = CheckedLock(Rank.PARTITION, "partition")
    cond = threading.Condition(lock)  # type: ignore[arg-type]
    woke: list[bool] = []

    def waiter() -> None:
        with cond:
            woke.append(cond.wait(timeout=5))
            CheckedLock(Rank.MANIFEST, "manifest").acquire()  # still in order after the wait

    t = threading.Thread(target=waiter)
    t.start()
    admin = CheckedLock(Rank.ADMIN, "admin")
    with admin:  # this thread holds nothing the waiter holds
        for _ in range(500):
            with cond:
                cond.notify()
            if woke:
                break
            time.sleep(0.01)
    t.join(timeout=5)
    assert woke == [True]


def test_the_suite_runs_engines_with_checked_locks(make_engine: EngineFactory) -> None:
    assert isinstance(ranked(Rank.ADMIN, "x"), CheckedLock)
    e = make_engine()
    e.put_topic("t", TopicConfigRequest())
    assert isinstance(e._topic("t").partitions["0"].lock, CheckedLock)
