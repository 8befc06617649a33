"""A Spark job over a plateau topic: hourly row counts and the mean of a column.

Runs the same way locally and on Kubernetes:

    # locally, on a node's data directory (or --url http://127.0.0.1:3030; --jars
    # puts plateau's JVM reader on the classpath, which url reads go through)
    spark-submit --jars "$(python -c 'import plateau.spark; print(plateau.spark.jar_path())')" \
        examples/spark_job.py --path ./data --topic inference_logs \
        --column latency_ms --out ./hourly

    # on Kubernetes, with the node's volume mounted read-only (plateau spark-conf
    # prints the --conf lines and the pod template that place the pods next to it)
    spark-submit --master k8s://https://KUBE_API --deploy-mode cluster \
        --conf spark.kubernetes.container.image=localhost/plateau-spark:dev \
        $(plateau spark-conf --node plateau-a --namespace ml) \
        local:///opt/plateau/examples/spark_job.py --path /plateau/data \
        --topic inference_logs --column latency_ms --out /tmp/hourly

With ``--archive`` it reads the topic's whole history: what the node's object-storage
archive holds, then what only the node has, each row once (``read_topic(archive=...)``;
S3A's settings and keys and ``$PLATEAU_ARCHIVE`` come from ``plateau spark-conf`` for a
node with ``spec.archive``).

A ``parquet`` topic read from a volume goes through ``read_topic`` (Spark's own
Parquet reader), a node's URL through ``read_topic`` too (plateau's JVM reader;
the Spark image has it on the classpath), an ``arrow`` topic on a volume through
``format("plateau")``; each asks only for the columns the aggregate needs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import plateau.spark

ARCHIVE_ENV = "PLATEAU_ARCHIVE"  # s3a://bucket/prefix: plateau spark-conf sets it in the driver


def read(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    options = {"topic": args.topic}
    if args.path:
        options["path"] = args.path
    else:
        options["url"] = args.url
    for name in ("startingTimestamp", "endingTimestamp"):
        if getattr(args, name):
            options[name] = getattr(args, name)
    columns = ["_time", *([args.column] if args.column else [])]
    if args.archive:
        options["archive"] = args.archive
    if args.url or args.format == "parquet" or args.archive:
        return plateau.spark.read_topic(spark, columns=",".join(columns), **options)
    return spark.read.format("plateau").options(columns=",".join(columns), **options).load()


def aggregate(df: DataFrame, column: str | None) -> DataFrame:
    measures = [F.count(F.lit(1)).alias("rows")]
    if column:
        measures.append(F.avg(column).alias(f"mean_{column}"))
        measures.append(F.sum(column).alias(f"sum_{column}"))
    return df.groupBy(F.date_trunc("hour", "_time").alias("hour")).agg(*measures).orderBy("hour")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--path", help="the node's data directory (a read-only mount is enough)")
    source.add_argument("--url", help="the node's HTTP address")
    parser.add_argument("--topic", required=True)
    parser.add_argument(
        "--format",
        choices=["parquet", "arrow"],
        default="parquet",
        help="the topic's segment format (parquet reads go through read_topic)",
    )
    parser.add_argument("--column", help="a numeric column to average per hour")
    parser.add_argument("--startingTimestamp")
    parser.add_argument("--endingTimestamp")
    parser.add_argument("--out", help="write the aggregate here as Parquet (else print it)")
    parser.add_argument(
        "--print-sum",
        action="store_true",
        help="the report line also gives the column's total (sum_COLUMN), to check against "
        "what a producer was acknowledged",
    )
    parser.add_argument(
        "--archive",
        nargs="?",
        const=os.environ.get(ARCHIVE_ENV, ""),
        help="read the whole history: the node's archive (s3a://bucket/prefix; without a "
        f"value ${ARCHIVE_ENV}, which plateau spark-conf sets for a node with an archive), "
        "then the node",
    )
    args = parser.parse_args(argv)
    if args.archive == "":
        parser.error(f"--archive without a value needs ${ARCHIVE_ENV} (plateau spark-conf)")

    spark = SparkSession.builder.appName(f"plateau-hourly-{args.topic}").getOrCreate()
    plateau.spark.register(spark)
    hourly = aggregate(read(spark, args), args.column)
    if args.out:
        hourly.write.mode("overwrite").parquet(args.out)
    rows = [r.asDict() for r in hourly.collect()]
    report = {"topic": args.topic, "hours": len(rows), "rows": sum(r["rows"] for r in rows)}
    if args.print_sum and args.column:
        report[f"sum_{args.column}"] = sum(r[f"sum_{args.column}"] or 0 for r in rows)
    print(json.dumps(report))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
