"""What Python hands plateau's JVM reader (``plateau.spark.url_jvm``): which topics it
takes, and the plan it executes. The reader itself runs in tests/spark/test_spark_url_jvm.py."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from plateau.spark.options import parse
from plateau.spark.plan import Slice
from plateau.spark.url_jvm import plan_options, why_not

ROWS = pa.schema([("time", pa.int64()), ("v", pa.int64()), ("s", pa.string())])


@pytest.mark.parametrize(
    "dtype",
    [
        pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(), pa.float16(), pa.date64(),
        pa.binary(16), pa.timestamp("ns"), pa.timestamp("ms", tz="UTC"), pa.decimal128(10, 2),
        pa.struct([("a", pa.int32()), ("b", pa.list_(pa.string()))]),
        pa.map_(pa.string(), pa.float64()), pa.large_string(),
    ],
)  # fmt: skip
def test_takes_what_it_passes_or_converts(dtype: pa.DataType) -> None:
    schema = ROWS.append(pa.field("c", dtype))
    assert why_not(schema, [schema]) is None


@pytest.mark.parametrize(
    "dtype",
    [
        pa.struct([("u", pa.uint32())]), pa.list_(pa.timestamp("ns")),
        pa.dictionary(pa.int32(), pa.string()), pa.large_list(pa.int64()),
        pa.list_(pa.int64(), 3),
    ],
)  # fmt: skip
def test_leaves_nested_conversions_to_python(dtype: pa.DataType) -> None:
    schema = ROWS.append(pa.field("c", dtype))
    assert f"column 'c' is {dtype}" in (why_not(schema, [schema]) or "")


def test_a_type_that_differs_between_samples_goes_to_python() -> None:
    old = pa.schema([("time", pa.int64()), ("v", pa.int32())])
    merged = ROWS
    assert why_not(merged, [old, merged]) == "column 'v' is int32 in some rows and int64 in others"
    # a column only some rows have is fine: null where absent
    assert why_not(merged, [pa.schema([("time", pa.int64())]), merged]) is None


def test_plan_options() -> None:
    options = parse({"url": "http://n:3030", "topic": "t", "url.pageRows": "500"})
    pieces = [Slice("0", 0, 10), Slice("0", 10, 20), Slice("1", 5, 7)]
    out = plan_options(options, ["time", "v", "s"], pieces)
    assert json.loads(out["plateau.tasks"]) == [[["0", 0, 10]], [["0", 10, 20]], [["1", 5, 7]]]
    assert out["url.pageRows"] == "500" and out["failOnDataLoss"] == "true"
    assert out["plateau.dataColumns"] == "3" and out["plateau.countColumn"] == "time"
    assert json.loads(out["dataset"]) == [] and "token" not in out
    focused = parse({"url": "http://n", "topic": "t", "dataset": "v", "token": "k",
                     "failOnDataLoss": "false"})  # fmt: skip
    out = plan_options(focused, ["v"], [])
    assert json.loads(out["dataset"]) == ["v", "time"]  # time is always kept
    assert out["token"] == "k" and out["failOnDataLoss"] == "false"
    assert json.loads(out["plateau.tasks"]) == [] and out["plateau.countColumn"] == "v"
