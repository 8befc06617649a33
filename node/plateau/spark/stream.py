"""``readStream.format("plateau")``, both modes: micro-batches between per-partition offsets.

An offset is ``{partition: next index}``. Spark writes a micro-batch's end
offset to its checkpoint before running it and runs ``partitions(start,
end)`` again after a restart; indexes never change meaning, so the re-run
reads exactly the same records: nothing twice, nothing skipped. Records
deleted by retention before their micro-batch ran are the only exception,
reported by ``failOnDataLoss``.

``path`` mode sees sealed segments only (the snapshot's ``end``); ``url``
mode sees every acknowledged record.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from plateau.protocol.values import Span
from plateau.spark.modes import open_listing
from plateau.spark.options import OptionError, SourceOptions
from plateau.spark.plan import chosen, lost_before, plan, resolve
from plateau.spark.tasks import arrow_target, inputs, read_input


def cap(start: dict[str, int], end: dict[str, int], limit: int) -> dict[str, int]:
    """``end`` moved back so that at most ``limit`` records lie past ``start``, shared fairly."""
    pending = {p: end[p] - start[p] for p in end if end[p] > start[p]}
    if sum(pending.values()) <= limit:
        return end
    taken = dict.fromkeys(pending, 0)
    remaining = limit
    active = sorted(pending)
    while remaining > 0 and active:
        share = max(1, remaining // len(active))
        for p in list(active):
            take = min(share, pending[p] - taken[p], remaining)
            taken[p] += take
            remaining -= take
            if taken[p] == pending[p]:
                active.remove(p)
            if remaining == 0:
                break
    return {p: start[p] + taken.get(p, 0) if p in pending else end[p] for p in end}


class PlateauStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets from the listing; under ``Trigger.AvailableNow`` never past the ends at start.

    Why the target: without it Spark asked for everything available in one
    micro-batch, except after a restart that re-ran a journaled micro-batch,
    when it stopped after that one (records still there were left for the next
    run). With it, ``maxRecordsPerTrigger`` splits the drain into micro-batches
    as with other triggers, and the query ends once the target is reached.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        if options.ending != "latest" or options.ending_ms is not None:
            raise OptionError(
                "options 'endingOffsets' and 'endingTimestamp' are for batch reads; "
                "a stream reads on as records arrive"
            )
        self.options = options
        self.target = arrow_target(schema)
        self._available_now: dict[str, int] | None = None

    def _spans(self) -> dict[str, Span]:
        return chosen(open_listing(self.options).spans(), self.options)

    def initialOffset(self) -> dict[str, int]:
        return {
            p: resolve(self.options.starting, p, span, False, "startingOffsets")
            for p, span in sorted(self._spans().items())
        }

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {p: span.end for p, span in self._spans().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        spans = self._spans()
        # a partition that appeared since the start is read from its first stored index
        begin = {p: start.get(p, span.start) for p, span in spans.items()}
        begin.update({p: i for p, i in start.items() if p not in spans})
        latest = {p: span.end for p, span in spans.items()}
        if self._available_now is not None:  # nothing appended after the query started
            latest = {p: min(e, self._available_now.get(p, 0)) for p, e in latest.items()}
        end = {p: max(begin[p], latest.get(p, begin[p])) for p in begin}
        if isinstance(limit, ReadMaxRows):
            end = cap(begin, end, limit.max_rows)
        return dict(sorted(end.items()))

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        listing = open_listing(self.options)
        stored = listing.spans()
        ranges: dict[str, Span] = {}
        for p, stop in end.items():
            held = stored.get(p, Span(stop, stop))
            first = start.get(p, held.start)
            if stop > first:
                ranges[p] = lost_before(self.options, p, Span(first, stop), held)
        return inputs(plan(listing, ranges, self.options), self.options, self.target)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_input(partition, self.options, self.target)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the node keeps no reader state; retention alone frees data."""
