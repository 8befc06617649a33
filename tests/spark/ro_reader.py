"""Reads a topic with Spark from a read-only mount; run by test_spark_readonly in a
private mount namespace. One JSON line per read on stdout.

    python ro_reader.py consistency DIR TOPIC... --reads N
    python ro_reader.py gated DIR TOPIC GATE_DIR FAIL_ON_DATA_LOSS
"""

from __future__ import annotations

import errno
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from tests.spark.conftest import start_session  # noqa: E402
from tests.spark.topics import value  # noqa: E402


def session(cores: int) -> SparkSession:
    spark: SparkSession = start_session(cores, "plateau-ro")
    return spark


def check(rows: list[tuple[str, int, int]]) -> dict[str, list[list[int]]]:
    """Per partition the runs of indexes read, ``[first, last]``; raises on a duplicate or
    a wrong value (a half-written or misplaced row)."""
    by_part: dict[str, list[int]] = {}
    for p, i, v in rows:
        if v != value(p, i):
            raise AssertionError(f"partition {p} index {i}: value {v}, expected {value(p, i)}")
        by_part.setdefault(p, []).append(i)
    out: dict[str, list[list[int]]] = {}
    for p, idx in sorted(by_part.items()):
        idx.sort()
        if len(set(idx)) != len(idx):
            raise AssertionError(f"partition {p}: an index read twice")
        runs = [[idx[0], idx[0]]]
        for i in idx[1:]:
            if i == runs[-1][1] + 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        out[p] = runs
    return out


def proves_read_only(root: Path) -> bool:
    try:
        (root / "written-by-reader").write_text("x")
    except OSError as e:
        return e.errno == errno.EROFS
    return False


def consistency(root: Path, topics: list[str], reads: int) -> None:
    spark = session(2)
    print(json.dumps({"read_only": proves_read_only(root)}), flush=True)
    for n in range(reads):
        for topic in topics:
            # retention runs throughout: a segment deleted between the plan and its task is
            # skipped (the oldest ones go, so what remains is still one run per partition)
            df = (
                spark.read.format("plateau")
                .options(path=str(root), topic=topic, failOnDataLoss="false")
                .load()
            )
            got = [(r[0], r[1], r[2]) for r in df.select("_partition", "_index", "v").collect()]
            print(
                json.dumps({"read": n, "topic": topic, "rows": len(got), "ranges": check(got)}),
                flush=True,
            )
        time.sleep(1.0)  # the node appends, seals and deletes meanwhile
    spark.stop()


def gated(root: Path, topic: str, gate: Path, fail_on_data_loss: str) -> None:
    """The first task stops on its first batch until the test has had retention run."""
    spark = session(1)

    def hold(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if not (gate / "started").exists():
                (gate / "started").touch()
                deadline = time.monotonic() + 120
                while not (gate / "go").exists() and time.monotonic() < deadline:
                    time.sleep(0.05)
            yield batch

    df = (
        spark.read.format("plateau")
        # a task per segment: the first task holds while the later ones are yet to start
        .options(path=str(root), topic=topic, failOnDataLoss=fail_on_data_loss, bytesPerTask=1)
        .load()
        .select("_partition", "_index", "v")
    )
    try:
        got = [(r[0], r[1], r[2]) for r in df.mapInArrow(hold, df.schema).collect()]
        print(json.dumps({"rows": len(got), "ranges": check(got)}), flush=True)
    except Exception as e:  # the error a user sees, for the test to check
        print(json.dumps({"error": str(e)[:4000]}), flush=True)
    spark.stop()


if __name__ == "__main__":
    what, root = sys.argv[1], Path(sys.argv[2])
    if what == "consistency":
        consistency(root, sys.argv[3:-2], int(sys.argv[-1]))
    else:
        gated(root, sys.argv[3], Path(sys.argv[4]), sys.argv[5])
