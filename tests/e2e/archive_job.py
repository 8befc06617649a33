"""The archive e2e's Spark job: a topic's whole history, archive then node, in one read.

Mounted into the driver from a ConfigMap (tests/e2e/test_archive_e2e.py); the archive's
``s3a://`` root comes from ``$PLATEAU_ARCHIVE`` and S3A's settings and keys from
``plateau spark-conf``, as a user's job gets them. Prints one JSON line: rows, the sum of
a column, and each partition's first and last index with its row count, so that a
missed or doubled index shows.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import plateau.spark


def main(argv: list[str]) -> int:
    topic, url, column = argv
    spark = SparkSession.builder.appName("plateau-archive-e2e").getOrCreate()
    df = plateau.spark.read_topic(
        spark, topic=topic, url=url, archive=os.environ["PLATEAU_ARCHIVE"]
    )
    parts = (
        df.groupBy("_partition")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.countDistinct("_index").alias("distinct"),
            F.min("_index").alias("first"),
            F.max("_index").alias("last"),
            F.sum(column).alias("sum"),
        )
        .collect()
    )
    report = {
        "topic": topic,
        "rows": sum(int(p["rows"]) for p in parts),
        f"sum_{column}": sum(int(p["sum"] or 0) for p in parts),
        "partitions": {
            str(p["_partition"]): [
                int(p["first"]),
                int(p["last"]),
                int(p["rows"]),
                int(p["distinct"]),
            ]
            for p in parts
        },
    }
    print(json.dumps(report), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
