"""The node-wide memory budget: where its default comes from, early seals, and 429 when full."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from plateau.protocol.errors import Busy
from plateau.protocol.topic_config import TopicConfigRequest
from plateau.storage.catalog.memory import (
    SEAL_EARLY_FRACTION,
    BudgetSource,
    MemoryBudget,
    cgroup_memory_limit,
)
from plateau.storage.data.open_segment import WRITE_BUFFER
from plateau.storage.engine import SEALER_THREADS, Engine
from tests.conftest import EngineFactory
from tests.unit.conftest import wait_for

MiB = 1 << 20


def fake_cgroup(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    (tmp_path / "proc").write_text(proc)
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return tmp_path / "proc", root


def test_limit_from_cgroup_v2_takes_the_tightest_on_the_path(tmp_path: Path) -> None:
    proc, root = fake_cgroup(
        tmp_path,
        "0::/kubepods/pod1/ctr\n",
        {
            "cgroup.controllers": "cpu memory",
            "kubepods/memory.max": str(8 << 30),
            "kubepods/pod1/memory.max": str(3 << 30),
            "kubepods/pod1/ctr/memory.max": "max",
        },
    )
    assert cgroup_memory_limit(proc, root) == 3 << 30


def test_limit_from_cgroup_v1_and_none_without_one(tmp_path: Path) -> None:
    proc, root = fake_cgroup(
        tmp_path,
        "4:memory:/docker/abc\n3:cpu:/docker/abc\n",
        {
            "memory/docker/abc/memory.limit_in_bytes": str(1536 * MiB),
            "memory/memory.limit_in_bytes": "9223372036854771712",  # v1's "no limit"
        },
    )
    assert cgroup_memory_limit(proc, root) == 1536 * MiB
    (root / "memory/docker/abc/memory.limit_in_bytes").write_text("9223372036854771712")
    assert cgroup_memory_limit(proc, root) is None


def test_parts_add_up_to_the_budget() -> None:
    memory = MemoryBudget(BudgetSource(1000 * MiB, "configured"), read_cache_bytes=512 * MiB)
    assert memory.read_cache_limit == 250 * MiB  # at most a quarter
    assert memory.reserve_bodies(128 * MiB) == 128 * MiB
    parts = memory.parts()
    assert sum(p["limit"] for p in parts.values()) == 1000 * MiB


def rows(n: int) -> pa.Table:
    return pa.table({"v": pa.array([b"x" * 100] * n, pa.binary())})


def test_open_segments_are_sealed_early_when_memory_is_short(make_engine: EngineFactory) -> None:
    # 8 open segments: their write buffers (64 KiB each, counted) plus their rows
    e = make_engine(memory_budget_bytes=32 * MiB, read_cache_bytes=0)
    e.put_topic("t", TopicConfigRequest(partitions=8))
    table = rows(2000)  # about 200 KB: 160 of them are past the open segments' part
    limit = e.memory.segments_limit
    for i in range(160):
        e.append("t", str(i % 8), table)
        assert e.memory.segments <= limit
    wait_for(lambda: e.memory.segments - e.memory.sealing <= limit * SEAL_EARLY_FRACTION)
    # no segment reached its own limits (1M rows, 64 MiB): memory sealed them (the seals run
    # on the sealer's thread, and may still be running when the memory is counted as sealing)
    wait_for(lambda: sum(len(p.sealed) for p in e._topic("t").partitions.values()) > 0)
    assert e.topic_usage("t").records == 160 * 2000


def engine_with_sealers_held(
    make_engine: EngineFactory, wait_s: float
) -> tuple[Engine, threading.Event]:
    """An 8 MiB budget whose sealer threads are all busy until the event is set.

    The fault (a disk too slow for the seals) is made by occupying the sealer
    threads with a wait: nothing is sealed, so open segments fill their part.
    """
    e = make_engine(memory_budget_bytes=8 * MiB, read_cache_bytes=0, memory_wait_seconds=wait_s)
    e.put_topic("t", TopicConfigRequest(partitions=8))
    release = threading.Event()
    for _ in range(SEALER_THREADS):
        e._sealer.submit(release.wait, 30)
    return e, release


def test_appends_get_429_when_sealing_cannot_keep_up_and_nothing_half_written(
    make_engine: EngineFactory,
) -> None:
    e, release = engine_with_sealers_held(make_engine, wait_s=0.2)
    table = rows(2000)
    refused: Busy | None = None
    spans = []
    try:
        for i in range(200):
            asked = time.monotonic()
            try:
                spans.append(e.append("t", str(i % 8), table))
            except Busy as exc:
                refused = exc
                break
    finally:
        release.set()
    assert time.monotonic() - asked >= 0.2  # it waited for room before the 429
    assert refused is not None and "memory_budget_bytes" in str(refused)
    assert refused.retry_after and refused.status == 429
    assert e.memory.segments <= e.memory.segments_limit
    appended = len(spans) * 2000
    assert e.topic_usage("t").records == appended  # the refused append left nothing behind
    wait_for(lambda: e.memory.sealing == 0)
    e.append("t", "0", table)  # room again once the seals ran


def test_an_append_that_finds_memory_full_waits_for_the_seals_and_is_stored(
    make_engine: EngineFactory,
) -> None:
    e, release = engine_with_sealers_held(make_engine, wait_s=60)
    table = rows(2000)
    spans = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(200):
                spans.append(e.append("t", str(i % 8), table))
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait_for(lambda: e.memory.parts()["open_segments"]["waiting"] == 1)
        waited_at = len(spans)
        assert not errors and e.memory.segments <= e.memory.segments_limit
    finally:
        release.set()  # the seals run and free the memory the writer waits for
        thread.join(timeout=60)
    assert not thread.is_alive(), "the append never got the room the seals freed"
    assert not errors, errors
    assert len(spans) == 200 > waited_at
    assert e.topic_usage("t").records == 200 * 2000
    assert e.memory.parts()["open_segments"]["waiting"] == 0


def test_many_appends_waiting_for_memory_never_stall(make_engine: EngineFactory) -> None:
    """16 writers on a budget that holds a few appends: each waits for seals in turn, every
    one is stored, none refused, and a stall (a lost wake-up) fails the join."""
    e = make_engine(memory_budget_bytes=8 * MiB, read_cache_bytes=0, memory_wait_seconds=30)
    e.put_topic("t", TopicConfigRequest(partitions=16))
    table = rows(2000)
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for _ in range(25):
                e.append("t", str(n), table)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "appends stalled waiting for memory"
    assert not errors, errors[:3]
    assert e.topic_usage("t").records == 16 * 25 * 2000


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_memory_is_returned_when_segments_seal_or_topics_go(
    make_engine: EngineFactory, fmt: str
) -> None:
    e = make_engine()
    e.put_topic("t", TopicConfigRequest.model_validate({"segment": {"format": fmt}}))
    e.append("t", "0", rows(100))
    assert e.memory.segments > 0
    e.delete_topic("t")
    assert e.memory.segments == 0 and e.memory.sealing == 0
    e.put_topic("u", TopicConfigRequest.model_validate({"segment": {"max_rows": 50}}))
    e.append("u", "0", rows(100))
    e.append("u", "0", rows(10))  # rolls the full segment to the sealer
    wait_for(lambda: e.memory.sealing == 0)
    # only the new open segment: its rows (and time column) and its file's write buffer
    assert WRITE_BUFFER < e.memory.segments < WRITE_BUFFER + rows(100).nbytes
