"""bench/archive.py's Spark measure: a topic's full history through
``plateau.spark.read_topic(archive=...)`` against ``spark.read.parquet`` of the same objects.

The topic is bench/archive.py's backlog: every segment sealed and archived, so the
history read through ``read_topic`` is exactly the archive's objects (planned from the
manifest, with the node asked for what the archive lacks: nothing), and
``spark.read.parquet`` reads the objects the manifest lists. Both run ``count`` and
``sum(time % 10^6 + length(value))`` (every data column read) in one ``local[2]`` session, in
alternating rounds, best of each.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import log
from testkit.s3server import ADMIN, REGION

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.9
PROVIDER = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"


def s3a_jars() -> Path:
    """Spark's S3A connector (hadoop-aws and the AWS SDK bundle), fetched and cached."""
    out = subprocess.run(
        [str(ROOT / "tools" / "fetch-s3a-jars")], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def session(endpoint: str, bucket: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    import plateau.spark

    s3a = f"spark.hadoop.fs.s3a.bucket.{bucket}."
    spark = (
        SparkSession.builder.master("local[2]").appName("plateau-bench-archive")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g").config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.jars", str(plateau.spark.jar_path()))
        .config("spark.driver.extraClassPath", f"{s3a_jars()}/*")
        .config(s3a + "endpoint", endpoint).config(s3a + "path.style.access", "true")
        .config(s3a + "connection.ssl.enabled", "false").config(s3a + "endpoint.region", REGION)
        .config(s3a + "access.key", ADMIN.access_key).config(s3a + "secret.key", ADMIN.secret_key)
        .config(s3a + "aws.credentials.provider", PROVIDER)
        .getOrCreate()
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    plateau.spark.register(spark)
    return spark


def scan(df: Any) -> tuple[int, int]:
    from pyspark.sql import functions as F

    # every column read: the bytes of ``value`` as well as ``time`` (mod 10^6: no overflow)
    total = F.sum(F.col("time") % 1_000_000 + F.length("value"))
    row = df.agg(F.count(F.lit(1)).alias("n"), total.alias("s")).collect()[0]
    return int(row["n"]), int(row["s"] or 0)


def measure(
    node_url: str, endpoint: str, bucket: str, prefix: str, topic: str, keys: list[str], rounds: int
) -> dict[str, Any]:
    """Seconds (best of ``rounds``) of both reads and their ratio (rows/s of read_topic over
    rows/s of spark.read.parquet)."""
    import plateau.spark

    spark = session(endpoint, bucket)
    try:
        archive = f"s3a://{bucket}/{prefix}"
        files = [f"{archive}/{k}" for k in keys]

        def through_plateau() -> tuple[int, int]:
            df = plateau.spark.read_topic(spark, url=node_url, topic=topic, archive=archive)
            return scan(df.select("time", "value"))

        def plain() -> tuple[int, int]:
            return scan(spark.read.parquet(*files).select("time", "value"))

        plain()  # JVM, S3A and the Python side warmed
        through_plateau()
        seconds: dict[str, list[float]] = {"read_topic": [], "spark_read_parquet": []}
        results: dict[str, tuple[int, int]] = {}
        for r in range(rounds):
            order = [("read_topic", through_plateau), ("spark_read_parquet", plain)]
            for name, run in order if r % 2 == 0 else order[::-1]:
                started = time.perf_counter()
                results[name] = run()
                seconds[name].append(time.perf_counter() - started)
                log(f"spark {name}: {seconds[name][-1]:.2f} s, (count, sum) {results[name]}")
        if results["read_topic"] != results["spark_read_parquet"]:
            raise RuntimeError(f"the reads disagree: {results}")
        best = {name: min(s) for name, s in seconds.items()}
        return {
            "rows": results["read_topic"][0],
            "objects": len(files),
            "read_topic_s": round(best["read_topic"], 2),
            "spark_read_parquet_s": round(best["spark_read_parquet"], 2),
            "runs_s": {name: [round(x, 2) for x in s] for name, s in seconds.items()},
            "ratio": round(best["spark_read_parquet"] / best["read_topic"], 3),
            "target": TARGET,
        }
    finally:
        spark.stop()
