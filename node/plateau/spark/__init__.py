"""Spark readers for plateau's data, and the map of their read paths to modules.

Install with the ``spark`` extra (``pip install plateau-k8s[spark]``). Two ways in:
``register(spark)`` then ``spark.read``/``spark.readStream.format("plateau")``
(a Python data source), or ``read_topic(spark, ...)`` (a batch DataFrame read
in the JVM, for full scans: a Python data source moves every declared column
through Python); ``read_stream(spark, ...)`` is ``readStream.format("plateau")``
with the archive's S3 settings filled in. Four read paths, each of which may
have the topic's object-storage archive before it (option ``archive``):

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

With ``archive``: ``archive_plan`` cuts the history into archived segments and
the node's part (each index from one side); ``read_topic`` reads the archived
objects with Spark's Parquet reader through S3A (``archive_frames``),
``format("plateau")`` and streams with pyarrow's S3 client
(``archive_reading``).

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

__all__ = ["JAR", "jar_path", "read_stream", "read_topic", "register"]


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
    if any(str(k).lower() == "archive" and v is not None for k, v in options.items()):
        from plateau.spark.archive_frames import read_with_archive

        return read_with_archive(spark, options)
    if options.get("url") is not None and options.get("path") is None:
        from plateau.spark.url_jvm import read_url

        return read_url(spark, options)
    from plateau.spark.topic_parquet import read_topic as read

    return read(spark, options)


def read_stream(spark: SparkSession, **options: Any) -> DataFrame:
    """``spark.readStream.format("plateau")`` with ``options``, and with ``archive``: the
    archive's S3 settings taken from the session's S3A settings (``fs.s3a.*``).

    Why a function: the stream reader runs in Python workers, which cannot see the
    session's Hadoop settings; this passes them as options on the driver
    (``plateau.spark.archive_reading``). ``startingOffsets: earliest`` then begins at the
    archive's first index and goes on at the node.
    """
    from plateau.spark.options import parse

    register(spark)
    given = {k: v for k, v in options.items() if v is not None}
    parsed = parse(given)
    if parsed.archive is not None:
        from plateau.spark.archive_frames import python_settings

        given.update(python_settings(spark, parsed))
    return spark.readStream.format("plateau").options(**given).load()
