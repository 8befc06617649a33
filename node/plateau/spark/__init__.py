"""Spark readers for plateau's data: ``spark.read``/``readStream.format("plateau")``.

Install with the ``spark`` extra (``pip install plateau-k8s[spark]``). Two ways in:

- ``register(spark)`` then ``spark.read.format("plateau")`` (batch) or
  ``spark.readStream.format("plateau")`` (streaming): a Python data source that
  reads a node's data directory (``path``, typically its volume mounted
  read-only) or a node's HTTP API (``url``);
- ``read_topic(spark, path=..., topic=...)``: a batch DataFrame of a ``parquet``
  topic built on Spark's own Parquet reader, for full scans (column pruning and
  predicate pushdown happen in the JVM; a Python data source moves every
  declared column through Python); ``read_topic(spark, url=..., topic=...)``:
  a batch DataFrame of a node's topic read by plateau's JVM reader (its jar on
  ``spark.jars``: ``jar_path()``), for the same reason.

The option parsing, the volume's listing and the segment reading import no
PySpark, so they are tested and reused without a JVM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from plateau.spark.jar import JAR, jar_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["JAR", "jar_path", "read_topic", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("plateau")`` known to ``spark`` (batch and streaming).

    Also turns on ``spark.sql.python.filterPushdown.enabled``: the reader takes
    pushed filters (``plateau.spark.pushdown``), and PySpark refuses a reader
    that implements ``pushFilters`` while that setting is off. Readers that do
    not implement it are unaffected (they keep every filter).
    """
    from plateau.spark.source import PlateauDataSource

    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(PlateauDataSource)


def read_topic(spark: SparkSession, **options: Any) -> DataFrame:
    """A topic as a batch DataFrame read in the JVM, for full scans.

    Takes the options of ``format("plateau")`` as keyword arguments (``path`` or
    ``url``, ``topic``, ``partitions``, ``startingOffsets``, ...). With ``path``:
    a ``parquet`` topic through Spark's Parquet reader (``plateau.spark.topic_parquet``);
    with ``url``: plateau's JVM reader (``plateau.spark.url_jvm``).
    """
    if options.get("url") is not None and options.get("path") is None:
        from plateau.spark.url_jvm import read_url

        return read_url(spark, options)
    from plateau.spark.topic_parquet import read_topic as read

    return read(spark, options)
