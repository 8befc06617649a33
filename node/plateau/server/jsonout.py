"""Arrow tables as JSON rows, for clients that ask for JSON instead of Arrow.

JSON cannot carry every Arrow value, so values are mapped (documented in the
README and ``/docs``):

- binary -> base64 string (standard alphabet, padded);
- timestamp -> ISO 8601 string (with offset when the column has a time zone),
  microsecond precision; date and time -> ISO 8601 strings;
- duration -> integer in the column's unit; decimal -> string;
- NaN and infinities -> null; map -> array of ``[key, value]`` pairs.

The mapping is built once per column type, so columns that need none (ints,
strings) go through ``to_pylist`` untouched.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
from starlette.responses import Response

from plateau.protocol import ARROW_FILE, JSON
from plateau.protocol.errors import InvalidInput

Convert = Callable[[Any], Any]


def table_rows(table: pa.Table) -> list[dict[str, Any]]:
    """One dict per row, every value JSON-serialisable; a 400 for types JSON cannot express."""
    try:
        return _rows(_castable(table))
    except (pa.ArrowException, ValueError, OverflowError) as exc:
        raise InvalidInput(
            f"these records cannot be sent as JSON ({exc}); "
            f"ask for Arrow with 'Accept: {ARROW_FILE}'"
        ) from exc


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    columns = []
    for field, column in zip(table.schema, table.columns, strict=True):
        values = column.to_pylist()
        convert = converter(field.type)
        if convert is not None:
            values = [None if v is None else convert(v) for v in values]
        columns.append(values)
    names = table.column_names
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def json_reply(value: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(dumps(value), status, headers, media_type=JSON)


def _json_type(dtype: pa.DataType) -> pa.DataType:
    """The type ``to_pylist`` can turn into Python objects without pandas (no nanoseconds)."""
    if pa.types.is_timestamp(dtype) and dtype.unit == "ns":
        return pa.timestamp("us", dtype.tz)
    if pa.types.is_time64(dtype) and dtype.unit == "ns":
        return pa.time64("us")
    if pa.types.is_duration(dtype):
        return pa.int64()
    if pa.types.is_float16(dtype):
        return pa.float32()
    if isinstance(dtype, pa.DictionaryType):
        return _json_type(dtype.value_type)
    if pa.types.is_struct(dtype):
        return pa.struct([f.with_type(_json_type(f.type)) for f in dtype])
    if pa.types.is_map(dtype):
        return pa.map_(
            dtype.key_field.with_type(_json_type(dtype.key_type)),
            dtype.item_field.with_type(_json_type(dtype.item_type)),
        )
    if pa.types.is_fixed_size_list(dtype):
        return pa.list_(dtype.value_field.with_type(_json_type(dtype.value_type)), dtype.list_size)
    if pa.types.is_large_list(dtype):
        return pa.large_list(dtype.value_field.with_type(_json_type(dtype.value_type)))
    if pa.types.is_list(dtype):
        return pa.list_(dtype.value_field.with_type(_json_type(dtype.value_type)))
    return dtype


def _castable(table: pa.Table) -> pa.Table:
    schema = pa.schema([f.with_type(_json_type(f.type)) for f in table.schema])
    if schema.equals(table.schema):
        return table
    return table.cast(schema, safe=False)


def converter(dtype: pa.DataType) -> Convert | None:
    """A function mapping one non-null Python value of ``dtype`` to JSON; None if none is needed."""
    if (
        pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_fixed_size_binary(dtype)
        or pa.types.is_binary_view(dtype)
    ):
        return _b64
    if pa.types.is_temporal(dtype) and not pa.types.is_duration(dtype):
        return _iso
    if pa.types.is_decimal(dtype):
        return str
    if pa.types.is_floating(dtype):
        return _finite
    if pa.types.is_struct(dtype):
        return _struct_converter(dtype)
    if pa.types.is_map(dtype):
        return _map_converter(dtype)
    if (
        pa.types.is_list(dtype)
        or pa.types.is_large_list(dtype)
        or pa.types.is_fixed_size_list(dtype)
        or pa.types.is_list_view(dtype)
        or pa.types.is_large_list_view(dtype)
    ):
        inner = converter(dtype.value_type)
        if inner is None:
            return None
        return lambda items: [None if v is None else inner(v) for v in items]
    if isinstance(dtype, pa.DictionaryType):
        return converter(dtype.value_type)
    return None


def _struct_converter(dtype: pa.StructType) -> Convert | None:
    fields = {f.name: converter(f.type) for f in dtype}
    if all(c is None for c in fields.values()):
        return None

    def convert(value: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for name, v in value.items():
            inner = fields.get(name)
            out[name] = v if v is None or inner is None else inner(v)
        return out

    return convert


def _map_converter(dtype: pa.MapType) -> Convert:
    key = converter(dtype.key_type) or _same
    item = converter(dtype.item_type) or _same
    return lambda pairs: [[key(k), None if v is None else item(v)] for k, v in pairs]


def _same(value: Any) -> Any:
    return value


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _iso(value: dt.date | dt.time) -> str:
    return value.isoformat()


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
