"""``read_topic`` with ``url``: the JVM url reader, pages read by plateau's jar (``jvm/``).

Why next to ``format("plateau")``'s url mode: PySpark gives a Python reader no
required columns and turns every batch it yields into rows of every declared
column, which cost more CPU per row than the node spent serving it. The JVM
reader hands the node's Arrow buffers to Spark as column vectors, reads only the
columns a query needs, and no record passes through a Python worker.

Python still plans the read, with the same code as ``format("plateau")``: the
options, the partitions and offsets (``startingOffsets`` ...), the schema
sampled from the node, the slices. The JVM reader gets the plan as options and
only executes it (cutting slices to a query's filters on ``_partition`` and
``_index``, as ``pushdown.py`` does), so the two readers cannot disagree on
what a read means.
``_time`` and the time bounds are Spark expressions over ``time``.

The JVM reader hands Arrow columns over as they are, and converts the few top-level
types Spark cannot read from Arrow (timestamps of other units, unsigned integers,
half floats, millisecond dates, fixed-size binaries). Other topics (dictionaries,
such types nested in a struct or list, a column whose type changed between the
sampled pages) and a session without plateau's jar read through
``format("plateau")`` instead, with a warning saying why: same rows, slower.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from plateau.spark.jar import JAR
from plateau.spark.merge import (
    INDEX,
    META_ARROW,
    PARTITION,
    TIME,
    TIME_COLUMN,
    SchemaConflict,
    merge_schemas,
    topic_fields,
    wanted,
)
from plateau.spark.options import OptionError, SourceOptions, parse
from plateau.spark.plan import Slice, batch_ranges, chosen, plan, tasks
from plateau.spark.topic_frames import as_timestamp, frame_within_time
from plateau.spark.url_reading import RemoteListing, focus

log = logging.getLogger(__name__)

SOURCE = "io.plateau.spark.UrlSource"

# Arrow types Spark's ArrowColumnVector reads as they are (nested ones: of these).
_PLAIN = (
    pa.bool_(),
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.float32(),
    pa.float64(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.large_binary(),
    pa.date32(),
    pa.null(),
)


def on_classpath(spark: SparkSession) -> bool:
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: the reader cannot be checked from here
        return False
    try:
        jvm.org.apache.spark.util.Utils.classForName(SOURCE, True, False)
    except Exception:
        return False
    return True


def passes_through(dtype: pa.DataType) -> bool:
    """Whether Spark reads ``dtype`` from Arrow as it is (no conversion by anyone)."""
    if dtype in _PLAIN or pa.types.is_decimal128(dtype):
        return True
    if pa.types.is_timestamp(dtype):
        return bool(dtype.unit == "us")
    if pa.types.is_struct(dtype):
        return all(passes_through(f.type) for f in dtype.fields)
    if pa.types.is_list(dtype):
        return passes_through(dtype.value_type)
    if pa.types.is_map(dtype):
        return passes_through(dtype.key_type) and passes_through(dtype.item_type)
    return False


def converted(dtype: pa.DataType) -> bool:
    """Whether the JVM reader converts a top-level column of ``dtype`` (``Converted.java``)."""
    return (
        pa.types.is_timestamp(dtype)
        or pa.types.is_fixed_size_binary(dtype)
        or dtype in (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(), pa.float16(), pa.date64())
    )


def why_not(data: pa.Schema, samples: Sequence[pa.Schema]) -> str | None:
    """Why the JVM reader cannot take this topic's columns (None: it can)."""
    for field in data:
        if not (converted(field.type) or passes_through(field.type)):
            return f"column {field.name!r} is {field.type}, which Spark converts only in Python"
    for sample in samples:
        for field in sample:
            if field.type != data.field(field.name).type:
                return (
                    f"column {field.name!r} is {field.type} in some rows and "
                    f"{data.field(field.name).type} in others"
                )
    return None


def read_url(spark: SparkSession, raw: Mapping[str, Any]) -> DataFrame:
    options = parse(raw)
    assert options.url is not None
    listing = RemoteListing(options)
    pieces = plan(listing, batch_ranges(listing, options), options)
    samples = listing.samples(sorted(chosen(listing.spans(), options)))
    try:
        data = merge_schemas(samples)
    except SchemaConflict as e:
        raise OptionError(str(e)) from None
    wanted(data, options)  # an unknown column fails here, naming the option
    why = refused(spark, data, samples)
    if why is not None:
        return python_read(spark, raw, options, why)
    return url_frame(spark, options, pieces, data)


def refused(spark: SparkSession, data: pa.Schema, samples: Sequence[pa.Schema]) -> str | None:
    """Why this read cannot go through the JVM reader (None: it can)."""
    why = why_not(data, samples)
    if why is None and not on_classpath(spark):
        why = f"plateau's jar is not on the session's classpath (spark.jars={JAR})"
    return why


def python_read(
    spark: SparkSession, raw: Mapping[str, Any], options: SourceOptions, why: str
) -> DataFrame:
    """The same read through ``format("plateau")``: same rows, slower."""
    log.warning("read_topic over %s: %s; reading through format('plateau')", options.url, why)
    given = {k: v for k, v in raw.items() if v is not None}
    if options.token:
        # as resolved here: $PLATEAU_TOKEN is this process's, and format("plateau")
        # plans in a Python worker that has the JVM's environment, not this one's
        given["token"] = options.token
    return spark.read.format("plateau").options(**given).load()


def url_frame(
    spark: SparkSession, options: SourceOptions, pieces: Sequence[Slice], data: pa.Schema
) -> DataFrame:
    """The url slices ``pieces`` read by the JVM reader, as ``data``'s columns."""
    columns = wanted(data, options)
    fields = topic_fields(data)
    table = pa.schema([*fields, META_ARROW.field(PARTITION), META_ARROW.field(INDEX)])
    df = (
        spark.read.format(SOURCE)
        .schema(from_arrow_schema(table, prefer_timestamp_ntz=True))
        .options(**plan_options(options, fields.names, pieces))
        .load()
    )
    time_type = data.field(TIME_COLUMN).type if TIME_COLUMN in data.names else None
    if time_type is not None:
        df = frame_within_time(df, time_type, options.starting_ms, options.ending_ms)
    if TIME in columns.names:
        df = df.withColumn(TIME, as_timestamp(time_type))
    return df.select(*columns.names)


def plan_options(
    options: SourceOptions, columns: list[str], pieces: Sequence[Slice]
) -> dict[str, str]:
    """The plan as the JVM reader's options (``ReadSpec.java`` reads them)."""
    user = focus(options)
    out = {
        "url": options.url or "",
        "topic": options.topic,
        "url.pageRows": str(options.url_page_rows),
        "failOnDataLoss": "true" if options.fail_on_data_loss else "false",
        "dataset": json.dumps(list(user.dataset) if user else []),
        "dataset.exclude": json.dumps(list(user.exclude) if user else []),
        "plateau.tasks": json.dumps(
            [[[s.partition, s.start, s.end] for s in task] for task in tasks(pieces, 1)]
        ),
        "plateau.dataColumns": str(len(columns)),
    }
    if options.token:
        out["token"] = options.token
    count = TIME_COLUMN if TIME_COLUMN in columns else (columns[0] if columns else None)
    if count is not None:
        out["plateau.countColumn"] = count
    return out
