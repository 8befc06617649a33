"""The operator's own concurrency: one reconcile per object, the resync book, the
rollout gate. Stress tests with real threads; each fails on a stall (bounded joins)."""

from __future__ import annotations

import random
import threading
import time

from plateau_operator.resync import ResyncBook
from plateau_operator.rollout import RolloutGate
from plateau_operator.serial import ObjectLocks

THREADS, ROUNDS = 16, 300


def run_all(target: object, n: int = THREADS, bound: float = 30.0) -> None:
    threads = [threading.Thread(target=target, daemon=True) for _ in range(n)]  # type: ignore[arg-type]
    for t in threads:
        t.start()
    deadline = time.monotonic() + bound
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "stalled"


def test_one_reconcile_per_object_while_other_objects_go_on() -> None:
    locks = ObjectLocks()
    keys = [("PlateauTopic", "ns", f"t{i}") for i in range(4)]
    inside: dict[tuple[str, str, str], int] = {k: 0 for k in keys}
    overlap: list[tuple[str, str, str]] = []
    most = [0]
    guard = threading.Lock()

    def worker() -> None:
        for _ in range(ROUNDS):
            key = random.choice(keys)
            with locks.hold(key):
                with guard:
                    inside[key] += 1
                    if inside[key] > 1:
                        overlap.append(key)
                    most[0] = max(most[0], sum(1 for v in inside.values() if v))
                time.sleep(0.0001)
                with guard:
                    inside[key] -= 1

    run_all(worker)
    assert not overlap
    assert most[0] > 1, "different objects were never reconciled at the same time"
    assert len(locks) == 0, "entries of idle objects are dropped"


def test_a_lock_wait_can_be_bounded() -> None:
    locks = ObjectLocks()
    key = ("PlateauNode", "ns", "n")
    with locks.hold(key):
        got: list[bool] = []
        t = threading.Thread(target=lambda: got.append(locks.hold(key, 0.05).__enter__()))
        t.start()
        t.join(5)
        assert got == [False]


def test_resync_book_hands_each_due_object_to_one_worker() -> None:
    book = ResyncBook(interval=0.001)
    keys = [("PlateauTopic", "ns", f"t{i}") for i in range(20)]
    for k in keys:
        book.see(k)
    running: set[tuple[str, str, str]] = set()
    double: list[tuple[str, str, str]] = []
    done = [0]
    guard = threading.Lock()

    def worker() -> None:
        for _ in range(ROUNDS):
            for k in book.take_due():
                with guard:
                    if k in running:
                        double.append(k)
                    running.add(k)
                with guard:
                    running.discard(k)
                    done[0] += 1
                book.done(k, None)

    run_all(worker, n=8)
    assert not double and done[0] >= len(keys)
    book.forget(keys[0])
    book.done(keys[0], None)  # a reconcile finishing after its object went: not brought back
    assert keys[0] not in set(book.keys())


def test_resync_book_retries_sooner_than_the_interval_never_later() -> None:
    book = ResyncBook(interval=60)
    key = ("PlateauNode", "ns", "n")
    book.see(key)
    assert book.take_due() == [key] and book.take_due() == []  # running: not handed out twice
    book.done(key, 0.0)
    assert book.take_due(time.monotonic() + 0.01) == [key]
    book.done(key, 3600)
    assert book.take_due(time.monotonic() + 61) == [key]
    assert book.attempt(key) == 2, "two retries in a row: the backoff grows"
    book.done(key, None)
    assert book.attempt(key) == 0, "a success resets it"


def test_rollout_gate_lets_one_node_roll_at_a_time() -> None:
    gate = RolloutGate()
    keys = [("PlateauNode", "ns", f"n{i}") for i in range(3)]
    rolling: set[tuple[str, str, str]] = set()
    most = [0]
    guard = threading.Lock()

    def worker() -> None:
        for _ in range(ROUNDS):
            key = random.choice(keys)
            if gate.request(key):
                with guard:
                    rolling.add(key)
                    most[0] = max(most[0], len(rolling))
                    rolling.discard(key)
                gate.done(key)

    run_all(worker, n=8)
    assert most[0] == 1
    gate.observe(keys[0], True)  # seen mid-roll in a status (before an operator restart)
    assert not gate.request(keys[1]) and gate.request(keys[0])
    gate.done(keys[0])
    assert gate.request(keys[1])


def test_a_nudge_makes_a_known_object_due_now_or_right_after_its_running_reconcile() -> None:
    book = ResyncBook(interval=3600)
    key, other = ("PlateauNode", "ns", "n"), ("PlateauNode", "ns", "unknown")
    book.see(key)
    assert book.take_due() == [key]
    book.done(key, None)
    assert book.take_due() == []  # next turn in an hour
    book.nudge(key)
    book.nudge(other)  # not seen by the watch: stays unknown
    assert book.take_due() == [key] and other not in set(book.keys())
    book.nudge(key)  # while it runs: it may have read before the change
    book.done(key, None)
    assert book.take_due() == [key], "due again right after the running reconcile"
    book.done(key, None)
    assert book.take_due() == []


def test_nudges_while_objects_are_reconciled_never_hand_one_out_twice() -> None:
    book = ResyncBook(interval=0.05)
    keys = [("PlateauNode", "ns", f"n{i}") for i in range(6)]
    for k in keys:
        book.see(k)
    running: set[tuple[str, str, str]] = set()
    double: list[tuple[str, str, str]] = []
    guard = threading.Lock()

    def worker() -> None:
        for _ in range(ROUNDS):
            book.nudge(random.choice(keys))
            for k in book.take_due():
                with guard:
                    if k in running:
                        double.append(k)
                    running.add(k)
                book.nudge(k)
                with guard:
                    running.discard(k)
                book.done(k, None)

    run_all(worker, n=8)
    assert not double
    for k in keys:
        book.forget(k)
        book.nudge(k)
    assert book.keys() == [] and book.take_due() == []
