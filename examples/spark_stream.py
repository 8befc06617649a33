"""A Spark streaming job over a plateau topic: running totals, stopped when ingest stops.

Reads the node's URL with ``spark.readStream.format("plateau")`` (the read token
from ``$PLATEAU_TOKEN``, as ``plateau spark-conf --mode url`` sets it) and adds
up each micro-batch's row count and the sum of a column. Once rows have arrived
and none came for ``--idle`` seconds it stops and prints one JSON line of totals,
which equal what the producer was acknowledged. Runs in the Spark image in one pod
(``local[1]``; examples/jobs/spark-stream.yaml) or anywhere PySpark is:

    PLATEAU_TOKEN=... spark-submit --master 'local[1]' examples/spark_stream.py \\
        --url http://127.0.0.1:3030 --topic inference_logs --column latency_ms
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import plateau.spark


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the node's HTTP address")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--column", required=True, help="a numeric column to add up")
    parser.add_argument("--idle", type=float, default=20, help="seconds without rows to stop")
    parser.add_argument("--max-seconds", type=float, default=1800, help="stop after this long")
    parser.add_argument("--trigger", default="2 seconds", help="micro-batch interval")
    parser.add_argument("--checkpoint", help="checkpoint directory (default: a temporary one)")
    args = parser.parse_args(argv)

    spark = SparkSession.builder.appName(f"plateau-stream-{args.topic}").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    plateau.spark.register(spark)
    totals: dict[str, Any] = {"rows": 0, "sum": 0, "batches": 0}
    last_rows = time.monotonic()

    def add(batch: DataFrame, batch_id: int) -> None:
        nonlocal last_rows
        row = batch.agg(F.count(F.lit(1)).alias("n"), F.sum(args.column).alias("s")).first()
        n = int(row["n"]) if row else 0
        totals["batches"] += 1
        if n:
            totals["rows"] += n
            totals["sum"] += int(row["s"] or 0) if row else 0
            last_rows = time.monotonic()
            print(json.dumps({"batch": batch_id, "rows": n, "total_rows": totals["rows"]}))

    stream = (
        spark.readStream.format("plateau")
        .option("url", args.url)
        .option("topic", args.topic)
        .option("columns", args.column)
        .option("maxRecordsPerTrigger", 200000)
        .load()
    )
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="plateau-stream-")
    query = (
        stream.writeStream.foreachBatch(add)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=args.trigger)
        .start()
    )
    t0 = time.monotonic()
    while query.isActive:
        now = time.monotonic()
        if totals["rows"] and now - last_rows > args.idle:
            break
        if now - t0 > args.max_seconds:
            break
        time.sleep(1)
    query.stop()
    if query.exception():
        print(f"the stream failed: {query.exception()}", file=sys.stderr)
        return 1
    report = {"topic": args.topic, "rows": totals["rows"], f"sum_{args.column}": totals["sum"]}
    print(json.dumps({**report, "batches": totals["batches"], "seconds": round(now - t0, 1)}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
