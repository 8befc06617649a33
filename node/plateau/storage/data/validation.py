"""Checks an appended table must pass before a single byte is written."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc

from plateau.protocol.errors import InvalidInput

TIME = "time"


def _walk(dtype: pa.DataType) -> list[pa.DataType]:
    out = [dtype]
    for i in range(dtype.num_fields):
        out.extend(_walk(dtype.field(i).type))
    if pa.types.is_dictionary(dtype):
        out.extend(_walk(dtype.value_type))
    return out


def _unsupported(dtype: pa.DataType, fmt: str) -> str | None:
    if pa.types.is_null(dtype):
        return "null-typed columns carry no data; give the column a type"
    if fmt == "parquet" and (pa.types.is_union(dtype) or pa.types.is_interval(dtype)):
        return f"type {dtype} cannot be stored in a parquet topic (use an arrow topic)"
    if isinstance(dtype, pa.ExtensionType):
        return f"extension type {dtype} is not supported"
    return None


def prepare(table: pa.Table, fmt: str) -> pa.Table:
    """Validate ``table`` and return it ready to store: ``time`` present, no dictionaries.

    Dictionary columns are decoded: a segment file can hold only one
    dictionary per column, while each append may bring its own.
    """
    if table.num_columns == 0:
        raise InvalidInput("the table has no columns")
    if table.num_rows == 0:
        raise InvalidInput("the table has no rows")
    names = table.schema.names
    if len(set(names)) != len(names):
        raise InvalidInput(f"duplicate column names in {names}")
    for field in table.schema:
        for dtype in _walk(field.type):
            problem = _unsupported(dtype, fmt)
            if problem is not None:
                raise InvalidInput(f"column {field.name!r}: {problem}")
        if pa.types.is_dictionary(field.type):
            idx = table.schema.get_field_index(field.name)
            table = table.set_column(
                idx,
                field.with_type(field.type.value_type),
                pc.cast(table.column(idx), field.type.value_type),
            )
    if TIME in names:
        col = table.column(TIME)
        if not (pa.types.is_int64(col.type) or pa.types.is_timestamp(col.type)):
            raise InvalidInput(
                f"column 'time' must be int64 epoch milliseconds or a timestamp, not {col.type}"
            )
        if col.null_count:
            raise InvalidInput("column 'time' has null values")
    else:
        now_ms = int(time.time() * 1000)
        table = table.append_column(TIME, pa.repeat(pa.scalar(now_ms, pa.int64()), table.num_rows))
    return table.combine_chunks() if table.column(0).num_chunks > 64 else table
