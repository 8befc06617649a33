from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plateau.client.file_formats import (
    FileFormatError,
    detect_format,
    json_lines,
    open_source,
    rebatch,
    write_arrow_file,
)

ROWS = [{"id": i, "name": f"n{i}", "score": i / 2} for i in range(25)]


def write_all_formats(tmp_path: Path) -> dict[str, Path]:
    table = pa.Table.from_pylist(ROWS)
    paths = {
        "parquet": tmp_path / "d.parquet",
        "csv": tmp_path / "d.csv",
        "csv.gz": tmp_path / "d.csv.gz",
        "jsonl": tmp_path / "d.jsonl",
        "arrow": tmp_path / "d.arrow",
        "arrows": tmp_path / "d.arrows",
    }
    pq.write_table(table, paths["parquet"], row_group_size=7)
    csv_text = "id,name,score\n" + "".join(f"{r['id']},{r['name']},{r['score']}\n" for r in ROWS)
    paths["csv"].write_text(csv_text)
    paths["csv.gz"].write_bytes(gzip.compress(csv_text.encode()))
    paths["jsonl"].write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    with pa.ipc.new_file(str(paths["arrow"]), table.schema) as writer:
        for batch in table.to_batches(max_chunksize=4):
            writer.write_batch(batch)
    with pa.ipc.new_stream(str(paths["arrows"]), table.schema) as writer:
        writer.write_table(table)
    return paths


@pytest.mark.parametrize("kind", ["parquet", "csv", "csv.gz", "jsonl", "arrow", "arrows"])
def test_every_format_reads_in_fixed_batches(tmp_path: Path, kind: str) -> None:
    path = write_all_formats(tmp_path)[kind]
    source = open_source(path, None, 10)
    tables = list(source.tables)
    assert [t.num_rows for t in tables] == [10, 10, 5]
    rows = [row for t in tables for row in t.to_pylist()]
    assert rows == ROWS
    if kind in ("parquet", "arrow"):
        assert source.total_rows == 25


def test_explicit_format_overrides_the_name(tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_text('{"a": 1}\n{"a": 2}\n')
    with pytest.raises(FileFormatError, match="--format"):
        detect_format(path)
    assert [t.num_rows for t in open_source(path, "jsonl", 100).tables] == [2]
    with pytest.raises(FileFormatError, match="unknown format"):
        detect_format(path, "xml")


def test_missing_and_corrupt_files(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError, match="no such file"):
        open_source(tmp_path / "nope.parquet", None, 10)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(FileFormatError, match="not a readable parquet file"):
        open_source(bad, None, 10)


def test_bad_data_later_in_a_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(FileFormatError, match=r"bad\.jsonl"):
        list(open_source(path, None, 10).tables)


def test_rebatch_exact_sizes() -> None:
    batches = [pa.record_batch({"v": list(range(n))}) for n in (3, 0, 7, 1, 9)]
    out = list(rebatch(batches, 4))
    assert [t.num_rows for t in out] == [4, 4, 4, 4, 4]
    assert list(rebatch([], 4)) == []
    with pytest.raises(ValueError):
        list(rebatch(batches, 0))


def test_json_lines_handles_arrow_types() -> None:
    table = pa.table(
        {
            "t": pa.array([datetime(2024, 1, 2, tzinfo=UTC)], pa.timestamp("ms", tz="UTC")),
            "b": [b"\x00\xff"],
            "d": pa.array([Decimal("1.25")], pa.decimal128(5, 2)),
            "s": [{"x": [1, 2]}],
        }
    )
    (line,) = json_lines(table)
    assert json.loads(line) == {
        "t": "2024-01-02T00:00:00+00:00",
        "b": "AP8=",
        "d": "1.25",
        "s": {"x": [1, 2]},
    }


def test_write_arrow_file(tmp_path: Path) -> None:
    path = tmp_path / "out.arrow"
    tables = [pa.table({"v": [1, 2]}), pa.table({"v": [3]})]
    assert write_arrow_file(path, iter(tables)) == 3
    assert pa.ipc.open_file(str(path)).read_all().column("v").to_pylist() == [1, 2, 3]
    with pytest.raises(FileFormatError, match="schema changed at row 2"):
        write_arrow_file(tmp_path / "x.arrow", iter([tables[0], pa.table({"w": ["a"]})]))
