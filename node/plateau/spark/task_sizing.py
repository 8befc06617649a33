"""``format("plateau")``, both modes: how much of a segment a read moves, to size its tasks.

Why: ``bytesPerTask`` groups segments into tasks by their size on disk, but a
read of 2 of 4 columns moves a fraction of those bytes. Left alone, such a
read of an ``arrow`` topic ran one task per 1M-row segment, and a Spark task
with a Python worker costs about 60 ms however little it moves: on 100 such
tasks that was a third of the scan (10 against 14.6M rows/s for the same
rows in 4 tasks). So the budget is divided by the share of a row the read
takes, measured on one segment file: Parquet's footer gives each column
chunk's uncompressed size, an Arrow file's first record batch its buffers.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from plateau.spark.merge import META, file_columns
from plateau.spark.plan import Slice

META_BYTES = 8  # per row of a declared meta column (int64 / timestamp; a short string)
MIN_SHARE = 1 / 64  # a task never spans more than 64 budgets of files on disk


@functools.lru_cache(maxsize=1024)
def column_bytes(path: str, fmt: str) -> tuple[dict[str, int], int]:
    """Uncompressed bytes of each top-level column over a sample of rows, and those rows.

    Cached by path: a sealed segment never changes, and a streaming query
    plans every micro-batch (an Arrow file's first batch is decompressed here).
    """
    if fmt == "parquet":
        meta = pq.read_metadata(path)
        if meta.num_row_groups == 0:
            return {}, 0
        group = meta.row_group(0)
        sizes: dict[str, int] = {}
        for c in range(group.num_columns):
            chunk = group.column(c)
            top = chunk.path_in_schema.split(".")[0]
            sizes[top] = sizes.get(top, 0) + chunk.total_uncompressed_size
        return sizes, group.num_rows
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_file(source)
        if reader.num_record_batches == 0:
            return {}, 0
        batch = reader.get_batch(0)
        return {
            name: column.get_total_buffer_size()
            for name, column in zip(batch.schema.names, batch.columns, strict=True)
        }, batch.num_rows


def read_share(pieces: Sequence[Slice], target: pa.Schema, bounded: bool) -> float:
    """The fraction of a stored row the read of ``target`` moves (1.0 when unknown)."""
    for piece in pieces:
        if piece.file is None or piece.format not in ("parquet", "arrow"):
            continue  # a url slice or an archived object: nothing to measure here
        try:
            sizes, rows = column_bytes(piece.file, piece.format)
        except (OSError, pa.ArrowException):
            continue  # deleted by retention since the plan, or unreadable: the next one
        if not rows or not sizes:
            continue
        schema = pa.schema([pa.field(name, pa.null()) for name in sizes])
        read = sum(sizes[c] for c in file_columns(target, schema, bounded))
        meta = sum(1 for name in target.names if name in META)
        moved = read / rows + META_BYTES * meta
        stored = sum(sizes.values()) / rows + META_BYTES * len(META)
        return min(1.0, max(MIN_SHARE, moved / stored))
    return 1.0
