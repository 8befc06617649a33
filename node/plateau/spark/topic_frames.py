"""``read_topic``'s two paths (parquet files, JVM url reader): the DataFrame steps they share.

The meta column ``_time`` and the time bounds are Spark expressions over the stored
``time`` column (epoch ms, or a timestamp), so that Spark plans them with the scan.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from plateau.spark.merge import TIME_COLUMN


def as_timestamp(time_type: pa.DataType | None) -> Column:
    if time_type is None:
        return F.lit(None).cast("timestamp")
    if pa.types.is_timestamp(time_type):
        return F.col(TIME_COLUMN).cast("timestamp")
    return F.timestamp_millis(F.col(TIME_COLUMN))


def frame_within_time(
    df: DataFrame, time_type: pa.DataType, starting_ms: int | None, ending_ms: int | None
) -> DataFrame:
    """Filters on the stored ``time`` column itself, so that Parquet skips row groups.

    One SQL condition, not a ``Column`` expression: each ``Column`` operation is a
    round trip to the JVM, and those were a tenth of a small range read's time.
    """

    def literal(ms: int) -> str:
        return str(ms) if not pa.types.is_timestamp(time_type) else f"timestamp_millis({ms})"

    bounds = []
    if starting_ms is not None:
        bounds.append(f"`{TIME_COLUMN}` >= {literal(starting_ms)}")
    if ending_ms is not None:
        bounds.append(f"`{TIME_COLUMN}` < {literal(ending_ms)}")
    return df.where(" AND ".join(bounds)) if bounds else df
