"""The collector's knobs (``server.tuning``): pauses counted once, the heap frozen whole.

In this test process; that they reach a real node is
``tests/integration/test_process_tuning.py``.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from plateau.server.tuning import count_gc_pauses, freeze_startup_heap, stop_counting_gc_pauses


def full_collections() -> float:
    value = REGISTRY.get_sample_value("plateau_gc_pause_seconds_count", {"generation": "2"})
    return value or 0.0


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the rest of the test run collects as before


@pytest.fixture
def counting() -> Iterator[None]:
    yield
    stop_counting_gc_pauses()  # the rest of the test run collects untimed
    assert not any(type(cb).__name__ == "_PauseClock" for cb in gc.callbacks)


def scanned(obj: object) -> bool:
    """Whether the collector still walks ``obj`` (frozen objects are not listed)."""
    return any(o is obj for o in gc.get_objects())


def test_each_collection_is_counted_once_however_often_counting_is_asked_for(
    counting: None,
) -> None:
    count_gc_pauses()
    count_gc_pauses()
    assert sum(1 for cb in gc.callbacks if type(cb).__name__ == "_PauseClock") == 1
    before = full_collections()
    gc.collect()
    gc.collect()
    assert full_collections() == before + 2


def test_freezing_keeps_live_objects_and_collects_garbage_first(unfrozen: None) -> None:
    class Cycle:
        other: object

    a, b = Cycle(), Cycle()
    a.other, b.other = b, a
    kept = [[i] for i in range(10)]  # lists: objects the collector tracks
    garbage = Cycle()
    garbage.other = garbage
    gone = weakref.ref(garbage)
    del garbage  # unreachable, only the collector frees it
    frozen = freeze_startup_heap()
    # freed frozen objects leave the count (other tests' threads may drop some meanwhile);
    # nothing joins it without another freeze
    assert 0 < gc.get_freeze_count() <= frozen
    assert REGISTRY.get_sample_value("plateau_gc_frozen_objects") == frozen
    assert a.other is b and kept[9] == [9]  # frozen objects are untouched
    assert not scanned(kept) and not scanned(a)  # out of every later collection's walk
    made_later = [[0]]
    assert scanned(made_later)  # collected as before
    assert gone() is None  # collected, not frozen
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    assert scanned(kept)
