"""Streaming reads by Spark (real PySpark, local[2]) of a topic that keeps growing:
every appended record reaches the sink exactly once across micro-batches, a query
stopped and restarted from its checkpoint loses and repeats nothing, micro-batches
respect maxRecordsPerTrigger, and Trigger.AvailableNow drains what is there."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from plateau.client import PlateauClient
from testkit.nodeproc import NodeProcess
from tests.spark.topics import rows, snapshot_ends, value

PARTS = ["0", "1"]
BATCH = 37  # rows per append: not a divisor of anything, so batches straddle segments


class Appender:
    """Appends ``BATCH`` rows to the partitions in turn until stopped; counts what was acked."""

    def __init__(self, url: str, topic: str) -> None:
        self.client = PlateauClient(url)
        self.topic = topic
        self.ends = dict.fromkeys(PARTS, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for p in PARTS:
                    start = self.ends[p]
                    span = self.client.append(self.topic, p, rows(p, start, start + BATCH))
                    assert span.start == start, (p, span, start)
                    self.ends[p] = span.end
                time.sleep(0.05)
        except BaseException as e:
            self.error = e

    def __enter__(self) -> Appender:
        self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the appender stalled"
        assert self.error is None, self.error
        return dict(self.ends)

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.client.close()


def start_query(spark: Any, options: dict[str, str], out: Path, trigger: dict[str, Any]) -> Any:
    df = spark.readStream.format("plateau").options(**options).load()
    return (
        df.select("_partition", "_index", "v", "s")
        .writeStream.format("parquet")
        .option("path", str(out / "sink"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(**trigger)
        .start()
    )


def batches_with_data(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def run_for(query: Any, batches: int, timeout: float = 60) -> list[int]:
    """Let ``query`` run until ``batches`` micro-batches read rows; then stop it."""
    deadline = time.monotonic() + timeout
    while len(batches_with_data(query)) < batches:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"only {batches_with_data(query)} in {timeout}s"
        time.sleep(0.1)
    query.stop()
    return batches_with_data(query)  # after stop: a batch that ended meanwhile counts too


def check_sink(spark: Any, out: Path, ends: dict[str, int]) -> None:
    got = spark.read.parquet(str(out / "sink")).collect()
    keys = [(r["_partition"], r["_index"]) for r in got]
    assert len(keys) == len(set(keys)), "a record reached the sink twice"
    expected = {(p, i) for p, end in ends.items() for i in range(end)}
    missing = expected - set(keys)
    assert not missing, f"{len(missing)} records never arrived, e.g. {sorted(missing)[:5]}"
    assert set(keys) == expected
    assert all(
        r["v"] == value(r["_partition"], r["_index"]) and r["s"] == f"r{r['_index']}" for r in got
    )


@pytest.mark.parametrize("mode", ["url", "path"])
def test_stream_exactly_once_across_restart(
    spark: Any, node: NodeProcess, tmp_path: Path, mode: str
) -> None:
    with PlateauClient(node.url) as client:  # path mode sees sealed segments: seal often
        client.put_topic("s", partitions=2, segment_max_rows=100, segment_max_age_seconds=0.5)
    options = {"topic": "s", "maxRecordsPerTrigger": "150"}
    options.update({"url": node.url} if mode == "url" else {"path": str(node.data_dir)})
    fast = {"processingTime": "200 milliseconds"}
    with Appender(node.url, "s") as appender:
        deadline = time.monotonic() + 30
        while not any(snapshot_ends(node.data_dir, "s").values()):  # path mode: columns known
            assert time.monotonic() < deadline
            time.sleep(0.1)
        first = run_for(start_query(spark, options, tmp_path, fast), batches=3)
        time.sleep(1.0)  # records keep arriving while no query runs
        second = run_for(start_query(spark, options, tmp_path, fast), batches=3)
        ends = appender.stop()
    assert all(n <= 150 for n in first + second), (first, second)
    if mode == "path":  # wait until the last segments are sealed and in the snapshot
        deadline = time.monotonic() + 30
        while snapshot_ends(node.data_dir, "s") != ends:
            assert time.monotonic() < deadline, (snapshot_ends(node.data_dir, "s"), ends)
            time.sleep(0.1)
    # What is left depends on the appender's pace; a limit of a third of it means
    # AvailableNow must split the drain into several micro-batches whatever the pace.
    left = sum(ends.values()) - sum(first) - sum(second)
    assert left > 3, (left, ends, first, second)
    limit = -(-left // 3)
    drain_options = {**options, "maxRecordsPerTrigger": str(limit)}
    drain = start_query(spark, drain_options, tmp_path, {"availableNow": True})
    assert drain.awaitTermination(120)
    assert drain.exception() is None
    drained = batches_with_data(drain)
    # AvailableNow drains in micro-batches of at most maxRecordsPerTrigger, to the end
    assert len(drained) > 1 and all(n <= limit for n in drained), (drained, limit)
    check_sink(spark, tmp_path, ends)


def test_stream_starting_offsets_and_time(spark: Any, node: NodeProcess, tmp_path: Path) -> None:
    with PlateauClient(node.url) as client:
        client.put_topic("s", partitions=2)
        for p in PARTS:
            client.append("s", p, rows(p, 0, 300))
    options = {
        "url": node.url,
        "topic": "s",
        "startingOffsets": '{"0": 100, "1": -1}',
        "startingTimestamp": str(rows("0", 150, 151).column("time")[0].as_py()),
    }
    query = start_query(spark, options, tmp_path, {"availableNow": True})
    assert query.awaitTermination(120)
    got = spark.read.parquet(str(tmp_path / "sink")).collect()
    assert sorted((r["_partition"], r["_index"]) for r in got) == [
        ("0", i) for i in range(150, 300)
    ]
    with pytest.raises(Exception, match=r"endingOffsets.*batch reads"):
        bad = start_query(
            spark,
            {**options, "endingOffsets": '{"0": 250}'},
            tmp_path / "b",
            {"availableNow": True},
        )
        bad.awaitTermination(60)
        raise AssertionError(f"no error: {bad.exception()}")
