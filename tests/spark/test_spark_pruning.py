"""Spark skips the row groups of a sealed Parquet segment that a filter on a data column
rules out, also on a text column that the node writes without statistics (it has a
dictionary: sealed_writer.statistics_columns). Real PySpark on Spark's own Parquet
reader (``read_topic``); the scan's ``number of output rows`` counts the rows of the
row groups it read, before Spark's own row filter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import plateau.spark
from plateau.client import PlateauClient
from plateau.storage.data.sealed_writer import PARQUET_ROW_GROUP
from testkit.nodeproc import NodeProcess
from tests.spark.topics import T0_MS, wait_sealed

GROUPS = 3
ROWS = GROUPS * PARQUET_ROW_GROUP
RARE = range(PARQUET_ROW_GROUP + 100, PARQUET_ROW_GROUP + 200)  # inside the second row group
REGIONS = ["eu-west-1", "us-east-1", "ap-south-1"]


def region(i: int) -> str:
    return "zz-rare-1" if i in RARE else REGIONS[i % 3]


def table(lo: int, hi: int) -> pa.Table:
    return pa.table(
        {
            "time": pa.array([T0_MS + i for i in range(lo, hi)], pa.int64()),
            "region": pa.array([region(i) for i in range(lo, hi)]),
            "n": pa.array(range(lo, hi), pa.int64()),
        }
    )


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(Path(tmp_path_factory.mktemp("spark-pruning")) / "data").start()
    try:
        with PlateauClient(proc.url) as client:
            client.put_topic(
                "logs", partitions=1, segment_format="parquet", segment_max_rows=ROWS,
                segment_max_age_seconds=3600,
            )  # fmt: skip
            for lo in range(0, ROWS, 20_000):
                client.append("logs", "0", table(lo, min(lo + 20_000, ROWS)))
            client.append("logs", "0", table(ROWS, ROWS + 1))  # seals the first ROWS
            wait_sealed(proc.data_dir, "logs", {"0": ROWS})
        yield proc
    finally:
        proc.stop()


def scanned_rows(df: Any) -> tuple[list[int], int]:
    """The ``n`` of the rows ``df`` returns, and how many rows its Parquet scan read."""
    got = sorted(r["n"] for r in df.collect())
    plan = df._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()  # a Scala Seq
    scans = [
        leaf
        for leaf in (leaves.apply(i) for i in range(leaves.length()))
        if "FileSourceScanExec" in leaf.getClass().getName()
    ]
    assert len(scans) == 1, plan.toString()
    return got, int(scans[0].metrics().get("numOutputRows").get().value())


@pytest.fixture
def no_adaptive(spark: Any) -> Iterator[None]:
    """Without AQE the executed plan is the scan itself, whose metrics can be read."""
    before = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    yield
    spark.conf.set("spark.sql.adaptive.enabled", before)


def test_the_segment_has_no_statistics_for_the_dictionary_column(node: NodeProcess) -> None:
    (sealed,) = (node.data_dir / "topics" / "logs" / "0").glob("*.parquet")
    meta = pq.read_metadata(sealed)
    assert meta.num_row_groups == GROUPS
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    region = meta.row_group(0).column(names.index("region"))
    assert "RLE_DICTIONARY" in region.encodings and not region.is_stats_set
    assert meta.row_group(0).column(names.index("n")).is_stats_set


@pytest.mark.parametrize(
    "condition", ["region = 'zz-rare-1'", "region >= 'zz'", "region IN ('zz-rare-1', 'nowhere')"]
)
def test_a_filter_on_a_dictionary_column_reads_one_row_group(
    spark: Any, node: NodeProcess, no_adaptive: None, condition: str
) -> None:
    df = plateau.spark.read_topic(spark, path=str(node.data_dir), topic="logs").where(condition)
    got, scanned = scanned_rows(df)
    assert got == list(RARE)
    assert scanned == PARQUET_ROW_GROUP, f"read {scanned} rows: the dictionary pruned nothing"


def test_a_filter_that_matches_everywhere_reads_every_row_group(
    spark: Any, node: NodeProcess, no_adaptive: None
) -> None:
    """The other side: the scan's count is the row groups read, not the rows kept."""
    df = plateau.spark.read_topic(spark, path=str(node.data_dir), topic="logs")
    got, scanned = scanned_rows(df.where("region = 'us-east-1'"))
    assert len(got) == sum(1 for i in range(ROWS) if i % 3 == 1 and i not in RARE)
    assert scanned == ROWS
