"""Sealed segments: written once, complete before the manifest names them.

A sealed file is immutable and complete (``files.publish`` or the footer
written, fsynced and renamed); the manifest row that names it is committed
only afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from plateau.storage.data.durable_io import publish_native
from plateau.storage.data.validation import TIME

PARQUET_ROW_GROUP = 65_536
DICTIONARY_SAMPLE_ROWS = 4096
DICTIONARY_MAX_DISTINCT = 0.5
STREAM_START = 8  # Arrow file magic and padding before the stream of messages
MIN_SAVING = 0.20
"""A Parquet column is compressed (zstd) if its sample shrank by this much.

At 10%, random printable text (15% smaller under zstd) was compressed, and that one
column doubled the encoding CPU of a seal of the incompressible workload
(bench/workloads.py, 64 MiB: 58 -> 30 ms) for 7% of the file's size; every column of
the ML-log workload shrinks far more than 20% (its files: 9.4% -> 9.7% of raw). The
arrow side judges at 40% (``column_codecs.MIN_SAVING``): there lz4 runs on the path
the writer waits for, here zstd runs in the sealer."""


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

    ``time`` never does, however often its values repeat (several rows a
    millisecond): it grows with the index, so plain values under zstd are both
    cheaper and smaller than a dictionary's indexes (ML-log workload, 64 MiB
    segment: 6.8 against 13.6 ms of CPU, 182 against 442 KiB).
    """
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    limit = sample.num_rows * DICTIONARY_MAX_DISTINCT
    chosen = []
    for name, column in zip(table.schema.names, sample.columns, strict=True):
        if name == TIME:
            continue
        try:
            distinct = pc.count_distinct(column, mode="all").as_py()
        except pa.ArrowNotImplementedError:
            chosen.append(name)  # a nested type: leave the choice to the writer
            continue
        if distinct <= limit:
            chosen.append(name)
    return chosen


def compressed_columns(table: pa.Table, codec: str, dictionary: Collection[str]) -> list[bool]:
    """Which columns shrink by ``MIN_SAVING`` under ``codec``, judged on a sample.

    The Parquet side of ``column_codecs``: random floats and ids cost zstd a sixth
    of a seal's CPU for a few percent. A column chosen for a ``dictionary`` (as
    ``dictionary_columns`` chose them) is judged as Parquet stores it
    (``dictionary_savings``): its dictionary indices, bit-packed, are what the
    codec would squeeze.
    """
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    encoded = dictionary_savings(table, codec, dictionary)
    chosen = []
    for name, column in zip(table.schema.names, sample.columns, strict=True):
        if name in dictionary:
            chosen.append(encoded.get(name, 1.0) >= MIN_SAVING)
            continue
        body = pa.record_batch([column.combine_chunks()], names=["c"]).serialize()
        packed = pa.Codec(codec).compress(body, asbytes=False).size
        chosen.append(packed <= body.size * (1 - MIN_SAVING))
    return chosen


def dictionary_savings(
    table: pa.Table, codec: str, dictionary: Collection[str]
) -> dict[str, float]:
    """What ``codec`` saves on each ``dictionary`` column of the first row group, stored as
    Parquet stores it (dictionary page and bit-packed indices): 1 - compressed / raw.

    Why the row group as it will be written, not the Arrow sample: a column of few
    values is mostly its indices, a few bits a value, and whether those shrink
    depends on how the values spread, not on how the text repeats. On the ML-log
    workload (bench/workloads.py) zstd saved 0-19% on nine of its eleven dictionary
    columns (regions, models, token counts: near-random choices among few values)
    and 46% on its status column (mostly "ok"); each compressed column chunk costs a
    read a decompression context and a pass (``ZSTD_createDCtx`` alone was 4% of the
    node's CPU serving those reads). Why a whole row group: the dictionary page
    weighs as much in 4,096 rows as in 65,536, and compresses far better than the
    indices (a sample of 4,096 rows put customer ids at 47% saved, the row group
    at 7%). About 11 ms of a seal of a million ML-log rows, less than the
    compression it spares. A nested column (several leaves) counts as compressible.
    """
    names = [f.name for f in table.schema if f.name in dictionary and _leaf_count(f.type) == 1]
    if not names or codec == "none":
        return {}
    sample = table.slice(0, PARQUET_ROW_GROUP).select(names)
    if not sample.num_rows:
        return {}
    sink = pa.BufferOutputStream()
    pq.write_table(sample, sink, compression=codec, use_dictionary=True, write_statistics=False)
    group = pq.read_metadata(pa.BufferReader(sink.getvalue())).row_group(0)
    out = {}
    for i, name in enumerate(names):
        chunk = group.column(i)
        raw = chunk.total_uncompressed_size
        out[name] = 1 - chunk.total_compressed_size / raw if raw else 0.0
    return out


def _leaf_count(dtype: pa.DataType) -> int:
    """Parquet leaf columns of an Arrow type, in Parquet's depth-first order."""
    if pa.types.is_dictionary(dtype):
        return 1
    if dtype.num_fields == 0:
        return 1
    return sum(_leaf_count(dtype.field(i).type) for i in range(dtype.num_fields))


def leaf_ranges(schema: pa.Schema) -> list[range]:
    """Each top-level column's Parquet leaf column indices (a contiguous run, in order)."""
    out, at = [], 0
    for field in schema:
        n = _leaf_count(field.type)
        out.append(range(at, at + n))
        at += n
    return out


def parquet_leaf_paths(schema: pa.Schema) -> list[list[str]]:
    """Each top-level column's Parquet leaf paths (what per-column settings are keyed by)."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    meta = pq.read_metadata(pa.BufferReader(sink.getvalue()))
    paths = [meta.schema.column(i).path for i in range(meta.num_columns)]
    return [paths[r.start : r.stop] for r in leaf_ranges(schema)]


def is_text(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
    )


def statistics_columns(
    schema: pa.Schema, dictionary: Collection[str], leaves: Sequence[Sequence[str]]
) -> list[str]:
    """Parquet leaf paths that get min/max statistics: all but text columns with a dictionary.

    Why not those: their statistics compare every value's bytes, a third of the
    CPU of writing such a column (ML-log workload, five such columns: 118 -> 96
    ms a 64 MiB segment), and they prune nothing a dictionary does not. A row
    group of a column whose pages are all dictionary-encoded is pruned by its
    dictionary (Spark's Parquet reader: ``parquet.filter.dictionary.enabled``,
    on by default, for equality, ``IN`` and ranges alike), and a column of few
    distinct values holds most of them in every row group, so min and max span
    them all anyway. ``time`` and every other column keep theirs: the node's own
    time-range reads and Spark's pushdown use them. ``leaves``: ``parquet_leaf_paths(schema)``.
    """
    return [
        path
        for field, paths in zip(schema, leaves, strict=True)
        if not (field.name in dictionary and is_text(field.type))
        for path in paths
    ]


def parquet_codecs(
    table: pa.Table,
    codec: str,
    adaptive: bool,
    dictionary: Collection[str],
    leaves: Sequence[Sequence[str]],
) -> str | dict[str, str]:
    """The ``compression`` argument of Parquet's writer: one codec, or one per leaf column
    (``leaves``: ``parquet_leaf_paths(table.schema)``)."""
    if codec == "none" or not adaptive:
        return codec
    chosen = compressed_columns(table, codec, dictionary)
    return {
        path: codec if keep else "none"
        for keep, paths in zip(chosen, leaves, strict=True)
        for path in paths
    }


def parquet_column_bytes(path: Path, table: pa.Table) -> tuple[list[str], list[int], list[int]]:
    """Per top-level column of a sealed Parquet file: its codec, Arrow bytes and bytes stored."""
    meta = pq.read_metadata(path)
    codecs, stored = [], []
    for leaves in leaf_ranges(table.schema):
        size = 0
        codec = "none"
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for i in leaves:
                chunk = group.column(i)
                size += chunk.total_compressed_size
                if chunk.compression != "UNCOMPRESSED":
                    codec = chunk.compression.lower()
        codecs.append(codec)
        stored.append(size)
    return codecs, [c.nbytes for c in table.columns], stored


def write_sealed(
    final: Path,
    table: pa.Table,
    fmt: str,
    compression: str,
    drop_pages: bool = True,
    adaptive: bool = False,
) -> int:
    """Write ``table`` as a complete sealed file at ``final``; returns its size in bytes.

    ``adaptive`` (``segment.compression`` unset): a Parquet file's columns are
    compressed only where a sample shrank (``compressed_columns``).
    """
    codec = None if compression == "none" else compression

    def write(sink: pa.NativeFile, written: Callable[[], None]) -> None:
        if fmt == "parquet":
            dictionary = dictionary_columns(table)  # sampled once: both choices use it
            leaves = parquet_leaf_paths(table.schema)  # the paths both per-column choices name
            with pq.ParquetWriter(
                sink,
                table.schema,
                compression=parquet_codecs(table, compression, adaptive, set(dictionary), leaves),
                use_dictionary=dictionary,
                write_statistics=statistics_columns(table.schema, dictionary, leaves),
            ) as writer:
                for start in range(0, max(table.num_rows, 1), PARQUET_ROW_GROUP):
                    writer.write_table(table.slice(start, PARQUET_ROW_GROUP), PARQUET_ROW_GROUP)
                    written()
        else:
            options = pa.ipc.IpcWriteOptions(compression=codec)
            with pa.ipc.new_file(sink, table.schema, options=options) as writer:
                for batch in table.to_batches():
                    writer.write_batch(batch)
                    written()

    return publish_native(final, write, drop_pages)


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
