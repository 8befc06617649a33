"""The engine's contract: indexes, schemas, reads, topic config and budgets."""

from __future__ import annotations

import pyarrow as pa
import pytest

from plateau.protocol.errors import Conflict, InvalidInput, NotFound
from plateau.protocol.snapshot import SNAPSHOT_FILE, decode
from plateau.protocol.topic_config import TopicConfigRequest
from plateau.protocol.values import Order, RecordStatus, Span
from plateau.storage.types import TimeRange
from tests.conftest import EngineFactory
from tests.unit.conftest import append_retrying, wait_for


def cfg(**kw: object) -> TopicConfigRequest:
    return TopicConfigRequest.model_validate(kw)


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"x": pa.array(range(lo, hi), pa.int64())})


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_indexes_are_dense_and_reads_cross_segments(make_engine: EngineFactory, fmt: str) -> None:
    e = make_engine()
    e.put_topic("t", cfg(segment={"format": fmt, "max_rows": 250}))
    spans = [append_retrying(e, "t", "0", rows(i * 100, (i + 1) * 100)) for i in range(10)]
    assert spans == [Span(i * 100, (i + 1) * 100) for i in range(10)]
    wait_for(lambda: len(e.topic_usage("t").partitions["0"].span) == 1000)
    got = e.read_partition("t", "0", 0, 10_000)
    assert got.table.column("x").to_pylist() == list(range(1000))
    assert got.status == RecordStatus.ALL and got.span == Span(0, 1000)
    page = e.read_partition("t", "0", 420, 200)
    assert page.table.column("x").to_pylist() == list(range(420, 620))
    assert page.status == RecordStatus.RECORD_LIMITED and page.span == Span(420, 620)


def test_time_column_is_stamped_and_validated(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.append("t", "0", rows(0, 3))
    table = e.read_partition("t", "0", 0, 10).table
    assert table.schema.field("time").type == pa.int64()
    with pytest.raises(InvalidInput, match="time"):
        e.append("t", "0", pa.table({"time": pa.array(["a"])}))
    with pytest.raises(InvalidInput, match="null"):
        e.append("t", "0", pa.table({"time": pa.array([1, None], pa.int64())}))
    with pytest.raises(InvalidInput, match="null-typed"):
        e.append("t", "0", pa.table({"n": pa.nulls(2)}))
    assert e.topic_usage("t").partitions["0"].span == Span(0, 3)


def test_schema_change_is_a_boundary(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.append("t", "0", rows(0, 5))
    e.append("t", "0", pa.table({"y": pa.array(["a", "b"])}))
    e.append("t", "0", rows(5, 7))
    first = e.read_partition("t", "0", 0, 100)
    assert first.status == RecordStatus.SCHEMA_CHANGE and first.span == Span(0, 5)
    second = e.read_partition("t", "0", 5, 100)
    assert second.table.column("y").to_pylist() == ["a", "b"]
    assert second.status == RecordStatus.SCHEMA_CHANGE
    third = e.read_partition("t", "0", 7, 100)
    assert third.table.column("x").to_pylist() == [5, 6] and third.status == RecordStatus.ALL


def test_time_range_filters_records(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.append("t", "0", pa.table({"time": pa.array(range(0, 1000, 10), pa.int64())}))
    got = e.read_partition("t", "0", 0, 1000, TimeRange(100, 190))
    assert got.table.column("time").to_pylist() == list(range(100, 200, 10))
    limited = e.read_partition("t", "0", 0, 3, TimeRange(100, None))
    assert limited.table.column("time").to_pylist() == [100, 110, 120]
    assert limited.span == Span(0, 13)


def test_topic_iteration_visits_every_partition(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("t", cfg(partitions=3))
    for p in range(3):
        e.append("t", str(p), rows(p * 1000, p * 1000 + 50))
    seen: list[int] = []
    cursor: dict[str, int] = {}
    for _ in range(20):
        page = e.iterate_topic("t", cursor, 40)
        seen += page.table.column("x").to_pylist()
        cursor = page.next
        if page.status == RecordStatus.ALL:
            break
    assert sorted(seen) == sorted(x for p in range(3) for x in range(p * 1000, p * 1000 + 50))
    assert cursor == {"0": 50, "1": 50, "2": 50}
    filtered = e.iterate_topic("t", {}, 1000, partition_filter=["regex:^[12]$"])
    assert set(filtered.next) == {"1", "2"}
    back = e.iterate_topic("t", {}, 10, order=Order.DESC, partition_filter=["0"])
    assert back.table.column("x").to_pylist() == list(range(49, 39, -1))
    assert back.next == {"0": 40}


def test_budgets_must_fit_the_node(make_engine: EngineFactory) -> None:
    e = make_engine(capacity_bytes=1000, reserve_fraction=0.1)
    e.put_topic("a", cfg(retention={"max_bytes": 600}))
    with pytest.raises(Conflict, match="does not fit"):
        e.put_topic("b", cfg(retention={"max_bytes": 400}))
    assert e.topics() == ["a"]
    e.put_topic("b", cfg(retention={"max_bytes": 300}))
    usage = e.node_usage()
    assert (usage.capacity_bytes, usage.allocated_bytes, usage.reserve_bytes) == (1000, 900, 100)


def test_put_topic_is_idempotent_and_partial(make_engine: EngineFactory) -> None:
    e = make_engine()
    assert e.put_topic("t", cfg(partitions=2, segment={"format": "arrow"})).created
    result = e.put_topic("t", cfg(retention={"max_bytes": 5000}))
    assert not result.created
    again = result.config
    assert again.partitions == 2 and again.segment.format == "arrow"
    assert again.retention.max_bytes == 5000


def test_bad_names_and_unknown_topics(make_engine: EngineFactory) -> None:
    e = make_engine(auto_create_topics=False)
    for bad in ["..", "../x", "A", "a/b", ".hidden", "x" * 129, ""]:
        with pytest.raises(InvalidInput):
            e.append(bad, "0", rows(0, 1))
        with pytest.raises(InvalidInput):
            e.append("ok", bad, rows(0, 1)) if bad else e.put_topic(bad, cfg())
    with pytest.raises(NotFound):
        e.append("nope", "0", rows(0, 1))
    with pytest.raises(NotFound):
        e.read_partition("nope", "0", 0, 1)
    assert not list((e.data_dir / "topics").iterdir())


def test_delete_topic_removes_data(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.append("t", "0", rows(0, 10))
    e.delete_topic("t")
    assert e.topics() == []
    assert not (e.data_dir / "topics" / "t").exists()
    assert decode((e.data_dir / SNAPSHOT_FILE).read_bytes()).topics == {}
    with pytest.raises(NotFound):
        e.delete_topic("t")


def test_one_engine_per_data_directory(make_engine: EngineFactory) -> None:
    from plateau.protocol.errors import Unavailable

    make_engine()
    with pytest.raises(Unavailable, match="in use"):
        make_engine()


def test_usage_reports_the_oldest_and_newest_record_time(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.append("t", "0", pa.table({"x": [1, 2], "time": pa.array([5_000, 1_000], pa.int64())}))
    e.append("t", "1", pa.table({"x": [3], "time": pa.array([9_000], pa.int64())}))
    usage = e.topic_usage("t")  # from the open segments
    assert (usage.oldest_time_ms, usage.newest_time_ms) == (1_000, 9_000)
    assert usage.partitions["0"].newest_time_ms == 5_000
    e.close()
    usage = make_engine().topic_usage("t")  # from the sealed segments' manifest rows
    assert (usage.oldest_time_ms, usage.newest_time_ms) == (1_000, 9_000)
