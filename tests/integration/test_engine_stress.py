"""The engine under everything at once, in process: it never stalls, never reuses an index.

Four writers append to one topic whose segments seal every few rows, while
other threads create, change and delete topics (also by a first append),
read and iterate, and retention deletes segments all the time. This is how
the operator uses a node while producers write; it once deadlocked within a
second (engine lock vs retention lock). Fixed budget: a few seconds; any
worker that makes no progress for STALL seconds fails the test with every
thread's stack.

The interpreter runs with the node's GIL switch interval (``run_node`` sets
it): at Python's 5 ms, nine busy threads on two cores made a topic deletion,
which gives the GIL up a few dozen times, wait over 3 s in all to take it back
(every fsync under strace took under 5 ms; at 1 ms the same run passed).
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from plateau.protocol.errors import Busy
from plateau.protocol.topic_config import TopicConfigRequest
from plateau.server.config import ServerSettings
from plateau.server.tuning import tune_interpreter
from plateau.storage.config import StorageSettings
from plateau.storage.engine import Engine
from testkit.stress import assert_indexes_never_reused, operator_mix, run_stress

SECONDS = 6.0
STALL = 3.0
USAGE_PAUSE = 0.001
HOT = "hot"


def cfg(**kw: object) -> TopicConfigRequest:
    return TopicConfigRequest.model_validate(kw)


def small(n: int = 3) -> pa.Table:
    return pa.table({"x": pa.array(range(n), pa.int64())})


def stress_steps(engine: Engine) -> tuple[dict[str, Callable[[], object]], dict[str, list[int]]]:
    """The workers; also returns the span starts each writer was given, per partition."""
    starts: dict[str, list[int]] = {str(p): [] for p in range(4)}
    counter = itertools.count()
    budget = itertools.cycle([2_000, 50_000])

    def writer(p: str) -> Callable[[], object]:
        def step() -> None:
            with contextlib.suppress(Busy):
                starts[p].append(engine.append(HOT, p, small()).start)

        return step

    def create_append_delete(prefix: str, explicit: bool) -> Callable[[], object]:
        def step() -> None:
            name = f"{prefix}{next(counter) % 4}"
            if explicit:
                engine.put_topic(name, cfg(segment={"max_rows": 2}))
            with contextlib.suppress(Busy):
                engine.append(name, "0", small())
            engine.delete_topic(name)

        return step

    def admin() -> None:
        engine.put_topic(HOT, cfg(retention={"max_bytes": next(budget)}))

    def reader() -> None:
        engine.read_partition(HOT, "1", 0, 50)
        engine.iterate_topic(HOT, {}, 100)

    def usage() -> None:
        engine.node_usage()
        engine.topic_usage(HOT)
        # A node answers usage over HTTP (the operator every few seconds, a scrape), never
        # in a loop with no pause. Unpaced, this pure-Python step held the GIL for most of
        # the run (38k-72k calls against 1k-4k appends a writer) and every thread that
        # gives the GIL up for I/O waited behind it each time it came back: 5 of 10 runs
        # "stalled" that way with no lock held long. Paced, it still runs ~1,200 times.
        time.sleep(USAGE_PAUSE)

    return operator_mix(writer, create_append_delete, admin, reader, usage, list(starts)), starts


def test_engine_never_stalls_under_topic_changes_sealing_and_retention(tmp_path: Path) -> None:
    settings = StorageSettings(
        data_dir=tmp_path / "data",
        capacity_bytes=1 << 40,
        retention_interval_seconds=0.05,
        auto_create_topics=True,
    )
    engine = Engine(settings)
    engine.put_topic(
        HOT,
        cfg(
            partitions=4,
            segment={"max_rows": 5, "format": "arrow"},
            retention={"max_bytes": 2000},
        ),
    )
    steps, starts = stress_steps(engine)
    # pyarrow imports pandas on its first pa.table(): seconds on a loaded machine, which a
    # writer would spend inside the stall window when this test runs on its own
    small()
    done = threading.Event()
    python_default_ms = sys.getswitchinterval() * 1000
    tune_interpreter(ServerSettings().gil_switch_interval_ms)
    try:
        calls = run_stress(steps, SECONDS, STALL)
        done.set()
    finally:
        tune_interpreter(python_default_ms)
        if done.is_set():
            engine.close()
    assert all(n > 0 for n in calls.values()), calls
    assert_indexes_never_reused(starts)
