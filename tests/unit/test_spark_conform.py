"""``conform``: every batch a Spark task yields, shaped to the declared schema.

Its fast paths (a lone chunk passed through uncopied, ``_partition`` sliced
from a cached array, ``_time`` computed in numpy) must give exactly what the
plain Arrow computations give, for sliced pages (url mode keeps a prefix of
a page) and chunked tables (path mode concatenates segments) alike.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from plateau.spark.merge import CACHED_NAME_ROWS, META_ARROW, conform, declared, time_us

T0_MS = 1_700_000_000_000
TIME_US = META_ARROW.field("_time").type


def page(first: int, rows: int) -> pa.Table:
    return pa.table(
        {
            "time": pa.array(range(T0_MS + first, T0_MS + first + rows), pa.int64()),
            "value": pa.array(
                [bytes([i % 256]) * 4 for i in range(first, first + rows)], pa.binary(4)
            ),
            "small": pa.array([i % 200 for i in range(first, first + rows)], pa.uint8()),
        }
    )


def expected_times(first: int, rows: int) -> list[int]:
    return [(T0_MS + first + i) * 1000 for i in range(rows)]


@pytest.mark.parametrize(
    "table",
    [
        page(0, 1_000).slice(250, 500),  # a kept prefix/suffix of one page: one sliced chunk
        pa.concat_tables([page(250, 200), page(450, 300)]),  # two chunks
    ],
    ids=["sliced", "chunked"],
)
def test_conform_gives_the_declared_columns_and_values(table: pa.Table) -> None:
    target = declared(table.schema, None)
    indexes = pa.array(range(250, 750), pa.int64())
    batch = conform(table, "p-7", indexes, target)
    assert batch.schema == target
    assert batch.column("_partition").to_pylist() == ["p-7"] * 500
    assert batch.column("_index").to_pylist() == list(range(250, 750))
    assert batch.column("_time").cast(pa.int64()).to_pylist() == expected_times(250, 500)
    assert batch.column("time").to_pylist() == list(range(T0_MS + 250, T0_MS + 750))
    assert batch.column("value").to_pylist() == [bytes([i % 256]) * 4 for i in range(250, 750)]
    assert batch.column("small").type == pa.int16()  # Spark has no unsigned types
    assert batch.column("small").to_pylist() == [i % 200 for i in range(250, 750)]


@pytest.mark.parametrize("rows", [1, 9_999, CACHED_NAME_ROWS, CACHED_NAME_ROWS + 1])
@pytest.mark.parametrize("name", ["0", "é-partition", "x" * 200])
def test_partition_column_for_any_page_size_and_name(rows: int, name: str) -> None:
    table = pa.table({"time": pa.array(range(rows), pa.int64())})
    target = declared(table.schema, ["_partition"])
    for _ in range(2):  # the second batch of a partition comes from the cache, where it fits
        column = conform(table, name, pa.array(range(rows), pa.int64()), target).column(0)
        assert len(column) == rows and column.null_count == 0
        assert pc.all(pc.equal(column, name)).as_py()


def test_time_us_matches_arrow_for_ms_integers_nulls_and_timestamps() -> None:
    ms = pa.array(range(T0_MS, T0_MS + 100), pa.int64()).slice(10, 50)
    assert time_us(ms).equals(pc.multiply(ms, 1000).cast(TIME_US))
    assert time_us(pa.chunked_array([ms, ms])).to_pylist() == (
        pc.multiply(ms, 1000).cast(TIME_US).to_pylist() * 2
    )
    with_null = pa.array([T0_MS, None, T0_MS + 2], pa.int64())
    assert time_us(with_null).to_pylist() == pc.multiply(with_null, 1000).cast(TIME_US).to_pylist()
    stamps = pa.array([T0_MS, T0_MS + 1], pa.timestamp("ms", tz="UTC"))
    assert time_us(stamps).cast(pa.int64()).to_pylist() == [T0_MS * 1000, (T0_MS + 1) * 1000]
