"""``read_topic`` with ``path``: a ``parquet`` topic as a DataFrame on Spark's Parquet reader.

Why next to ``format("plateau")``: PySpark's Python data source gives a reader
no required columns, and every declared column crosses from Python into the
JVM; a full scan through it reached about a seventh of ``spark.read.parquet``.
Here the segment list still comes from ``snapshot.json`` (pruned by index and
time bounds), but Spark reads the files itself, with column pruning and
row-group skipping on the ``time`` filter. The meta columns are derived in
the JVM: ``_index`` is the file's first index (in its name) plus Parquet's
row index, ``_partition`` is the file's directory.

A file named by the snapshot and deleted by retention before Spark opens it
fails the query with Spark's own "file not found" (``failOnDataLoss=true``)
or is skipped (``false``, Spark's ``ignoreMissingFiles``); the Python data
source reports such a loss with the partition and the indexes instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from plateau.spark.archive_plan import ARCHIVED
from plateau.spark.merge import INDEX, PARTITION, TIME, TIME_COLUMN, topic_fields, wanted
from plateau.spark.options import OptionError, SourceOptions, parse
from plateau.spark.path_listing import VolumeListing, files_schema
from plateau.spark.plan import Slice, batch_ranges, chosen, plan
from plateau.spark.topic_frames import as_timestamp, frame_within_time

FILE = F.col("_metadata.file_path")
FIRST_INDEX = F.regexp_extract(FILE, r"/(\d+)-\d+\.parquet$", 1).cast("long")
# a volume's <partition>/<first>-<id>.parquet, an archive's partition=<p>/<first>-<last>.parquet
PARTITION_DIR = F.regexp_extract(FILE, r"/(?:partition=)?([^/]+)/\d+-\d+\.parquet$", 1)


def read_topic(spark: SparkSession, raw: Mapping[str, Any]) -> DataFrame:
    options = parse(raw)
    if not options.path:
        raise OptionError(
            "read_topic reads a data directory: option 'path' is needed "
            "(for a node's URL use spark.read.format('plateau'))"
        )
    listing = VolumeListing(options)
    ranges = batch_ranges(listing, options)
    pieces = plan(listing, ranges, options)
    only_parquet(options, {s.format or "" for s in pieces} | {listing.format})
    # the files read tell the columns: a range read opens a few footers, not every one
    read = [(s.file, s.format or "parquet") for s in pieces if s.file]
    data = files_schema(read) if read else listing.schema(sorted(chosen(listing.spans(), options)))
    return parquet_frame(spark, options, pieces, data)


def only_parquet(options: SourceOptions, formats: set[str]) -> None:
    other = sorted(formats - {"parquet", ARCHIVED})
    if other:
        raise OptionError(
            f"option 'topic': {options.topic!r} stores {other[0]} segments; read_topic "
            f"reads parquet segments only, use spark.read.format('plateau') for it"
        )


def parquet_frame(
    spark: SparkSession, options: SourceOptions, pieces: list[Slice], data: pa.Schema
) -> DataFrame:
    """The slices' files (a volume's segments, archived objects) read by Spark's Parquet
    reader, with the meta columns ``options`` asks for, ``data``'s columns."""
    columns = wanted(data, options)
    data_fields = topic_fields(data)
    files = sorted({s.file for s in pieces if s.file})
    if not files:
        return spark.createDataFrame([], from_arrow_schema(columns, prefer_timestamp_ntz=True))
    reader = spark.read.schema(from_arrow_schema(data_fields, prefer_timestamp_ntz=True))
    if not options.fail_on_data_loss:
        reader = reader.option("ignoreMissingFiles", "true")
    df = reader.parquet(*files)
    time_type = data_fields.field(TIME_COLUMN).type if TIME_COLUMN in data_fields.names else None
    # a file wholly inside the time bounds needs no row filter (nor its time column read);
    # snapshot.json has each file's time bounds
    bounded = not all(s.within(options.starting_ms, options.ending_ms) for s in pieces)
    if time_type is not None and bounded:
        df = frame_within_time(df, time_type, options.starting_ms, options.ending_ms)
    # Only the meta columns asked for: Spark keeps reading _metadata (and generating
    # Parquet row indexes) once the plan names it, even if a query then ignores the
    # column; that cost a fifth of a full scan's speed.
    meta: dict[str, Column] = {}
    if PARTITION in columns.names:
        meta[PARTITION] = PARTITION_DIR
    if INDEX in columns.names:
        meta[INDEX] = FIRST_INDEX + F.col("_metadata.row_index")
    if TIME in columns.names:
        meta[TIME] = as_timestamp(time_type)
    if meta:
        df = df.withColumns(meta)
    return _within_slices(df, pieces).select(*columns.names)


def _within_slices(df: DataFrame, pieces: list[Slice]) -> DataFrame:
    """Rows of files the index bounds cut, kept by their row index in the file.

    Why not a filter on ``_partition``/``_index``: those come from a regular
    expression over each row's file path, and filtering every row on them made
    a full scan 25 times slower than Spark's own. Whole files need no filter;
    the few a bound cuts are matched by name (unique: it holds the segment id).
    """
    cut = [s for s in pieces if s.file and (s.start > s.first_index or s.end < s.file_end)]
    if not cut:
        return df
    name, row = F.col("_metadata.file_name"), F.col("_metadata.row_index")
    path = F.col("_metadata.file_path")

    def same_file(s: Slice) -> Column:
        # an archived object's name repeats in every partition: its whole path is unique
        file = s.file or ""
        return path.eqNullSafe(file) if s.format == ARCHIVED else name.eqNullSafe(Path(file).name)

    local = [Path(s.file or "").name for s in cut if s.format != ARCHIVED]
    remote = [s.file for s in cut if s.format == ARCHIVED]
    keep = ~(name.isin(local) | path.isin(remote))
    for s in cut:
        keep = keep | (
            same_file(s) & (row >= s.start - s.first_index) & (row < s.end - s.first_index)
        )
    return df.where(keep)
