"""``read_topic(url=...)``: plateau's JVM reader (``jvm/``) in a real PySpark, against
a real node. The rows must be exactly those ``format("plateau")`` reads over the same
url (which tests/spark/test_spark_batch.py checks row by row), for every option;
and the reader's own jobs: column pruning, timestamps converted, a column added
later, data lost to retention, a read stopped early, a node gone mid-read."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pytest

import plateau.spark
from plateau.client import PlateauClient
from testkit.nodeproc import NodeProcess, metric_values
from tests.spark.test_spark_batch import expect, keyed, load
from tests.spark.topics import STEP_MS, T0_MS, expected_time, fill, rows, value

PARTS = ["0", "1", "2"]
SEALED, OPEN = 400, 50
TOKEN = "s3cret-jvm"  # writes
READ = "r3ad-jvm"  # reads need it: the JVM reader must send it


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        Path(tmp_path_factory.mktemp("spark-jvm")) / "data", token=TOKEN, read_token=READ
    )
    proc.start()
    try:
        with PlateauClient(proc.url, token=TOKEN) as client:
            for fmt in ("parquet", "arrow"):
                fill(client, f"t-{fmt}", fmt, PARTS, SEALED, OPEN)
            client.put_topic("grows", partitions=1, segment_max_rows=100)
            client.append("grows", "0", rows("0", 0, 100))
            for lo, hi in ((100, 200), (200, 210)):
                extra = pa.array(["e"] * (hi - lo))
                client.append("grows", "0", rows("0", lo, hi).append_column("extra", extra))
            # time as a millisecond timestamp (Spark holds microseconds), nested columns
            client.put_topic("stamped", partitions=1, segment_max_rows=50)
            client.append("stamped", "0", stamped(0, 120))
            # types Spark cannot read from Arrow as they are
            client.put_topic("odd", partitions=1)
            client.append("odd", "0", odd(0, 30))
            # the same nested in a struct: format("plateau") converts it in Python
            client.put_topic("nested", partitions=1)
            nested = pa.array([{"u": i} for i in range(30)], pa.struct([("u", pa.uint32())]))
            client.append("nested", "0", rows("0", 0, 30).append_column("n", nested))
            # lz4 batches sealed two to a segment, read in pages of one batch: sent as stored
            client.put_topic(
                "packed",
                partitions=1,
                segment_format="arrow",
                segment_max_rows=200,
                segment_compression="lz4",
            )
            for lo in range(0, 500, 100):
                client.append("packed", "0", packed(lo, lo + 100))
            client.put_topic("big", partitions=2, segment_max_rows=20_000)
            for p in ("0", "1"):
                client.append("big", p, rows(p, 0, 60_000))
        yield proc
    finally:
        proc.stop()


def packed(lo: int, hi: int) -> pa.Table:
    return rows("0", lo, hi).append_column("note", pa.array(["again and again " * 20] * (hi - lo)))


def stamped(lo: int, hi: int) -> pa.Table:
    idx = range(lo, hi)
    return pa.table(
        {
            "time": pa.array([T0_MS + i * STEP_MS for i in idx], pa.timestamp("ms", tz="UTC")),
            "at": pa.array([T0_MS * 1000 + i for i in idx], pa.timestamp("ns")),
            "tags": pa.array([[f"t{i}", "x"] for i in idx], pa.list_(pa.string())),
            "pos": pa.array([{"x": i, "y": float(i)} for i in idx]),
        }
    )


def odd(lo: int, hi: int) -> pa.Table:
    idx = list(range(lo, hi))
    return (
        rows("0", lo, hi)
        .append_column("u8", pa.array([i % 256 for i in idx], pa.uint8()))
        .append_column("u16", pa.array([60_000 + i for i in idx], pa.uint16()))
        .append_column("u32", pa.array([4_000_000_000 + i for i in idx], pa.uint32()))
        .append_column("u64", pa.array([2**64 - 1 - i for i in idx], pa.uint64()))
        .append_column("half", pa.array([np.float16(i / 2) for i in idx], pa.float16()))
        .append_column("day", pa.array([86_400_000 * i for i in idx], pa.date64()))
        .append_column("fixed", pa.array([i.to_bytes(4, "big") for i in idx], pa.binary(4)))
        .append_column("maybe", pa.array([None if i % 3 else i for i in idx], pa.uint32()))
    )


def jvm(spark: Any, node: NodeProcess, **options: str) -> Any:
    df = plateau.spark.read_topic(spark, url=node.url, token=READ, **options)
    assert "PlateauUrlScan" in plan_of(df), plan_of(df)
    return df


def python(spark: Any, node: NodeProcess, **options: str) -> Any:
    return load(spark, url=node.url, token=READ, **options)


def plan_of(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_whole_topic_same_rows_as_format_plateau(spark: Any, node: NodeProcess, fmt: str) -> None:
    ours = jvm(spark, node, topic=f"t-{fmt}")
    theirs = python(spark, node, topic=f"t-{fmt}")
    assert ours.schema.simpleString() == theirs.schema.simpleString()
    got = keyed(ours)
    # the open, unsealed segment too
    assert set(got) == expect(dict.fromkeys(PARTS, (0, SEALED + OPEN)))
    assert got == keyed(theirs)
    for (p, i), row in got.items():
        assert row["v"] == value(p, i) and row["s"] == f"r{i}"
        assert row["_time"] == expected_time(i).astimezone().replace(tzinfo=None)


def test_compressed_pages_are_read_as_stored(spark: Any, node: NodeProcess) -> None:
    """The JVM reader names the codecs it decodes: lz4 batches come compressed as stored
    (the node's count of stored batches grows) and read as format("plateau") reads them."""
    auth = {"authorization": f"Bearer {TOKEN}"}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # both full segments sealed (a seal takes moments)
        usage = httpx.get(f"{node.url}/admin/topics/packed", headers=auth).json()["usage"]
        if usage["partitions"]["0"]["segments"] >= 3:
            break
        time.sleep(0.05)
    before = sum(metric_values(node.url, "plateau_read_batches_stored_total").values())
    ours = jvm(spark, node, topic="packed", **{"url.pageRows": "100"})
    got = keyed(ours)
    after = sum(metric_values(node.url, "plateau_read_batches_stored_total").values())
    assert after >= before + 4  # the two sealed segments' four batches, at least
    assert got == keyed(python(spark, node, topic="packed"))
    assert set(got) == expect({"0": (0, 500)})
    assert all(row["note"] == "again and again " * 20 for row in got.values())


def test_partitions_offsets_and_time(spark: Any, node: NodeProcess) -> None:
    src = {"topic": "t-parquet"}
    end = SEALED + OPEN
    assert set(keyed(jvm(spark, node, partitions="0,2", **src))) == expect(
        {"0": (0, end), "2": (0, end)}
    )
    assert set(keyed(jvm(spark, node, partitions="regex:[12]", **src))) == expect(
        {"1": (0, end), "2": (0, end)}
    )
    offsets = {
        "startingOffsets": json.dumps({"0": 150, "1": -2}),
        "endingOffsets": json.dumps({"0": 250, "1": 10, "2": -1}),
    }
    got = keyed(jvm(spark, node, **offsets, **src))
    assert set(got) == expect({"0": (150, 250), "1": (0, 10), "2": (0, end)})
    assert got == keyed(python(spark, node, **offsets, **src))
    assert jvm(spark, node, startingOffsets="latest", **src).count() == 0
    start = expected_time(120).isoformat().replace("+00:00", "Z")
    bounds = {"startingTimestamp": start, "endingTimestamp": str(T0_MS + 130 * STEP_MS)}
    got = keyed(jvm(spark, node, **bounds, **src))
    assert set(got) == expect(dict.fromkeys(PARTS, (120, 130)))
    assert all(row["v"] == value(p, i) for (p, i), row in got.items())


def test_pages_smaller_than_slices_and_slices_than_tasks(spark: Any, node: NodeProcess) -> None:
    df = jvm(spark, node, topic="big", **{"url.pageRows": "7000", "url.splitRows": "25000"})
    assert df.rdd.getNumPartitions() == 6  # 60,000 rows per partition in slices of 25,000
    got = df.select("_partition", "_index", "v").collect()
    assert len(got) == 120_000
    assert {(r[0], r[1]) for r in got} == expect({"0": (0, 60_000), "1": (0, 60_000)})
    assert all(r[2] == value(r[0], r[1]) for r in got)


def test_filters_on_partition_and_index_narrow_what_is_fetched(
    spark: Any, node: NodeProcess
) -> None:
    big = jvm(spark, node, topic="big", **{"url.splitRows": "25000"})
    assert big.rdd.getNumPartitions() == 6
    one = big.where("_partition = '1' AND _index >= 25500 AND _index <= 25999")
    assert "tasks=1 narrowedBy=" in plan_of(one), plan_of(one)
    assert one.rdd.getNumPartitions() == 1  # one slice of one partition is fetched
    got = one.select("_partition", "_index", "v").collect()
    assert sorted(r[1] for r in got) == list(range(25_500, 26_000))
    assert all(r[0] == "1" and r[2] == value("1", r[1]) for r in got)
    # IN keeps the partitions it names; the OR inside is left to Spark, rows stay exact
    ends = big.where("_partition IN ('0', '1', 'nope') AND (_index < 3 OR _index > 59997)")
    assert {(r[0], r[1]) for r in ends.select("_partition", "_index").collect()} == {
        (p, i) for p in ("0", "1") for i in (0, 1, 2, 59_998, 59_999)
    }
    # an OR Spark cannot split is still evaluated by Spark, not dropped
    assert "narrowedBy" not in plan_of(big.where("_index = 7 OR s = 'x'"))
    assert big.where("_index = 7 OR _partition = '0'").count() == 60_001
    assert big.where("_index > 9223372036854775806").count() == 0


def test_columns_and_pruning(spark: Any, node: NodeProcess) -> None:
    df = jvm(spark, node, topic="t-arrow", columns="_index,v,_partition", partitions="1")
    assert df.columns == ["_index", "v", "_partition"]
    assert "columns=[v]" in plan_of(df)  # the node sends only v
    got = df.collect()
    assert sorted(r["_index"] for r in got) == list(range(SEALED + OPEN))
    assert all(r["v"] == value("1", r["_index"]) for r in got)
    # a count needs no column: the node sends only time
    counted = jvm(spark, node, topic="t-arrow").groupBy().count()
    assert "columns=[time]" in plan_of(counted)
    assert counted.collect()[0][0] == len(PARTS) * (SEALED + OPEN)
    assert "columns=all" in plan_of(jvm(spark, node, topic="t-arrow"))
    focused = jvm(spark, node, topic="t-arrow", dataset="v", partitions="0")
    assert [c for c in focused.columns if not c.startswith("_")] == ["v", "time"]
    assert focused.count() == SEALED + OPEN


def test_a_column_added_later_is_null_before(spark: Any, node: NodeProcess) -> None:
    got = keyed(jvm(spark, node, topic="grows"))
    assert set(got) == expect({"0": (0, 210)})
    assert all((row["extra"] is None) == (i < 100) for (_, i), row in got.items())
    # the rows before it lack the column: the node refuses the projection, read whole
    some = jvm(spark, node, topic="grows", columns="_partition,_index,extra")
    assert {(r["_partition"], r["_index"]): r["extra"] for r in some.collect()} == {
        k: row["extra"] for k, row in got.items()
    }


def test_timestamps_and_nested_columns(spark: Any, node: NodeProcess) -> None:
    ours, theirs = jvm(spark, node, topic="stamped"), python(spark, node, topic="stamped")
    assert ours.schema.simpleString() == theirs.schema.simpleString()
    got = keyed(ours)
    assert got == keyed(theirs)
    assert set(got) == expect({"0": (0, 120)})
    for (_, i), row in got.items():
        assert row["time"] == expected_time(i).astimezone().replace(tzinfo=None)
        assert row["tags"] == [f"t{i}", "x"] and row["pos"]["x"] == i
    start = str(T0_MS + 10 * STEP_MS)
    assert jvm(spark, node, topic="stamped", startingTimestamp=start).count() == 110


def test_types_spark_cannot_read_from_arrow_are_converted(spark: Any, node: NodeProcess) -> None:
    ours, theirs = jvm(spark, node, topic="odd"), python(spark, node, topic="odd")
    assert ours.schema.simpleString() == theirs.schema.simpleString()
    got = keyed(ours)
    assert got == keyed(theirs)
    row = got[("0", 7)]
    assert (row["u8"], row["u16"], row["u32"], row["u64"]) == (7, 60_007, 4_000_000_007, 2**64 - 8)
    assert row["half"] == 3.5 and row["fixed"] == bytearray(b"\x00\x00\x00\x07")
    assert row["day"].toordinal() - 719163 == 7  # days since 1970-01-01
    assert [got[("0", i)]["maybe"] for i in range(4)] == [0, None, None, 3]


def test_types_it_cannot_pass_read_through_python(
    spark: Any, node: NodeProcess, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="plateau.spark.url_jvm"):
        df = plateau.spark.read_topic(spark, url=node.url, token=READ, topic="nested")
    assert "PlateauUrlScan" not in plan_of(df)
    assert "column 'n' is struct<u: uint32>" in caplog.text
    assert sorted(r["n"]["u"] for r in df.collect()) == list(range(30))


def test_bad_options_fail_before_spark_reads(spark: Any, node: NodeProcess) -> None:
    with pytest.raises(ValueError, match=r"option 'topic': the node at .* has no topic 'nope'"):
        plateau.spark.read_topic(spark, url=node.url, token=READ, topic="nope")
    with pytest.raises(ValueError, match="option 'columns': topic 't-arrow' has no column 'z'"):
        plateau.spark.read_topic(spark, url=node.url, token=READ, topic="t-arrow", columns="z")
    with pytest.raises(ValueError, match="option 'url': the node refused"):
        plateau.spark.read_topic(spark, url=node.url, token="wrong", topic="t-arrow")
    with pytest.raises(ValueError, match="not both"):
        plateau.spark.read_topic(spark, url=node.url, path="/tmp", topic="t-arrow")


def test_a_read_stopped_early_leaves_no_thread(spark: Any, node: NodeProcess) -> None:
    """Each task fetches its next page on a thread; ``limit`` stops tasks mid-slice.
    (pytest-timeout fails this test if a stop stalls.)"""
    for _ in range(20):
        df = jvm(spark, node, topic="big", **{"url.pageRows": "1000"})
        assert len(df.limit(3).collect()) == 3
    deadline = time.monotonic() + 10
    while ahead_threads(spark):
        assert time.monotonic() < deadline, f"{ahead_threads(spark)} fetch threads left"
        time.sleep(0.1)


def ahead_threads(spark: Any) -> int:
    threads = spark._jvm.java.lang.Thread.getAllStackTraces().keySet().toArray()
    return sum(1 for t in threads if t.getName() == "plateau-url-ahead")


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_data_deleted_after_planning(spark: Any, tmp_path: Path, fail_on_data_loss: str) -> None:
    node = NodeProcess(tmp_path / "data").start()
    try:
        with PlateauClient(node.url) as client:
            client.put_topic("loss", partitions=1, segment_max_rows=100, max_bytes=10_000_000)
            for start in range(0, 1001, 100):  # the last append seals [900, 1000)
                client.append("loss", "0", rows("0", start, min(start + 100, 1001)))
        df = plateau.spark.read_topic(
            spark, url=node.url, topic="loss", failOnDataLoss=fail_on_data_loss
        )
        with PlateauClient(node.url) as client:  # keeps about half of it
            client.put_topic("loss", max_bytes=client.topic("loss").bytes // 2)
            deadline = time.monotonic() + 30
            while (first := client.topic("loss").partitions["0"].start) == 0:
                assert time.monotonic() < deadline, "retention deleted nothing"
                time.sleep(0.05)
        if fail_on_data_loss == "true":
            with pytest.raises(Exception, match=rf"partition '0': indexes \[0, {first}\) were del"):
                df.collect()
        else:
            assert sorted(r["_index"] for r in df.collect()) == list(range(first, 1001))
    finally:
        node.stop()


def test_node_gone_mid_read_is_a_clear_error(spark: Any, tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data").start()
    try:
        with PlateauClient(node.url) as client:
            client.put_topic("t", partitions=1)
            client.append("t", "0", rows("0", 0, 10))
        df = plateau.spark.read_topic(spark, url=node.url, topic="t")
    finally:
        node.stop()
    with pytest.raises(Exception, match="cannot reach the plateau node"):
        df.collect()
