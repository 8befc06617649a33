"""Sealed segments: written once, complete before the manifest names them.

A sealed file is immutable and complete (``files.publish`` or the footer
written, fsynced and renamed); the manifest row that names it is committed
only afterwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from plateau.storage.data.durable_io import publish

PARQUET_ROW_GROUP = 65_536
DICTIONARY_SAMPLE_ROWS = 4096
DICTIONARY_MAX_DISTINCT = 0.5
STREAM_START = 8  # Arrow file magic and padding before the stream of messages


def sealed_name(first_index: int, segment_id: int, fmt: str) -> str:
    return f"{first_index:020d}-{segment_id}.{fmt}"


def dictionary_columns(table: pa.Table) -> list[str]:
    """Columns whose values repeat enough for a dictionary, judged on a sample.

    Parquet's writer gives up on a dictionary only after hashing a page's worth
    of values and finding it too big, so asking for one on a near-unique column
    (``time``, ids, random or free-text payloads) is pure cost: with random
    values that attempt was a fifth of the CPU of a seal. Counting distinct
    values in the first ``DICTIONARY_SAMPLE_ROWS`` rows costs about 2 ms per
    segment; a column where at most ``DICTIONARY_MAX_DISTINCT`` of them differ
    (keys, enums, categories) still gets its dictionary.
    """
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    limit = sample.num_rows * DICTIONARY_MAX_DISTINCT
    chosen = []
    for name, column in zip(table.schema.names, sample.columns, strict=True):
        try:
            distinct = pc.count_distinct(column, mode="all").as_py()
        except pa.ArrowNotImplementedError:
            chosen.append(name)  # a nested type: leave the choice to the writer
            continue
        if distinct <= limit:
            chosen.append(name)
    return chosen


def write_sealed(
    final: Path, table: pa.Table, fmt: str, compression: str, drop_pages: bool = True
) -> int:
    """Write ``table`` as a complete sealed file at ``final``; returns its size in bytes."""
    codec = None if compression == "none" else compression

    def write(f: BinaryIO) -> None:
        if fmt == "parquet":
            pq.write_table(
                table,
                f,
                row_group_size=PARQUET_ROW_GROUP,
                compression=codec or "none",
                use_dictionary=dictionary_columns(table),
                write_statistics=True,
            )
        else:
            options = pa.ipc.IpcWriteOptions(compression=codec)
            with pa.ipc.new_file(f, table.schema, options=options) as writer:
                writer.write_table(table)

    return publish(final, write, drop_pages)


def read_whole(path: Path, fmt: str) -> pa.Table:
    if fmt == "parquet":
        return pq.read_table(path)
    with pa.memory_map(str(path)) as source:
        return pa.Table.from_batches(*arrow_batches(source))


def arrow_batches(source: pa.NativeFile) -> tuple[list[pa.RecordBatch], pa.Schema]:
    """Batches of an Arrow segment; one sealed in place on a full volume has no footer."""
    try:
        reader = pa.ipc.open_file(source)
        return [reader.get_batch(i) for i in range(reader.num_record_batches)], reader.schema
    except pa.ArrowInvalid:
        source.seek(STREAM_START)
        stream = pa.ipc.open_stream(source)
        return list(stream), stream.schema
