"""Every read path's plan: partitions, index ranges and the work units (slices) Spark runs.

Both modes (a data directory, a node's URL) describe a topic the same way, as
a ``Listing``: each partition's stored range of indexes, and the slices that
cover an index range. A ``Slice`` is a plain, picklable value: Spark ships it
to a Python worker, which reads exactly ``[start, end)`` of one partition.

Invariant: a read's ``[start, end)`` per partition is fixed when it is planned
(a batch read at ``load``, a micro-batch by its two offsets), and indexes
name records forever, so a slice re-run after a task failure or a restart
reads the same records; only retention can take them away, and that is
reported (``failOnDataLoss``), never silently read around.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from plateau.protocol.values import Span
from plateau.spark.options import EARLIEST, LATEST, OptionError, SourceOptions

log = logging.getLogger("plateau.spark")


class DataLoss(RuntimeError):
    """Records a read still needed were deleted by retention (``failOnDataLoss=true``)."""


@dataclass(frozen=True)
class Slice:
    """Indexes ``[start, end)`` of one partition; ``file`` set when read from a volume."""

    partition: str
    start: int
    end: int
    file: str | None = None
    format: str | None = None
    first_index: int = 0  # of the file: row ``i`` of it is index ``first_index + i``
    bytes: int = 0  # on disk, estimated from the segment's size (0: unknown)
    file_end: int = 0  # the file's end index (its first index plus its rows)
    min_time_ms: int | None = None  # the file's time bounds (snapshot.json), when known
    max_time_ms: int | None = None

    def within(self, starting_ms: int | None, ending_ms: int | None) -> bool:
        """Whether every row of the file is inside the time bounds (no row filter needed)."""
        if self.min_time_ms is None or self.max_time_ms is None:
            return starting_ms is None and ending_ms is None
        return (starting_ms is None or self.min_time_ms >= starting_ms) and (
            ending_ms is None or self.max_time_ms < ending_ms
        )


class Listing(Protocol):
    """A topic as one mode sees it."""

    def spans(self) -> dict[str, Span]:
        """Each partition's readable ``[start, end)`` now."""
        ...

    def schema(self, partitions: Sequence[str]) -> pa.Schema:
        """The topic's columns over those partitions (merged across segments)."""
        ...

    def slices(self, partition: str, span: Span, options: SourceOptions) -> list[Slice]:
        """Work units covering ``span`` (pruned by the options' time bounds where known)."""
        ...


def chosen(spans: dict[str, Span], options: SourceOptions) -> dict[str, Span]:
    """The partitions the options select, with an explicit list checked for existence."""
    picked = {p: s for p, s in spans.items() if options.partitions.admits(p)}
    if options.only_partitions is not None:  # a pushed-down filter: no existence check
        picked = {p: s for p, s in picked.items() if p in options.only_partitions}
    names = options.partitions.names
    if names is not None:
        missing = [p for p in names if p not in spans]
        if missing:
            raise OptionError(
                f"option 'partitions': topic {options.topic!r} has no partition "
                f"{missing[0]!r} (it has {sorted(spans)})"
            )
    return picked


def resolve(spec: object, partition: str, stored: Span, default_latest: bool, label: str) -> int:
    """One partition's bound from ``earliest``/``latest``/a per-partition JSON map."""
    if spec == "earliest":
        return stored.start
    if spec == "latest":
        return stored.end
    assert isinstance(spec, dict)
    index = spec.get(partition)
    if index is None:
        return stored.end if default_latest else stored.start
    if index == EARLIEST:
        return stored.start
    if index == LATEST:
        return stored.end
    if index > stored.end:
        raise OptionError(
            f"option {label!r}: partition {partition!r} ends at index {stored.end}, "
            f"{index} is past it"
        )
    return int(index)


def batch_ranges(listing: Listing, options: SourceOptions) -> dict[str, Span]:
    """Per partition, the ``[start, end)`` a batch read covers (checked, data loss handled)."""
    spans = chosen(listing.spans(), options)
    for label, spec in (("startingOffsets", options.starting), ("endingOffsets", options.ending)):
        if isinstance(spec, dict):
            unknown = [p for p in spec if p not in spans]
            if unknown:
                raise OptionError(
                    f"option {label!r} names partition {unknown[0]!r}, which is not read "
                    f"(topic {options.topic!r} partitions read: {sorted(spans)})"
                )
    out: dict[str, Span] = {}
    for p, stored in sorted(spans.items()):
        start = resolve(options.starting, p, stored, False, "startingOffsets")
        end = resolve(options.ending, p, stored, True, "endingOffsets")
        if end < start:
            raise OptionError(
                f"partition {p!r}: endingOffsets {end} is before startingOffsets {start}"
            )
        if options.index_from is not None:  # pushed-down _index bounds narrow every partition
            start = min(max(start, options.index_from), end)
        if options.index_until is not None:
            end = max(min(end, options.index_until), start)
        out[p] = lost_before(options, p, Span(start, end), stored)
    return out


def lost_before(options: SourceOptions, partition: str, wanted: Span, stored: Span) -> Span:
    """``wanted`` minus what retention already deleted: an error, or skipped with a warning."""
    if wanted.start >= stored.start or wanted.start >= wanted.end:
        return wanted
    gone = Span(wanted.start, min(stored.start, wanted.end))
    report_loss(options, partition, gone)
    return Span(gone.end, wanted.end)


def report_loss(options: SourceOptions, partition: str, gone: Span) -> None:
    message = (
        f"topic {options.topic!r} partition {partition!r}: indexes [{gone.start}, {gone.end}) "
        f"were deleted by retention before they were read"
    )
    if options.fail_on_data_loss:
        raise DataLoss(
            f"{message} (failOnDataLoss=true; set failOnDataLoss=false to skip lost records)"
        )
    log.warning("%s; skipped (failOnDataLoss=false)", message)


def plan(listing: Listing, ranges: dict[str, Span], options: SourceOptions) -> list[Slice]:
    out: list[Slice] = []
    for partition, span in sorted(ranges.items()):
        if span.end > span.start:
            out.extend(listing.slices(partition, span, options))
    return out


def tasks(pieces: Sequence[Slice], bytes_per_task: int) -> list[tuple[Slice, ...]]:
    """Consecutive slices grouped into Spark tasks of about ``bytes_per_task`` on disk.

    Why: a Spark task costs tens of milliseconds however little it reads, so
    one task per small segment (a topic that seals on age) made a read of a
    few MB take seconds. Slices of unknown size (url mode) stay one per task.
    """
    out: list[tuple[Slice, ...]] = []
    group: list[Slice] = []
    size = 0
    for piece in pieces:
        if group and (not piece.bytes or size + piece.bytes > bytes_per_task):
            out.append(tuple(group))
            group, size = [], 0
        group.append(piece)
        size += piece.bytes
        if not piece.bytes:
            out.append(tuple(group))
            group, size = [], 0
    if group:
        out.append(tuple(group))
    return out
