"""Retention: keep each topic inside its byte budget and maximum age.

Oldest sealed segments go first, across all partitions of the topic (segment
ids grow with seal order). A deletion commits the manifest first and removes
the file second; a crash between the two leaves an orphan file, which
recovery deletes. The open segment is never deleted, so a topic holds at
most its budget plus the segments still open or being sealed.

With the archive (``archive.enabled``): a topic whose archive is *required*
deletes only archived segments (``ArchiveStatus.is_archived``: uploaded,
recorded and listed in the topic's manifest object), by age or bytes alike;
an unarchived segment that is due is *held*, and the plan says so
(``Plan.held``), which the engine turns into ``ArchiveBehind`` for appends once
the topic's bytes reach its budget. Without ``required`` retention deletes as
before and counts the segments it deleted unarchived.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from plateau.protocol.topic_config import RetentionConfig, TopicConfig
from plateau.storage.catalog.manifest import Manifest, SegmentRow
from plateau.storage.data.reader_cache import ReaderCache
from plateau.storage.metrics import (
    ARCHIVE_DELETED_UNARCHIVED,
    RETENTION_DELETED_BYTES,
    RETENTION_DELETED_SEGMENTS,
)
from plateau.storage.partition import Partition

log = logging.getLogger(__name__)


@dataclass
class Deletion:
    row: SegmentRow
    reason: str


@dataclass
class Plan:
    """What retention does now, and what it would delete but must keep for the archive."""

    deletions: list[Deletion] = field(default_factory=list)
    held: list[SegmentRow] = field(default_factory=list)
    deleted_unarchived: int = 0  # set by ``enforce``

    @property
    def held_bytes(self) -> int:
        return sum(r.bytes for r in self.held)


Archived = Callable[[SegmentRow], bool]


def plan(rows: list[SegmentRow], config: RetentionConfig, now_ms: int) -> list[Deletion]:
    """Which sealed segments to delete, oldest first (pure: unit-tested without disk)."""
    return plan_archived(rows, config, now_ms, None).deletions


def plan_archived(
    rows: list[SegmentRow], config: RetentionConfig, now_ms: int, archived: Archived | None
) -> Plan:
    """``plan``, where with ``archived`` (an archive-required topic) only segments it
    accepts may go; due ones it refuses are ``held`` (pure)."""

    def may_go(row: SegmentRow) -> bool:
        return archived is None or archived(row)

    ordered = sorted(rows, key=lambda r: r.id)
    out = Plan()
    kept: list[SegmentRow] = []
    if config.max_age_seconds is not None:
        cutoff = now_ms - config.max_age_seconds * 1000
        for row in ordered:
            if row.max_time_ms < cutoff and may_go(row):
                out.deletions.append(Deletion(row, "age"))
            else:
                kept.append(row)
    else:
        kept = ordered
    total = sum(r.bytes for r in kept)
    wanted = total  # what would be left if held segments could go too
    for row in kept:
        if wanted <= config.max_bytes:
            break
        wanted -= row.bytes
        if not may_go(row):
            out.held.append(row)  # a newer archived segment may still go
            continue
        out.deletions.append(Deletion(row, "bytes"))
        total -= row.bytes
    if total <= config.max_bytes:
        out.held = []
    return out


def enforce(
    topic: str,
    partitions: list[Partition],
    config: TopicConfig,
    manifest: Manifest,
    cache: ReaderCache,
    data_dir: Path,
    archived: Archived | None = None,
) -> tuple[list[Path], Plan]:
    """Apply the plan to the manifest and the partitions; returns the files to unlink and
    the plan (its ``held`` segments wait for the archive).

    ``archived`` tells archived segments (an archive-enabled topic on a node
    with an archive); with ``archive.required`` only those are deleted, without
    it the others are deleted too and counted. The caller publishes a snapshot
    that no longer names the files *before* unlinking, so ``snapshot.json``
    never lists a file that is already gone.
    """
    by_partition = {p.name: p for p in partitions}
    rows = [row for p in partitions for row in p.view().sealed]
    required = config.archive.is_required()
    if required and archived is None:
        archived = _never  # no archive to wait for: keep everything rather than lose it
    result = plan_archived(
        rows, config.retention, int(time.time() * 1000), archived if required else None
    )
    counting = config.archive.enabled and not required and archived is not None
    for d in result.deletions:
        manifest.drop_segment(d.row.id)
        by_partition[d.row.partition].remove_sealed(d.row)
        cache.evict(d.row.id)
        RETENTION_DELETED_SEGMENTS.labels(topic, d.reason).inc()
        RETENTION_DELETED_BYTES.labels(topic).inc(d.row.bytes)
        if counting and archived is not None and not archived(d.row):
            ARCHIVE_DELETED_UNARCHIVED.labels(topic).inc()
            result.deleted_unarchived += 1
            log.warning("retention (%s) deletes %s before it was archived", d.reason, d.row.path)
        else:
            log.info("retention (%s) deletes %s", d.reason, d.row.path)
    return [data_dir / d.row.path for d in result.deletions], result


def _never(row: SegmentRow) -> bool:
    return False
