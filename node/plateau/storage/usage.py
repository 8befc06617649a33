"""What a topic stores, as the admin replies report it, and the budget check that sheds
appends when an archive-required topic is full of segments not archived yet.

Both read the same figure, a topic's bytes on disk (sealed plus open segments), so
it is computed in one place: ``GET /admin/topics/{t}`` and the ``ArchiveBehind``
refusal never disagree about whether the budget is full.
"""

from __future__ import annotations

from plateau.protocol.errors import ArchiveBehind
from plateau.protocol.replies import (
    ColumnCompression,
    PartitionArchive,
    PartitionUsage,
    TopicArchive,
    TopicUsage,
)
from plateau.storage.archive import ArchiveStatus
from plateau.storage.partition import Partition, PartitionView
from plateau.storage.topics import Topic

ARCHIVE_BEHIND_RETRY_SECONDS = 5.0


def view_bytes(view: PartitionView) -> int:
    """Bytes a partition holds on disk: its sealed segments and those open or sealing."""
    return sum(r.bytes for r in view.sealed) + sum(s.nbytes for s, _ in view.pending)


def partition_usage(view: PartitionView) -> PartitionUsage:
    lows = [r.min_time_ms for r in view.sealed]
    highs = [r.max_time_ms for r in view.sealed]
    for seg, visible in view.pending:
        if visible and seg.min_time_ms is not None and seg.max_time_ms is not None:
            lows.append(seg.min_time_ms)
            highs.append(seg.max_time_ms)
    return PartitionUsage(
        start=view.start,
        end=view.end,
        bytes=view_bytes(view),
        records=view.end - view.start,
        segments=len(view.sealed) + len(view.pending),
        oldest_time_ms=min(lows, default=None),
        newest_time_ms=max(highs, default=None),
    )


def topic_usage(
    partitions: dict[str, Partition],
    archive: tuple[TopicArchive, dict[str, PartitionArchive]] | None,
) -> TopicUsage:
    """The topic's usage from its partitions, with its archive's report when it is archived."""
    usages = {name: partition_usage(p.view()) for name, p in sorted(partitions.items())}
    if archive is not None:
        for name, usage in usages.items():
            usage.archive = archive[1].get(name)
    kept = usages.values()
    lows = [p.oldest_time_ms for p in kept if p.oldest_time_ms is not None]
    highs = [p.newest_time_ms for p in kept if p.newest_time_ms is not None]
    return TopicUsage(
        bytes=sum(p.bytes for p in kept),
        records=sum(p.records for p in kept),
        oldest_time_ms=min(lows, default=None),
        newest_time_ms=max(highs, default=None),
        partitions=usages,
        archive=None if archive is None else archive[0],
        columns=column_compression(list(partitions.values())),
    )


def column_compression(partitions: list[Partition]) -> dict[str, ColumnCompression]:
    """Every partition's bytes per column, summed, and the codecs their latest segments use."""
    raw: dict[str, int] = {}
    stored: dict[str, int] = {}
    codec: dict[str, set[str]] = {}
    for p in partitions:
        for name, col in p.compression.snapshot().items():
            raw[name] = raw.get(name, 0) + col.raw_bytes
            stored[name] = stored.get(name, 0) + col.stored_bytes
            codec.setdefault(name, set()).add(col.codec)
    return {
        name: ColumnCompression(
            codec="+".join(sorted(codec[name])),  # partitions may judge a column apart
            raw_bytes=raw[name],
            stored_bytes=stored[name],
            ratio=round(stored[name] / raw[name], 4) if raw[name] else 1.0,
        )
        for name in raw
    }


def check_archive_behind(t: Topic, status: ArchiveStatus, has_archive: bool) -> None:
    """429 ``ArchiveBehind`` once an archive-required topic whose retention waits for the
    archive holds its whole budget (sealed and open): nothing is deleted unarchived."""
    held = t.archive_held
    if held is None or not t.config.archive.is_required():
        return
    budget = t.config.retention.max_bytes
    if sum(view_bytes(p.view()) for p in t.all()) < budget:
        return
    state = status.state(t.name)
    label, why = state.state, state.message
    if state.state == "Current":  # no upload has failed (yet): they are just not done
        label, why = "Behind", "uploads have not caught up with seals yet"
    if not has_archive:
        why = "this node has no storage.archive.url, so nothing can be archived"
    raise ArchiveBehind(
        f"topic {t.name!r} is at its budget of {budget} bytes and retention may not delete "
        f"what is not archived: the archive is {held[0]} segments / {held[1]} bytes behind "
        f"({label}: {why}); retry when uploads catch up",
        retry_after=ARCHIVE_BEHIND_RETRY_SECONDS,
    )
