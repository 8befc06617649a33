"""The pool of recycled memory for large append bodies (``server/body_pool.py``).

What the node relies on: a region is lent again only once no Arrow buffer over
it is left (so recycling never changes bytes a reader sees), what the pool maps
stays within its bound, idle regions are unmapped after ``idle_seconds``, and
many threads leasing and returning at once neither corrupt a body nor stall.
"""

from __future__ import annotations

import gc
import os
import random
import threading
import time

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from plateau.server.body_pool import MIN_POOLED_BYTES, BodyPool, Pieces, size_class

MiB = 1 << 20


def pieces_of(data: bytes, piece: int = 65536) -> Pieces:
    return Pieces([data[i : i + piece] for i in range(0, len(data), piece)], len(data))


@given(st.integers(min_value=1, max_value=1 << 40))
def test_a_size_class_holds_its_body_and_wastes_at_most_an_eighth(size: int) -> None:
    capacity = size_class(size)
    assert size <= capacity <= size + size // 8 + 1
    assert size_class(capacity) == capacity, "a class is its own class, so regions are reused"


def test_size_classes_are_few_per_octave() -> None:
    assert len({size_class(n) for n in range(MiB, 2 * MiB + 1, 4096)}) == 9


def test_a_gathered_body_is_the_bytes_sent() -> None:
    pool = BodyPool(64 * MiB, 64 * MiB)
    data = os.urandom(MIN_POOLED_BYTES + 12345)
    body = pool.gather(pieces_of(data))
    assert isinstance(body, pa.Buffer) and body.to_pybytes() == data


def test_a_region_is_lent_again_only_after_its_last_buffer_is_gone() -> None:
    pool = BodyPool(64 * MiB, 64 * MiB)
    first = pool.gather(pieces_of(b"a" * 2 * MiB))
    address = first.address
    kept = first.slice(100, 10)  # a reader's slice of the body outlives the body itself
    del first
    gc.collect()
    second = pool.gather(pieces_of(b"b" * 2 * MiB))
    assert second.address != address, "a region with a live slice was lent again"
    assert kept.to_pybytes() == b"a" * 10
    del kept
    gc.collect()
    third = pool.gather(pieces_of(b"c" * 2 * MiB))
    assert third.address == address, "the freed region was not reused"
    assert third.to_pybytes() == b"c" * 2 * MiB
    assert pool.leased_bytes == 2 * size_class(2 * MiB)


def test_what_the_pool_maps_stays_within_its_limit() -> None:
    capacity = size_class(3 * MiB)
    pool = BodyPool(limit_bytes=4 * capacity, max_idle_bytes=64 * MiB)
    bodies = [pool.gather(pieces_of(bytes(3 * MiB))) for _ in range(6)]
    assert pool.leased_bytes == 6 * capacity  # leases are never refused: the budget did that
    del bodies
    gc.collect()
    assert pool.leased_bytes == 0
    assert pool.idle_bytes == 4 * capacity, "past the limit, returned regions are unmapped"


def test_idle_regions_stay_within_their_own_bound() -> None:
    """Idle regions are memory no part of the budget counts: bounded apart, however much
    room the leased bound leaves."""
    capacity = size_class(3 * MiB)
    pool = BodyPool(limit_bytes=64 * capacity, max_idle_bytes=2 * capacity)
    bodies = [pool.gather(pieces_of(bytes(3 * MiB))) for _ in range(6)]
    del bodies
    gc.collect()
    pool.sweep()
    assert pool.leased_bytes == 0
    assert pool.idle_bytes == 2 * capacity


def test_idle_regions_are_unmapped_after_idle_seconds() -> None:
    now = [1000.0]  # a clock the test turns: a sleep can be overtaken by a loaded machine
    pool = BodyPool(64 * MiB, 64 * MiB, idle_seconds=5.0, clock=lambda: now[0])
    body = pool.gather(pieces_of(bytes(2 * MiB)))
    del body
    gc.collect()
    assert pool.idle_bytes == size_class(2 * MiB)
    now[0] += 4.9
    pool.sweep()
    assert pool.idle_bytes == size_class(2 * MiB), "swept before it was idle long enough"
    now[0] += 1.0  # the pool walks its idle lists at most once a second
    pool.sweep()
    assert pool.idle_bytes == 0


def test_close_unmaps_idle_regions_and_later_returns() -> None:
    pool = BodyPool(64 * MiB, 64 * MiB)
    kept = pool.gather(pieces_of(b"k" * 2 * MiB))
    gone = pool.gather(pieces_of(bytes(2 * MiB)))
    del gone
    gc.collect()
    pool.close()
    assert pool.idle_bytes == 0
    assert kept.to_pybytes()[:3] == b"kkk", "a leased region outlives close"
    del kept
    gc.collect()
    assert pool.idle_bytes == 0 and pool.leased_bytes == 0


def test_a_body_freed_while_its_thread_holds_the_lock_is_filed_later() -> None:
    """The cyclic GC runs finalizers inside whatever code allocated, the pool's own locked
    sections included: a lease's finalizer must then neither wait for the lock (that
    thread holds it) nor lose the region."""
    pool = BodyPool(64 * MiB, 64 * MiB)
    body = pool.gather(pieces_of(bytes(2 * MiB)))
    done = threading.Event()

    def free_under_lock() -> None:
        nonlocal body
        with pool._lock:  # as a GC pass inside lease() would be
            del body
        done.set()

    worker = threading.Thread(target=free_under_lock, daemon=True)
    worker.start()
    assert done.wait(10), "the finalizer waited for a lock its own thread holds"
    assert pool.idle_bytes == 0, "filed under a lock it did not take"
    pool.sweep()
    assert pool.idle_bytes == size_class(2 * MiB) and pool.leased_bytes == 0


def test_a_piece_past_the_declared_size_is_refused() -> None:
    pool = BodyPool(64 * MiB, 64 * MiB)
    with pytest.raises(ValueError, match="declared"):
        pool.gather(Pieces([bytes(MiB), b"x"], MiB))


def test_threads_leasing_and_returning_at_once_keep_every_body_intact() -> None:
    """Stress for the pool's lock: 8 threads gather bodies of a few sizes, hold some a
    while, and check every byte before dropping them; a stall fails the join's deadline."""
    pool = BodyPool(limit_bytes=24 * MiB, max_idle_bytes=12 * MiB, idle_seconds=0.05)
    errors: list[str] = []
    rounds = 150

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        held: list[tuple[pa.Buffer, bytes]] = []
        try:
            for i in range(rounds):
                size = rng.choice([MiB, MiB + 70_000, 2 * MiB + 1, 3 * MiB])
                fill = bytes([seed * 16 + i % 16]) * size
                held.append((pool.gather(pieces_of(fill, rng.choice([4096, 65536]))), fill))
                if len(held) > rng.randint(0, 4):
                    body, want = held.pop(rng.randrange(len(held)))
                    if body.to_pybytes() != want:
                        errors.append(f"thread {seed}: a body changed while it was held")
                if i % 37 == 0:
                    pool.sweep()
            for body, want in held:
                if body.to_pybytes() != want:
                    errors.append(f"thread {seed}: a body changed while it was held")
        except Exception as exc:  # reported below, with the thread's seed
            errors.append(f"thread {seed}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "the pool stalled"
    assert errors == []
    gc.collect()
    assert pool.leased_bytes == 0
    assert pool.idle_bytes <= pool.limit_bytes
