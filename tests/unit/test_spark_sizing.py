"""The share of a stored row a read moves, measured on real segment files (no JVM)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plateau.spark.plan import Slice
from plateau.spark.task_sizing import MIN_SHARE, read_share

ROWS = 10_000
TABLE = pa.table({c: pa.array(range(ROWS), pa.int64()) for c in ("a", "b", "c", "time")})


def target(*names: str) -> pa.Schema:
    return pa.schema([pa.field(n, pa.int64()) for n in names])


def segment(tmp_path: Path, fmt: str) -> Slice:
    path = tmp_path / f"seg.{fmt}"
    if fmt == "parquet":
        pq.write_table(TABLE, path, compression="zstd", use_dictionary=False)
    else:
        with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, TABLE.schema) as w:
            w.write_table(TABLE)
    return Slice("0", 0, ROWS, file=str(path), format=fmt, file_end=ROWS, bytes=1)


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_share_is_the_read_columns_part_of_a_row(tmp_path: Path, fmt: str) -> None:
    piece = segment(tmp_path, fmt)
    whole = 4 * 8 + 3 * 8  # four int64 columns and three meta columns per row
    assert read_share([piece], target("a", "b"), False) == pytest.approx(16 / whole, rel=0.05)
    # a time bound reads ``time`` too
    assert read_share([piece], target("a"), True) == pytest.approx(16 / whole, rel=0.05)
    everything = pa.schema([*target("a", "b", "c", "time"), pa.field("_index", pa.int64())])
    assert read_share([piece], everything, False) == pytest.approx(40 / whole, rel=0.05)


def test_unknown_sizes_count_as_whole_rows(tmp_path: Path) -> None:
    gone = Slice("0", 0, ROWS, file=str(tmp_path / "deleted.arrow"), format="arrow", bytes=1)
    remote = Slice("0", 0, ROWS)
    assert read_share([remote, gone], target("a"), False) == 1.0
    # the first readable file answers, after one retention deleted
    assert read_share([gone, segment(tmp_path, "arrow")], target("a"), False) < 0.2


def test_share_has_a_floor(tmp_path: Path) -> None:
    wide = pa.table({"tiny": pa.array([True] * ROWS), "blob": pa.array([b"x" * 4000] * ROWS)})
    path = tmp_path / "wide.arrow"
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, wide.schema) as w:
        w.write_table(wide)
    piece = Slice("0", 0, ROWS, file=str(path), format="arrow", bytes=1)
    assert read_share([piece], pa.schema([pa.field("tiny", pa.bool_())]), False) == MIN_SHARE
