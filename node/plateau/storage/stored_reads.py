"""Partition pages sent as the segment stores them: record batch messages, never decoded.

Why: a reader paging through an arrow topic in the pages it was appended in
(the usual shape: a writer's batches, a reader's page size alike) asks for
rows that are whole record batches of a sealed segment, and the node stored
those batches as Arrow IPC messages already. Decoding them (lz4 frames, for
a compressible topic) and encoding them into a reply again was most of the
node's CPU per page: lz4 a quarter, handing decoded chunks between threads a
fifth (perf, docs/ingest.md "What bounds the reads"). A stored page costs one
read of the file's bytes and the reply's own copy.

The reply is the same Arrow as the decoded one: the schema (with plateau's
status and span metadata), the same rows in the same columns; only its
batches are the stored ones, compressed as stored when the reader said it
decodes that codec (``x-accept-arrow-compression``, ``codecs``). Every read
this does not cover exactly (not whole batches, a page running into the next
segment, an open segment, the archive, a focus or a time range, parquet)
returns None and is read decoded, with the same rows, span and status.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from plateau.protocol.values import RecordStatus, Span
from plateau.storage.data.reader_cache import ReaderCache
from plateau.storage.data.stored_batches import StoredBatches
from plateau.storage.partition import PartitionView


@dataclass(frozen=True)
class StoredRead:
    """A partition page as stored: ``batches`` hold the rows of ``span``."""

    schema: pa.Schema
    batches: StoredBatches
    span: Span
    status: RecordStatus


def read_stored(
    view: PartitionView,
    data_dir: Path,
    cache: ReaderCache,
    start: int,
    limit: int,
    codecs: frozenset[int],
) -> StoredRead | None:
    """Up to ``limit`` rows from ``start`` (clamped to the partition's start) as stored, or
    None when ``record_reads.read_range`` must read them.

    The rows are the ones ``read_range`` returns: it reads ``limit`` rows of the
    segment holding ``start`` when that many are there, which here must end
    inside that segment or exactly at its end. The status follows its rule: a
    full page is ``RecordLimited`` unless it reaches the partition's end (at a
    segment's end, the next source's rows are there: ``view.end`` counts only
    visible rows).
    """
    pos = max(start, view.start)
    i = bisect.bisect_right(view.sealed, pos, key=lambda row: row.end_index)
    if limit <= 0 or i >= len(view.sealed):
        return None
    row = view.sealed[i]
    end = pos + limit
    if row.format != "arrow" or pos < row.first_index or end > row.end_index:
        return None
    reader = cache.get(row.id, data_dir / row.path, row.format)
    batches = reader.stored(pos - row.first_index, limit, codecs)
    if batches is None:
        return None
    status = RecordStatus.ALL if end >= view.end else RecordStatus.RECORD_LIMITED
    return StoredRead(reader.schema, batches, Span(pos, end), status)
