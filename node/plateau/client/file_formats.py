"""Reading data files into Arrow batches, and writing rows out, for the CLI.

Files are read incrementally (Parquet row groups, CSV and JSON blocks, Arrow
batches) and regrouped into tables of a fixed row count, so appending a file
larger than memory works and every request has a predictable size.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json
import pyarrow.parquet as pq

FORMATS = ("parquet", "csv", "jsonl", "arrow")
_BY_SUFFIX = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".tsv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".arrow": "arrow",
    ".arrows": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
}
_COMPRESSED = (".gz", ".bz2", ".zst", ".lz4")
_BLOCK_BYTES = 4 << 20


class FileFormatError(ValueError):
    """The file cannot be read as the format chosen; the message names the file."""


@dataclass
class Source:
    """A file opened for reading: tables of ``batch_rows`` rows, and the row total if known."""

    path: Path
    format: str
    tables: Iterator[pa.Table]
    total_rows: int | None


def detect_format(path: Path, explicit: str | None = None) -> str:
    if explicit:
        if explicit not in FORMATS:
            choices = ", ".join(FORMATS)
            raise FileFormatError(f"unknown format {explicit!r}; choose one of {choices}")
        return explicit
    suffixes = [s.lower() for s in path.suffixes]
    while suffixes and suffixes[-1] in _COMPRESSED:
        suffixes.pop()
    fmt = _BY_SUFFIX.get(suffixes[-1]) if suffixes else None
    if fmt is None:
        raise FileFormatError(
            f"{path}: cannot tell the format from the name; pass --format ({', '.join(FORMATS)})"
        )
    return fmt


def rebatch(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[pa.Table]:
    """Regroup batches into tables of exactly ``rows`` rows (the last may be shorter)."""
    if rows < 1:
        raise ValueError("batch size must be at least one row")
    pending: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        while batch.num_rows:
            take = min(rows - count, batch.num_rows)
            pending.append(batch.slice(0, take))
            count += take
            batch = batch.slice(take)
            if count == rows:
                yield pa.Table.from_batches(pending)
                pending, count = [], 0
    if count:
        yield pa.Table.from_batches(pending)


def open_source(path: Path, fmt: str | None, batch_rows: int) -> Source:
    """Open ``path``; raises ``FileFormatError``/``OSError`` early for a missing or bad file."""
    kind = detect_format(path, fmt)
    if not path.is_file():
        raise FileFormatError(f"{path}: no such file")
    try:
        batches, total = _OPENERS[kind](path)
    except (pa.ArrowException, OSError) as exc:
        raise FileFormatError(f"{path}: not a readable {kind} file: {exc}") from exc
    return Source(path, kind, _guard(path, kind, rebatch(batches, batch_rows)), total)


def _guard(path: Path, kind: str, tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """Name the file in errors that surface while reading later blocks."""
    try:
        yield from tables
    except (pa.ArrowException, OSError) as exc:
        raise FileFormatError(f"{path}: bad {kind} data: {exc}") from exc


def _parquet(path: Path) -> tuple[Iterator[pa.RecordBatch], int | None]:
    parquet = pq.ParquetFile(path)
    return parquet.iter_batches(batch_size=65536), int(parquet.metadata.num_rows)


def _csv(path: Path) -> tuple[Iterator[pa.RecordBatch], int | None]:
    delimiter = "\t" if ".tsv" in [s.lower() for s in path.suffixes] else ","
    reader = pa_csv.open_csv(
        pa.input_stream(str(path), compression="detect"),
        read_options=pa_csv.ReadOptions(block_size=_BLOCK_BYTES),
        parse_options=pa_csv.ParseOptions(delimiter=delimiter),
    )
    return iter(reader), None


def _jsonl(path: Path) -> tuple[Iterator[pa.RecordBatch], int | None]:
    reader = pa_json.open_json(
        pa.input_stream(str(path), compression="detect"),
        read_options=pa_json.ReadOptions(block_size=_BLOCK_BYTES),
    )
    return iter(reader), None


def _arrow(path: Path) -> tuple[Iterator[pa.RecordBatch], int | None]:
    """Arrow IPC file or stream, told apart by the file format's magic bytes."""
    source = pa.memory_map(str(path))
    if source.read(6) == b"ARROW1":
        source.seek(0)
        file = pa.ipc.open_file(source)
        batches = [file.get_batch(i) for i in range(file.num_record_batches)]
        return iter(batches), sum(b.num_rows for b in batches)
    source.seek(0)
    return iter(pa.ipc.open_stream(source)), None


_OPENERS = {"parquet": _parquet, "csv": _csv, "jsonl": _jsonl, "arrow": _arrow}


# --- writing rows out -----------------------------------------------------------


def json_value(value: Any) -> Any:
    """JSON for Arrow values that JSON lacks: times as ISO 8601, bytes as base64."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def json_lines(table: pa.Table) -> Iterator[str]:
    """One compact JSON object per row."""
    for batch in table.to_batches(max_chunksize=4096):
        for row in batch.to_pylist():
            yield json.dumps(row, default=json_value, ensure_ascii=False)


def write_arrow_file(path: Path, tables: Iterable[pa.Table]) -> int:
    """Write tables to one Arrow IPC file; they must share a schema. Returns rows written."""
    writer: Any = None
    schema: pa.Schema | None = None
    rows = 0
    try:
        for table in tables:
            if writer is None:
                schema = table.schema
                writer = pa.ipc.new_file(str(path), schema)
            elif not table.schema.equals(schema):
                raise FileFormatError(
                    f"the schema changed at row {rows}; an Arrow file holds one schema "
                    "(read the two ranges separately)"
                )
            writer.write_table(table)
            rows += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    return rows
