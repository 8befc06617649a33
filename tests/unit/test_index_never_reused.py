"""``(topic, partition, index)`` names one record forever: also across topic deletion,
re-creation (explicit or by a first append) and restarts."""

from __future__ import annotations

import pyarrow as pa

from plateau.protocol.topic_config import TopicConfigRequest
from plateau.protocol.values import Span
from tests.conftest import EngineFactory


def two() -> pa.Table:
    return pa.table({"x": pa.array([1, 2], pa.int64())})


def test_deleted_topic_recreated_continues_its_indexes(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("t", TopicConfigRequest(partitions=2))
    assert e.append("t", "0", two()) == Span(0, 2)
    assert e.append("t", "extra", two()) == Span(0, 2)  # a partition named by an append
    e.delete_topic("t")
    assert e.append("t", "0", two()) == Span(2, 4)  # auto-created again
    assert e.append("t", "extra", two()) == Span(2, 4)
    assert e.append("t", "1", two()) == Span(0, 2)
    usage = e.topic_usage("t")
    assert usage.partitions["0"].span == Span(2, 4)
    assert e.read_partition("t", "0", 0, 10).table.column("x").to_pylist() == [1, 2]


def test_indexes_continue_across_delete_and_restart(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.put_topic("t", TopicConfigRequest(segment={"format": "arrow"}))  # type: ignore[arg-type]
    for _ in range(3):
        e.append("t", "0", two())
    e.delete_topic("t")  # the open segment (not yet sealed) held indexes 0..6
    e.close()
    e = make_engine()
    assert "t" not in e.topics()
    e.put_topic("t", TopicConfigRequest())
    assert e.topic_usage("t").partitions["0"].span == Span(6, 6)
    assert e.append("t", "0", two()) == Span(6, 8)
    e.close()
    e = make_engine()
    assert e.append("t", "0", two()) == Span(8, 10)
    e.delete_topic("t")
    assert e.append("t", "0", two()) == Span(10, 12)
