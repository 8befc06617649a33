"""Prometheus metrics of the storage engine, declared in the layer that counts them.

Names follow Prometheus conventions (``_total`` counters, ``_seconds`` and
``_bytes`` units); ``/metrics`` exposes the default registry. The server's own
metrics are in ``plateau.server.metrics``; it also observes the server-side
stages of ``APPEND_STAGE_SECONDS`` (one histogram for an append's whole path).
This module imports nothing of storage, so every storage module can count
(``export_memory_metrics`` lives beside ``MemoryBudget``, whose parts it reads).
"""

from __future__ import annotations

import pyarrow as pa
from prometheus_client import Counter, Gauge, Histogram

APPENDED_ROWS = Counter("plateau_appended_rows_total", "Rows acknowledged", ["topic"])

APPENDED_BYTES = Counter(
    "plateau_appended_bytes_total", "Arrow bytes of acknowledged rows", ["topic"]
)

SEAL_SECONDS = Histogram(
    "plateau_seal_seconds",
    "Time to seal a segment (write, fsync, rename, manifest commit)",
    ["format"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

WRITE_AHEAD_FILES = Counter(
    "plateau_write_ahead_files_total",
    "Parquet topics' write-ahead files after their seal (event: kept for reuse, deleted), "
    "and kept files reused by a new segment (event: reused)",
    ["event"],
)

RETENTION_DELETED_SEGMENTS = Counter(
    "plateau_retention_deleted_segments_total", "Segments deleted by retention", ["topic", "reason"]
)

RETENTION_DELETED_BYTES = Counter(
    "plateau_retention_deleted_bytes_total", "Bytes deleted by retention", ["topic"]
)

TOPIC_BYTES = Gauge("plateau_topic_bytes", "Bytes stored on disk per topic", ["topic"])

TOPIC_BUDGET_BYTES = Gauge("plateau_topic_budget_bytes", "Retention budget per topic", ["topic"])

EARLY_SEALS = Counter(
    "plateau_early_seals_total",
    "Open segments sealed before their limits because open segments filled 90% of their "
    "share of the memory budget",
)

MEMORY_BUDGET_BYTES = Gauge(
    "plateau_memory_budget_bytes", "The node's memory budget (storage.memory_budget_bytes)"
)

MEMORY_LIMIT_BYTES = Gauge(
    "plateau_memory_limit_bytes",
    "Each part's share of the memory budget (open_segments, read_cache, bodies)",
    ["part"],
)

MEMORY_USED_BYTES = Gauge(
    "plateau_memory_used_bytes",
    "Bytes each part of the memory budget holds now (open_segments, read_cache, bodies)",
    ["part"],
)

FSYNC_SECONDS = Histogram(
    "plateau_fsync_seconds",
    "Duration of one group-commit fsync",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)

APPEND_STAGE_SECONDS = Histogram(
    "plateau_append_stage_seconds",
    "Where an append's time goes: body (receiving the request body), queue (waiting for a "
    "worker thread), decode (parsing and validating), encode (each batch as the segment "
    "stores it: as sent, or compressed per column), write (partition lock and writing into "
    "the open segment), durable (waiting for the group-commit fsync)",
    ["stage"],
    buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5),
)
"""Why per stage: a slow p99 alone does not say whether the client, the event loop,
the thread pool, lock contention or the disk held an append up."""

READ_CHUNKS = Counter(
    "plateau_read_chunks_decoded_total",
    "Row groups (parquet) or batches (arrow) of sealed segments decoded for readers: ahead "
    "(in the background, before a read asked) or on demand (a read waited for it)",
    ["how"],
)

READ_BATCHES_STORED = Counter(
    "plateau_read_batches_stored_total",
    "Record batches of sealed arrow segments sent to partition readers as the file holds "
    "them, neither decoded nor encoded again (see docs/ingest.md, stored reads)",
)

ARROW_ALLOCATED_BYTES = Gauge(
    "plateau_arrow_allocated_bytes",
    "Bytes held in Arrow's memory pools (open segments, decoded reads, seals in progress; "
    "direct reads land in mimalloc's pool, counted here too); "
    "the rest of the node's RSS is Python, request bodies and the allocator's free lists",
)
# storage.data.direct_io adds its read pool's bytes (its own pool: see there)
ARROW_ALLOCATED_BYTES.set_function(lambda: float(pa.total_allocated_bytes()))

# --- the object-storage archive (plateau.storage.archive) ------------------------------
ARCHIVE_UPLOADS = Counter(
    "plateau_archive_uploads_total",
    "Segment uploads to the archive by result (ok: uploaded, verified and recorded; failed)",
    ["topic", "result"],
)

ARCHIVE_UPLOADED_BYTES = Counter(
    "plateau_archive_uploaded_bytes_total", "Bytes of Parquet objects uploaded", ["topic"]
)

ARCHIVE_FAILURES = Counter(
    "plateau_archive_failures_total",
    "Failed archive calls (uploads and manifest objects) by reason: Unauthorized, "
    "BucketNotFound, Unreachable, Behind (any other error)",
    ["topic", "reason"],
)

ARCHIVE_LAG_SEGMENTS = Gauge(
    "plateau_archive_lag_segments", "Sealed segments not archived yet", ["topic"]
)

ARCHIVE_LAG_BYTES = Gauge(
    "plateau_archive_lag_bytes", "Bytes of sealed segments not archived yet", ["topic"]
)

ARCHIVE_LAG_SECONDS = Gauge(
    "plateau_archive_lag_seconds",
    "Age of the oldest sealed segment not archived yet (0: none waits)",
    ["topic"],
)

ARCHIVE_DELETED_UNARCHIVED = Counter(
    "plateau_archive_deleted_unarchived_total",
    "Segments retention deleted before they were archived (topics without archive.required)",
    ["topic"],
)

ARCHIVE_READS = Counter(
    "plateau_archive_reads_total",
    "Read replies (partition reads, iteration pages) with records read from the archive "
    "because they were no longer on the local disk (pages prepared ahead count when prepared)",
    ["topic"],
)

ARCHIVE_READ_RECORDS = Counter(
    "plateau_archive_read_records_total",
    "Records read from the archive for read replies (x-archived-records summed)",
    ["topic"],
)

ARCHIVE_READ_BYTES = Counter(
    "plateau_archive_read_bytes_total",
    "Bytes fetched from the archive for reads: Parquet footers and the column chunks of the "
    "row groups read (a row group kept in storage.archive.read_cache_bytes is fetched once)",
    ["topic"],
)
