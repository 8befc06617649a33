"""Path mode (``format("plateau")``): one slice of a sealed segment file, read in a Spark task.

``parquet`` files are read a row group at a time, only the columns the read
declares (plus ``time`` when needed), skipping row groups whose ``time``
statistics lie outside the time bounds. ``arrow`` files are memory-mapped and
their record batches decoded with only the needed fields.

A file the plan named may be gone when the task runs: retention deleted it
after the snapshot was read. That is data loss, reported through
``failOnDataLoss``. Once open, a file stays readable to the end even if it is
unlinked meanwhile (the open descriptor / mapping keeps it).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from plateau.protocol.values import Span
from plateau.spark.merge import TIME_COLUMN, conform, file_columns, table_within_time, time_ms
from plateau.spark.options import SourceOptions
from plateau.spark.plan import Slice, report_loss


def map_file(path: str) -> pa.Buffer | None:
    """The whole file memory-mapped (None: gone); the mapping outlives an unlink."""
    try:
        with Path(path).open("rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return pa.py_buffer(b"")
            return pa.py_buffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    except FileNotFoundError:
        return None


def read_file_slices(
    pieces: Sequence[Slice], options: SourceOptions, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """A task's slices; every file is mapped before the first is read.

    Why all first: retention deletes the oldest segments, which a task reads
    first; mapping them all at the start leaves only the time between the
    plan and the task's start for a deletion to take records from it.
    """
    mapped = [(piece, map_file(piece.file or "")) for piece in pieces]
    for piece, buffer in mapped:
        if buffer is None:
            report_loss(options, piece.partition, Span(piece.start, piece.end))
        elif piece.format == "parquet":
            source = pq.ParquetFile(pa.BufferReader(buffer))
            yield from parquet_slice(source, piece, options, target)
        else:
            yield from _arrow(buffer, piece, options, target)


def _emit(
    table: pa.Table, first: int, piece: Slice, options: SourceOptions, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Rows of ``table`` (its row 0 is index ``first``) inside the slice and the time bounds."""
    lo = max(piece.start - first, 0)
    hi = min(piece.end - first, table.num_rows)
    if hi <= lo:
        return
    table = table.slice(lo, hi - lo)
    indexes = pa.array(np.arange(first + lo, first + hi, dtype=np.int64))
    table, indexes = table_within_time(table, indexes, options.starting_ms, options.ending_ms)
    if table.num_rows:
        yield conform(table, piece.partition, indexes, target)


def _group_in_time(meta: pq.RowGroupMetaData, column: int, options: SourceOptions) -> bool:
    """False only when ``time`` statistics prove the row group is outside the bounds."""
    stats = meta.column(column).statistics
    if stats is None or not stats.has_min_max:
        return True
    lo, hi = stats.min, stats.max
    if not isinstance(lo, int):  # a timestamp column: statistics come as datetimes
        lo = int(time_ms(pa.array([lo]))[0].as_py())
        hi = int(time_ms(pa.array([hi]))[0].as_py())
    if options.starting_ms is not None and hi < options.starting_ms:
        return False
    return not (options.ending_ms is not None and lo >= options.ending_ms)


def parquet_slice(
    source: pq.ParquetFile, piece: Slice, options: SourceOptions, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    schema = source.schema_arrow
    columns = file_columns(target, schema, options.time_bounded)
    meta = source.metadata
    leaves = [meta.schema.column(i).path for i in range(meta.num_columns)]
    time_leaf = leaves.index(TIME_COLUMN) if TIME_COLUMN in leaves else None
    first = piece.first_index
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        end = first + group.num_rows
        overlaps = end > piece.start and first < piece.end
        in_time = (
            time_leaf is None
            or not options.time_bounded
            or _group_in_time(group, time_leaf, options)
        )
        if overlaps and in_time:
            table = source.read_row_group(g, columns=columns)
            yield from _emit(table, first, piece, options, target)
        first = end
        if first >= piece.end:
            break


def _arrow(
    mapped: pa.Buffer, piece: Slice, options: SourceOptions, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    schema = pa.ipc.open_file(mapped).schema
    columns = file_columns(target, schema, options.time_bounded)
    # an empty list would mean every field: a read of meta columns alone takes the first
    included = [schema.get_field_index(c) for c in columns] or [0]
    reader = pa.ipc.open_file(mapped, options=pa.ipc.IpcReadOptions(included_fields=included))
    first = piece.first_index
    for i in range(reader.num_record_batches):
        if first >= piece.end:
            break
        batch = reader.get_batch(i)
        if first + batch.num_rows > piece.start:
            yield from _emit(pa.Table.from_batches([batch]), first, piece, options, target)
        first += batch.num_rows
