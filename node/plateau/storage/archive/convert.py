"""What is uploaded for a sealed segment: always a Parquet file any engine reads.

A parquet segment goes up as it is (its bytes on the local disk). An arrow
segment is converted first, into ``<data>/archive-tmp/`` (emptied at start:
whatever is there is a leftover of a conversion a crash cut short), with the
same Parquet options a parquet topic seals with (``sealed_writer``: row groups
of 65,536 rows, the topic's codec, dictionaries where values repeat), and
plateau's span in the footer's key-value metadata (``plateau.topic``,
``plateau.partition``, ``plateau.first_index``, ``plateau.end_index``). A
parquet segment uploaded as it is carries no such metadata (adding it would
mean rewriting the file): its span is in its key and its row count in its
footer, which is what the upload is verified against.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from plateau.protocol.archive import ArchiveField
from plateau.storage.archive.store import META_END, META_FIRST, META_PARTITION, META_TOPIC
from plateau.storage.catalog.manifest import SegmentRow
from plateau.storage.data.sealed_writer import (
    PARQUET_ROW_GROUP,
    STREAM_START,
    dictionary_columns,
    parquet_leaf_paths,
    statistics_columns,
)

TMP_DIR = "archive-tmp"


@dataclass(frozen=True)
class Staged:
    """A file ready to upload for one segment; ``temporary`` ones are removed after."""

    path: Path
    temporary: bool
    rows: int
    schema: pa.Schema
    span_in_footer: bool

    def fields(self) -> list[ArchiveField]:
        return [
            ArchiveField(name=f.name, type=str(f.type), nullable=f.nullable) for f in self.schema
        ]

    def discard(self) -> None:
        if self.temporary:
            self.path.unlink(missing_ok=True)


def clean_tmp(data_dir: Path) -> Path:
    """Empty ``<data>/archive-tmp`` (leftovers of a crash) and return it."""
    tmp = data_dir / TMP_DIR
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True, exist_ok=True)
    return tmp


def stage(row: SegmentRow, data_dir: Path, tmp: Path, compression: str) -> Staged:
    """The Parquet file to upload for ``row`` (converted from arrow when needed)."""
    local = data_dir / row.path
    if row.format == "parquet":
        meta = pq.read_metadata(local)
        return Staged(local, False, meta.num_rows, meta.schema.to_arrow_schema(), False)
    span = {
        META_TOPIC: row.topic.encode(),
        META_PARTITION: row.partition.encode(),
        META_FIRST: str(row.first_index).encode(),
        META_END: str(row.end_index).encode(),
    }
    out = tmp / f"{row.topic}.{row.partition}.{row.id}.parquet"
    codec = None if compression == "none" else compression
    with pa.memory_map(str(local)) as source:
        schema, batches = _batches(source)
        rows, written = _write_parquet(out, schema, batches, span, codec or "none")
    return Staged(out, True, rows, written, True)


def _batches(source: pa.NativeFile) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """An arrow segment's batches one at a time (one sealed in place has no footer)."""
    try:
        reader = pa.ipc.open_file(source)
    except pa.ArrowInvalid:
        source.seek(STREAM_START)
        stream = pa.ipc.open_stream(source)
        return stream.schema, iter(stream)
    return reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))


def _write_parquet(
    out: Path,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    metadata: dict[bytes, bytes],
    compression: str,
) -> tuple[int, pa.Schema]:
    """Write ``batches`` as the Parquet file ``sealed_writer`` would write from the whole
    table (row groups of ``PARQUET_ROW_GROUP`` rows, dictionaries chosen on the first rows),
    holding one row group's rows at a time rather than the whole segment."""
    writer: pq.ParquetWriter | None = None
    pending: list[pa.RecordBatch] = []
    held = rows = 0

    def flush(final: bool) -> None:
        nonlocal writer, pending, held, rows
        table = pa.Table.from_batches(pending, schema=schema)
        cut = table.num_rows if final else table.num_rows // PARQUET_ROW_GROUP * PARQUET_ROW_GROUP
        if writer is None:
            dictionary = dictionary_columns(table)
            writer = pq.ParquetWriter(
                out,
                schema.with_metadata({**(schema.metadata or {}), **metadata}),
                compression=compression,
                use_dictionary=dictionary,
                write_statistics=statistics_columns(schema, dictionary, parquet_leaf_paths(schema)),
            )
        if cut:
            writer.write_table(table.slice(0, cut), row_group_size=PARQUET_ROW_GROUP)
            rows += cut
        pending = table.slice(cut).to_batches()
        held = table.num_rows - cut

    try:
        for batch in batches:
            pending.append(batch)
            held += batch.num_rows
            if held >= PARQUET_ROW_GROUP:
                flush(final=False)
        flush(final=True)
    finally:
        if writer is not None:
            writer.close()
    return rows, schema.remove_metadata()
