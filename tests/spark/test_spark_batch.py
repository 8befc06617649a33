"""Batch reads by Spark (real PySpark, local[2]) of data appended through a real node:
exact rows by partition, index range and time range, from the data directory and
from the node's URL, for parquet and arrow topics; and ``read_topic``'s DataFrame on
Spark's Parquet reader giving the same rows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import plateau.spark
from plateau.client import PlateauClient
from plateau.protocol.snapshot import SNAPSHOT_FILE, decode
from testkit.nodeproc import NodeProcess
from tests.spark.topics import STEP_MS, T0_MS, expected_time, fill, rows, value, wait_sealed

PARTS = ["0", "1", "2"]
SEALED, OPEN = 400, 50  # per partition: 4 sealed segments of 100 rows, 50 rows unsealed
BIG = 140_000
# Open segments stay open for the module's life: the tests count on the rows past
# the sealed ends being invisible on a volume (the default seals after 60 s).
HOUR = 3600


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(Path(tmp_path_factory.mktemp("spark-batch")) / "data").start()
    try:
        with PlateauClient(proc.url) as client:
            for fmt in ("parquet", "arrow"):
                fill(client, f"t-{fmt}", fmt, PARTS, SEALED, OPEN)
                wait_sealed(proc.data_dir, f"t-{fmt}", dict.fromkeys(PARTS, SEALED))
            # a schema that grows: "extra" from index 100 on
            client.put_topic(
                "grows", partitions=1, segment_max_rows=100, segment_max_age_seconds=HOUR
            )
            client.append("grows", "0", rows("0", 0, 100))
            for lo, hi in ((100, 200), (200, 210)):  # the last append seals [100, 200)
                extra = pa.array(["e"] * (hi - lo))
                client.append("grows", "0", rows("0", lo, hi).append_column("extra", extra))
            # a column whose type changes incompatibly
            client.put_topic(
                "clash", partitions=1, segment_max_rows=10, segment_max_age_seconds=HOUR
            )
            client.append("clash", "0", pa.table({"v": pa.array(range(10), pa.int64())}))
            client.append("clash", "0", pa.table({"v": pa.array([{"a": 1}] * 10)}))
            client.append("clash", "0", pa.table({"v": pa.array([{"a": 1}] * 10)}))
            # one segment of three Parquet row groups (65536 rows each), to skip by time
            client.put_topic(
                "big", partitions=1, segment_max_rows=BIG, segment_max_age_seconds=HOUR
            )
            client.append("big", "0", rows("0", 0, BIG))
            client.append("big", "0", rows("0", BIG, BIG + 1))
            wait_sealed(proc.data_dir, "big", {"0": BIG})
            wait_sealed(proc.data_dir, "grows", {"0": 200})
            wait_sealed(proc.data_dir, "clash", {"0": 20})
        yield proc
    finally:
        proc.stop()


def source(node: NodeProcess, mode: str) -> dict[str, str]:
    return {"path": str(node.data_dir)} if mode == "path" else {"url": node.url}


def load(spark: Any, **options: str) -> Any:
    return spark.read.format("plateau").options(**options).load()


def keyed(df: Any) -> dict[tuple[str, int], Any]:
    """Rows by (_partition, _index); asserts none appears twice."""
    out: dict[tuple[str, int], Any] = {}
    for row in df.collect():
        key = (row["_partition"], row["_index"])
        assert key not in out, f"{key} read twice"
        out[key] = row
    return out


def expect(ranges: dict[str, tuple[int, int]]) -> set[tuple[str, int]]:
    return {(p, i) for p, (lo, hi) in ranges.items() for i in range(lo, hi)}


MODES = [("parquet", "path"), ("parquet", "url"), ("arrow", "path"), ("arrow", "url")]


@pytest.mark.parametrize(("fmt", "mode"), MODES)
def test_whole_topic_exact(spark: Any, node: NodeProcess, fmt: str, mode: str) -> None:
    df = load(spark, topic=f"t-{fmt}", **source(node, mode))
    assert df.columns == ["v", "s", "x", "time", "_partition", "_index", "_time"]
    got = keyed(df)
    end = SEALED if mode == "path" else SEALED + OPEN  # the open segment: url mode only
    assert set(got) == expect(dict.fromkeys(PARTS, (0, end)))
    for (p, i), row in got.items():
        assert row["v"] == value(p, i)
        assert row["s"] == f"r{i}"
        assert row["x"] == i / 4
        assert row["time"] == T0_MS + i * STEP_MS
        # PySpark collects a timestamp as a naive datetime in the process's local time
        assert row["_time"] == expected_time(i).astimezone().replace(tzinfo=None)


@pytest.mark.parametrize(("fmt", "mode"), MODES)
def test_partitions_offsets_and_time(spark: Any, node: NodeProcess, fmt: str, mode: str) -> None:
    src = {"topic": f"t-{fmt}", **source(node, mode)}
    end = SEALED if mode == "path" else SEALED + OPEN
    got = keyed(load(spark, partitions="0,2", **src))
    assert set(got) == expect({"0": (0, end), "2": (0, end)})
    got = keyed(load(spark, partitions="regex:[12]", **src))
    assert set(got) == expect({"1": (0, end), "2": (0, end)})
    got = keyed(
        load(
            spark,
            startingOffsets=json.dumps({"0": 150, "1": -2}),
            endingOffsets=json.dumps({"0": 250, "1": 10, "2": -1}),
            **src,
        )
    )
    assert set(got) == expect({"0": (150, 250), "1": (0, 10), "2": (0, end)})
    got = keyed(load(spark, startingOffsets="latest", **src))
    assert got == {}
    # [start, end): RFC 3339 start inclusive, epoch-ms end exclusive
    start = expected_time(120).isoformat().replace("+00:00", "Z")
    got = keyed(
        load(spark, startingTimestamp=start, endingTimestamp=str(T0_MS + 130 * STEP_MS), **src)
    )
    assert set(got) == expect(dict.fromkeys(PARTS, (120, 130)))
    assert all(row["v"] == value(p, i) for (p, i), row in got.items())


@pytest.mark.parametrize(("fmt", "mode"), MODES)
def test_columns_declares_and_yields_only_those(
    spark: Any, node: NodeProcess, fmt: str, mode: str
) -> None:
    df = load(
        spark, topic=f"t-{fmt}", columns="_index,v,_partition", partitions="1", **source(node, mode)
    )
    assert df.columns == ["_index", "v", "_partition"]
    got = df.collect()
    assert sorted(r["_index"] for r in got) == list(
        range(SEALED if mode == "path" else SEALED + OPEN)
    )
    assert all(r["v"] == value("1", r["_index"]) for r in got)


def test_url_mode_data_focus(spark: Any, node: NodeProcess) -> None:
    df = load(spark, topic="t-arrow", url=node.url, dataset="v", partitions="0")
    assert [c for c in df.columns if not c.startswith("_")] == ["v", "time"]
    assert df.count() == SEALED + OPEN
    df = load(spark, topic="t-arrow", url=node.url, **{"dataset.exclude": "s,x"}, partitions="0")
    assert [c for c in df.columns if not c.startswith("_")] == ["v", "time"]


@pytest.mark.parametrize("mode", ["path", "url"])
def test_merged_schema(spark: Any, node: NodeProcess, mode: str) -> None:
    got = keyed(load(spark, topic="grows", **source(node, mode)))
    assert set(got) == expect({"0": (0, 200 if mode == "path" else 210)})
    assert all((row["extra"] is None) == (i < 100) for (_, i), row in got.items())
    # asking for a column older rows lack: url mode's projection falls back for those pages
    some = load(spark, topic="grows", columns="_partition,_index,extra", **source(node, mode))
    assert {(r["_partition"], r["_index"]): r["extra"] for r in some.collect()} == {
        k: row["extra"] for k, row in got.items()
    }


def test_incompatible_schemas_fail_at_load(spark: Any, node: NodeProcess) -> None:
    with pytest.raises(Exception, match=r"cannot be merged.*'v'"):
        load(spark, topic="clash", path=str(node.data_dir))


def test_read_topic_is_the_same_rows_on_sparks_parquet_reader(
    spark: Any, node: NodeProcess
) -> None:
    opts = {
        "path": str(node.data_dir),
        "topic": "t-parquet",
        "startingOffsets": json.dumps({"0": 150}),
        "endingOffsets": json.dumps({"0": 250, "1": 10}),
        "startingTimestamp": str(T0_MS + 5 * STEP_MS),
    }
    native = plateau.spark.read_topic(spark, **opts)
    assert "FileScan parquet" in native._jdf.queryExecution().executedPlan().toString()
    ours = load(spark, **opts)
    assert native.schema.simpleString() == ours.schema.simpleString()
    assert keyed(native) == keyed(ours)
    assert set(keyed(native)) == expect({"0": (150, 250), "1": (5, 10), "2": (5, SEALED)})
    whole = plateau.spark.read_topic(
        spark, path=str(node.data_dir), topic="grows", columns="extra,_index"
    )
    assert whole.columns == ["extra", "_index"]
    assert sorted(r["_index"] for r in whole.where("extra is null").collect()) == list(range(100))


def test_read_topic_refuses_arrow_topics(spark: Any, node: NodeProcess) -> None:
    with pytest.raises(ValueError, match="stores arrow segments"):
        plateau.spark.read_topic(spark, path=str(node.data_dir), topic="t-arrow")


BAD = [
    ({"path": "{data}", "topic": "nope"}, r"option 'topic': 'nope' is not on the node"),
    ({"url": "{url}", "topic": "nope"}, r"option 'topic': the node at .* has no topic 'nope'"),
    (
        {"path": "{data}", "topic": "t-parquet", "startingOffsets": "{bad"},
        r"option 'startingOffsets'.*not JSON",
    ),
    (
        {"path": "{data}", "topic": "t-parquet", "startingOffsets": '{"0": "x"}'},
        r"option 'startingOffsets'.*integer",
    ),
    ({"path": "{data}", "url": "{url}", "topic": "t-parquet"}, r"either option 'path'.*or 'url'"),
    ({"topic": "t-parquet"}, r"option 'path' .* or option 'url'"),
    ({"path": "{tmp}", "topic": "t-parquet"}, r"option 'path': .* is not a plateau data directory"),
    ({"path": "{data}", "topic": "t-parquet", "topik": "x"}, r"unknown option 'topik'"),
    ({"path": "{data}", "topic": "t-parquet", "columns": "v,nope"}, r"option 'columns'.*'nope'"),
    (
        {"path": "{data}", "topic": "t-parquet", "startingTimestamp": "yesterday"},
        r"option 'startingTimestamp'",
    ),
    ({"path": "{data}", "topic": "t-parquet", "partitions": "0,9"}, r"option 'partitions'.*'9'"),
    (
        {"path": "{data}", "topic": "t-parquet", "endingOffsets": '{"0": 100000}'},
        r"option 'endingOffsets'.*past",
    ),
    ({"url": "http://127.0.0.1:9", "topic": "t-parquet"}, r"option 'url': cannot reach"),
]


@pytest.mark.parametrize(("options", "message"), BAD)
def test_bad_options_fail_at_load(
    spark: Any, node: NodeProcess, tmp_path: Path, options: dict[str, str], message: str
) -> None:
    values = {"data": str(node.data_dir), "url": node.url, "tmp": str(tmp_path)}
    opts = {k: v.format(**values) if k in ("path", "url") else v for k, v in options.items()}
    reader = spark.read.format("plateau").options(**opts)
    with pytest.raises(Exception, match=message):
        reader.load()


def test_row_groups_skipped_by_time_keep_their_indexes(spark: Any, node: NodeProcess) -> None:
    """Rows after a skipped row group keep their true ``_index`` in both readers."""
    opts = {"path": str(node.data_dir), "topic": "big", "columns": "_index,v"}
    start = {"startingTimestamp": str(T0_MS + 100_000 * STEP_MS)}
    for df in (plateau.spark.read_topic(spark, **opts, **start), load(spark, **opts, **start)):
        got = df.collect()
        assert sorted(r["_index"] for r in got) == list(range(100_000, BIG))
        assert all(r["v"] == value("0", r["_index"]) for r in got)


def test_read_topic_filters_rows_only_in_files_the_time_bounds_cut(
    spark: Any, node: NodeProcess
) -> None:
    """snapshot.json has each file's time bounds: files wholly inside need no row filter."""
    opts = {"path": str(node.data_dir), "topic": "t-parquet", "columns": "_partition,_index"}

    def read(lo: int, hi: int) -> tuple[set[tuple[str, int]], str]:
        bounds = {"startingTimestamp": str(T0_MS + lo * STEP_MS),
                  "endingTimestamp": str(T0_MS + hi * STEP_MS)}  # fmt: skip
        df = plateau.spark.read_topic(spark, **opts, **bounds)
        return {(r[0], r[1]) for r in df.collect()}, plan(df)

    whole, plan_whole = read(100, 300)  # segments [100, 200) and [200, 300)
    assert whole == expect(dict.fromkeys(PARTS, (100, 300)))
    assert "DataFilters: []" in plan_whole and "time" not in plan_whole.split("ReadSchema")[1]
    cut, plan_cut = read(150, 300)
    assert cut == expect(dict.fromkeys(PARTS, (150, 300)))
    assert "DataFilters: []" not in plan_cut and "time" in plan_cut.split("ReadSchema")[1]


def plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_a_narrow_read_packs_more_segments_per_task(
    spark: Any, node: NodeProcess, fmt: str
) -> None:
    """bytesPerTask counts the bytes a read moves: one of four columns packs ~4x the segments."""
    parts = decode((node.data_dir / SNAPSHOT_FILE).read_bytes()).topics[f"t-{fmt}"].partitions
    smallest = min(seg.bytes for d in parts.values() for seg in d.segments)
    src = {"topic": f"t-{fmt}", "path": str(node.data_dir), "bytesPerTask": str(smallest)}
    assert load(spark, **src).rdd.getNumPartitions() == 12, "all columns: a task per segment"
    narrow = load(spark, **src, columns="v")
    assert narrow.rdd.getNumPartitions() <= 4
    got = sorted(r["v"] for r in narrow.collect())
    assert got == sorted(value(p, i) for p in PARTS for i in range(SEALED))


@pytest.mark.parametrize(("fmt", "mode"), MODES)
def test_where_on_meta_columns_prunes_the_read(
    spark: Any, node: NodeProcess, fmt: str, mode: str
) -> None:
    src = {"topic": f"t-{fmt}", "bytesPerTask": "1", "url.splitRows": "100", **source(node, mode)}
    df = load(spark, **src)
    everything = df.rdd.getNumPartitions()
    assert everything == 12 if mode == "path" else 15  # a task per segment / 100 indexes
    since = expected_time(120).replace(tzinfo=None)  # the session's zone is UTC
    narrowed = df.where(
        (df["_partition"] == "1") & (df["_index"] >= 100) & (df["_index"] < 150)
        & (df["_time"] >= since)
    )  # fmt: skip
    assert narrowed.rdd.getNumPartitions() == 1, "one segment's slice of one partition"
    got = keyed(narrowed)
    assert set(got) == expect({"1": (120, 150)})
    assert all(row["v"] == value(p, i) for (p, i), row in got.items())
    assert keyed(
        df.where(df["_partition"].isin("0", "2") & (df["time"] < T0_MS + 3 * STEP_MS))
    ) == {
        k: v
        for k, v in keyed(
            load(spark, **src, partitions="0,2", endingTimestamp=str(T0_MS + 3 * STEP_MS))
        ).items()
    }
