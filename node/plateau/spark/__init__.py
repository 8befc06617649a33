"""Spark readers for plateau's data, and the map of their read paths to modules.

Install with the ``spark`` extra (``pip install plateau-k8s[spark]``). Two ways in:
``register(spark)`` then ``spark.read``/``spark.readStream.format("plateau")``
(a Python data source), or ``read_topic(spark, ...)`` (a batch DataFrame read
in the JVM, for full scans: a Python data source moves every declared column
through Python). Four read paths:

- path mode, ``format("plateau")`` with ``path``: a node's data directory
  (typically its volume mounted read-only), sealed segments found through its
  ``snapshot.json``: ``path_listing`` (the listing), ``path_reading`` (a
  task's segment files);
- url mode, ``format("plateau")`` with ``url``: the node's HTTP API, the open
  segment included: ``url_reading`` (listing, schema sample and a task's
  pages), ``url_prefetch`` (the next page fetched while Spark takes this one);
- the JVM url reader, ``read_topic`` with ``url``: Python plans, plateau's jar
  (``jvm/``; ``jar_path()`` for ``spark.jars``) reads the pages: ``url_jvm``,
  ``jar``;
- read_topic's parquet path, ``read_topic`` with ``path`` on a ``parquet``
  topic: Spark's own Parquet reader on the files ``snapshot.json`` names:
  ``topic_parquet``.

Shared: by both modes of ``format("plateau")``: ``source`` (the data source
and its batch reader), ``stream`` (the streaming reader), ``tasks`` (cutting a
read into Spark tasks, and running one), ``task_sizing`` (bytes a task moves),
``modes`` (path or url), ``pushdown`` (filters pushed into a batch read); by
both ``read_topic`` paths: ``topic_frames`` (DataFrame steps); by every path:
``options`` (the options, checked once), ``plan`` (partitions, index ranges,
slices), ``merge`` (the schema across segments, batches shaped to Spark's).
``kube/`` is not a reader: ``plateau spark-conf``'s settings for a job.

The option parsing, the listings and the segment reading import no PySpark,
so they are tested and reused without a JVM.
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
