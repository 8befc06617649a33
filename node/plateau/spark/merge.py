"""Every read path's schema: merged across segments, made Spark-readable, batches shaped to it.

A topic's schema may change between segments (each segment has exactly one).
A reader declares one schema for the whole read: Arrow's permissive merge of
them all (a column added later is null in older rows; int32 widens to
int64), or a clear error naming the column when no type holds both.

Spark accepts a Python reader's Arrow batches only when they match its own
Arrow form of the declared schema exactly (types, units, list field names),
so every batch is cast to that form (``conform``) just before it is yielded.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from plateau.spark.options import OptionError, SourceOptions

PARTITION = "_partition"
INDEX = "_index"
TIME = "_time"
META = (PARTITION, INDEX, TIME)
TIME_COLUMN = "time"
META_ARROW = pa.schema(
    [
        pa.field(PARTITION, pa.string(), nullable=False),
        pa.field(INDEX, pa.int64(), nullable=False),
        pa.field(TIME, pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


class SchemaConflict(ValueError):
    """Segments hold a column in types no single type can hold."""


def merge_schemas(schemas: Sequence[pa.Schema]) -> pa.Schema:
    plain = [s.remove_metadata() for s in schemas]
    try:
        return pa.unify_schemas(plain, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        types: dict[str, set[str]] = {}
        for s in plain:
            for f in s:
                types.setdefault(f.name, set()).add(str(f.type))
        clashes = {name: sorted(ts) for name, ts in types.items() if len(ts) > 1}
        raise SchemaConflict(
            f"the topic's segments disagree on column types that cannot be merged: "
            f"{clashes or e}; read a range of one schema (startingOffsets/endingOffsets) "
            f"or give the schema with .schema(...)"
        ) from None


def spark_type(dtype: pa.DataType, column: str) -> pa.DataType:
    """The nearest type Spark can hold (it has no unsigned integers, no half floats)."""
    if pa.types.is_dictionary(dtype):
        return spark_type(dtype.value_type, column)
    replacements = {
        pa.uint8(): pa.int16(),
        pa.uint16(): pa.int32(),
        pa.uint32(): pa.int64(),
        pa.uint64(): pa.decimal128(20, 0),
        pa.float16(): pa.float32(),
        pa.date64(): pa.date32(),
    }
    if dtype in replacements:
        return replacements[dtype]
    if pa.types.is_union(dtype):
        raise SchemaConflict(f"column {column!r}: Spark cannot hold union type {dtype}")
    if pa.types.is_struct(dtype):
        return pa.struct(
            [f.with_type(spark_type(f.type, f"{column}.{f.name}")) for f in dtype.fields]
        )
    if pa.types.is_map(dtype):
        return pa.map_(
            spark_type(dtype.key_type, column),
            dtype.item_field.with_type(spark_type(dtype.item_type, column)),
        )
    if (
        pa.types.is_list(dtype)
        or pa.types.is_large_list(dtype)
        or pa.types.is_fixed_size_list(dtype)
    ):
        return pa.list_(dtype.value_field.with_type(spark_type(dtype.value_type, column)))
    return dtype


def topic_fields(data: pa.Schema) -> pa.Schema:
    """The topic's own columns, Spark-typed, without the meta columns."""
    return pa.schema([f.with_type(spark_type(f.type, f.name)) for f in data if f.name not in META])


def declared(data: pa.Schema, columns: Sequence[str] | None) -> pa.Schema:
    """The topic's columns (Spark-typed) and the meta columns, or just ``columns`` of them."""
    everything = pa.schema([*topic_fields(data), *META_ARROW])
    if columns is None:
        return everything
    missing = [c for c in columns if c not in everything.names]
    if missing:
        raise KeyError(missing[0])
    return pa.schema([everything.field(c) for c in columns])


def wanted(data: pa.Schema, options: SourceOptions) -> pa.Schema:
    """``declared`` for option ``columns``: an unknown column is an error naming the option."""
    try:
        return declared(data, options.columns)
    except KeyError as e:
        raise OptionError(
            f"option 'columns': topic {options.topic!r} has no column {e.args[0]!r} "
            f"(it has {declared(data, None).names})"
        ) from None


def file_columns(target: pa.Schema, file_schema: pa.Schema, filtering_time: bool) -> list[str]:
    """The file's columns a read needs: the declared ones, and ``time`` for ``_time``/bounds."""
    names = [n for n in target.names if n not in META and n in file_schema.names]
    needs_time = filtering_time or TIME in target.names
    if needs_time and TIME_COLUMN in file_schema.names and TIME_COLUMN not in names:
        names.append(TIME_COLUMN)
    return names


def time_ms(column: pa.ChunkedArray | pa.Array) -> pa.Array | pa.ChunkedArray:
    if pa.types.is_timestamp(column.type):
        return pc.cast(column, pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64())
    return column


def one_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The column as one array: a lone chunk as it is (``combine_chunks`` would copy it)."""
    if isinstance(column, pa.Array):
        return column
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


CACHED_NAME_ROWS = 16_384  # above a url page (10,000 rows); at most 1 MiB of names each


@functools.lru_cache(maxsize=32)
def _partition_names(partition: str) -> pa.Array:
    return pa.repeat(pa.scalar(partition, pa.string()), CACHED_NAME_ROWS)


def partition_column(partition: str, rows: int) -> pa.Array:
    """``_partition`` for ``rows`` rows: a zero-copy slice of one cached array per
    partition, not a new string array for every page, where it fits."""
    if rows <= CACHED_NAME_ROWS and len(partition.encode()) * CACHED_NAME_ROWS <= 2**20:
        return _partition_names(partition).slice(0, rows)
    return pa.repeat(pa.scalar(partition, pa.string()), rows)


def time_us(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """``time`` (epoch ms or a timestamp of any unit) as Spark's timestamp: us, UTC."""
    column = one_array(column)
    target = META_ARROW.field(TIME).type
    if pa.types.is_timestamp(column.type):
        return pc.cast(column, target, safe=False)
    if column.type == pa.int64() and column.null_count == 0:  # the usual case, 5x faster
        us = column.to_numpy(zero_copy_only=True) * 1000
        return pa.Array.from_buffers(target, len(us), [None, pa.py_buffer(us)])
    return pc.multiply(column, 1000).cast(target)


def conform(
    table: pa.Table, partition: str, indexes: pa.Array, target: pa.Schema
) -> pa.RecordBatch:
    """``table`` (its rows have ``indexes`` in ``partition``) as one batch of ``target``."""
    rows = table.num_rows
    arrays: list[pa.Array] = []
    for field in target:
        if field.name == PARTITION:
            arrays.append(partition_column(partition, rows))
        elif field.name == INDEX:
            arrays.append(indexes)
        elif field.name == TIME:
            arrays.append(time_us(table.column(TIME_COLUMN)))
        elif field.name in table.column_names:
            column = one_array(table.column(field.name))
            if column.type != field.type:
                # nanoseconds to Spark's microseconds: truncated, as Spark itself does
                column = column.cast(field.type, safe=not pa.types.is_timestamp(field.type))
            arrays.append(column)
        else:
            arrays.append(pa.nulls(rows, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def table_within_time(
    table: pa.Table, indexes: pa.Array, starting_ms: int | None, ending_ms: int | None
) -> tuple[pa.Table, pa.Array]:
    """An Arrow table's rows (and their indexes) with ``starting_ms <= time < ending_ms``:
    the Python readers' time bounds; ``topic_frames.frame_within_time`` is the JVM reads'."""
    if (starting_ms is None and ending_ms is None) or TIME_COLUMN not in table.column_names:
        return table, indexes
    ms = time_ms(table.column(TIME_COLUMN))
    masks = []
    if starting_ms is not None:
        masks.append(pc.greater_equal(ms, starting_ms))
    if ending_ms is not None:
        masks.append(pc.less(ms, ending_ms))
    mask = masks[0] if len(masks) == 1 else pc.and_(masks[0], masks[1])
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    return table.filter(mask), indexes.filter(mask)
