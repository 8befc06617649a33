"""Retention: keep each topic inside its byte budget and maximum age.

Oldest sealed segments go first, across all partitions of the topic (segment
ids grow with seal order). A deletion commits the manifest first and removes
the file second; a crash between the two leaves an orphan file, which
recovery deletes. The open segment is never deleted, so a topic holds at
most its budget plus the segments still open or being sealed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from plateau.protocol.topic_config import RetentionConfig
from plateau.storage.catalog.manifest import Manifest, SegmentRow
from plateau.storage.data.reader_cache import ReaderCache
from plateau.storage.metrics import RETENTION_DELETED_BYTES, RETENTION_DELETED_SEGMENTS
from plateau.storage.partition import Partition

log = logging.getLogger(__name__)


@dataclass
class Deletion:
    row: SegmentRow
    reason: str


def plan(rows: list[SegmentRow], config: RetentionConfig, now_ms: int) -> list[Deletion]:
    """Which sealed segments to delete, oldest first (pure: unit-tested without disk)."""
    ordered = sorted(rows, key=lambda r: r.id)
    out: list[Deletion] = []
    kept: list[SegmentRow] = []
    if config.max_age_seconds is not None:
        cutoff = now_ms - config.max_age_seconds * 1000
        for row in ordered:
            if row.max_time_ms < cutoff:
                out.append(Deletion(row, "age"))
            else:
                kept.append(row)
    else:
        kept = ordered
    total = sum(r.bytes for r in kept)
    for row in kept:
        if total <= config.max_bytes:
            break
        out.append(Deletion(row, "bytes"))
        total -= row.bytes
    return out


def enforce(
    topic: str,
    partitions: list[Partition],
    config: RetentionConfig,
    manifest: Manifest,
    cache: ReaderCache,
    data_dir: Path,
) -> list[Path]:
    """Apply ``plan`` to the manifest and the partitions; returns the files to unlink.

    The caller publishes a snapshot that no longer names them *before*
    unlinking, so ``snapshot.json`` never lists a file that is already gone.
    """
    by_partition = {p.name: p for p in partitions}
    rows = [row for p in partitions for row in p.view().sealed]
    deletions = plan(rows, config, int(time.time() * 1000))
    for d in deletions:
        manifest.drop_segment(d.row.id)
        by_partition[d.row.partition].remove_sealed(d.row)
        cache.evict(d.row.id)
        RETENTION_DELETED_SEGMENTS.labels(topic, d.reason).inc()
        RETENTION_DELETED_BYTES.labels(topic).inc(d.row.bytes)
        log.info("retention (%s) deletes %s", d.reason, d.row.path)
    return [data_dir / d.row.path for d in deletions]
