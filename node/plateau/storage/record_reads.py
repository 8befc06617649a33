"""Reading records back: one partition from an index, or a whole topic with a cursor.

A reply holds one schema: when the next segment's schema differs, the reply
stops there with ``SchemaChange`` and the next request continues with the new
schema (plateau's contract).

With an archive, a partition's history starts at its oldest archived segment:
indexes below the local disk's start are read from the archive
(``ArchivedRun``, ``storage.archive.reads``), the rest locally, every index once.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from plateau.protocol.archive import ArchivedSegment
from plateau.protocol.errors import InvalidInput
from plateau.protocol.focus import DataFocus
from plateau.protocol.values import Order, RecordStatus, Span
from plateau.storage.archive.history import ArchivedRun
from plateau.storage.archive.reads import ArchivedFile
from plateau.storage.catalog.manifest import SegmentRow
from plateau.storage.data.decoded_cache import Columns
from plateau.storage.data.open_segment import OpenSegment
from plateau.storage.data.reader_cache import ColumnsOf, ReaderCache
from plateau.storage.data.sealed_reader import SegmentReader
from plateau.storage.partition import PartitionView
from plateau.storage.types import PartitionRead, TimeRange, TopicRead

COMPACT_ABOVE = 4  # copy a read out of buffers over this many times its own size


def _time_mask(table: pa.Table, tr: TimeRange) -> pa.ChunkedArray:
    col = table.column("time")
    if pa.types.is_timestamp(col.type):
        col = pc.cast(col, pa.timestamp("ms", tz=col.type.tz)).cast(pa.int64())
    mask = None
    if tr.start_ms is not None:
        mask = pc.greater_equal(col, tr.start_ms)
    if tr.end_ms is not None:
        upper = pc.less_equal(col, tr.end_ms)
        mask = upper if mask is None else pc.and_(mask, upper)
    assert mask is not None
    return mask


class _Source:
    """A run of rows ``[first, end)`` with one schema, readable by offset.

    A sealed source knows the sealed segment after it (``then``): once a read
    comes near its end, that one is opened and decoded ahead. An archived one
    (``archived``) reads an object of the archive.
    """

    def __init__(
        self,
        first: int,
        end: int,
        schema: pa.Schema,
        times: tuple[int, int] | None,
        reader: SegmentReader | pa.Table | ArchivedFile,
        then: Callable[[], None] | None = None,
    ) -> None:
        self.first = first
        self.end = end
        self.schema = schema
        self.times = times
        self._reader = reader
        self._then = then
        self.archived = isinstance(reader, ArchivedFile)

    def next_match(self, pos: int, time_range: TimeRange) -> int:
        """Where rows in ``time_range`` may be, from ``pos``: an archived source skips
        row groups whose statistics miss it (never fetched); others read on."""
        if not isinstance(self._reader, ArchivedFile):
            return pos
        return min(self.end, self.first + self._reader.next_match(pos - self.first, time_range))

    def read(
        self,
        start: int,
        count: int,
        columns: Columns | None = None,
        compact: bool = True,
        forward: bool = False,
    ) -> pa.Table:
        """``forward``: see ``SegmentReader.read`` (what the read went past is let go of)."""
        offset = start - self.first
        reader = self._reader
        if isinstance(reader, pa.Table):
            rows = reader.slice(offset, count)
            table = rows if columns is None else rows.select(list(columns))
        else:
            if isinstance(reader, SegmentReader):
                table = reader.read(offset, count, columns, forward)
            else:
                table = reader.read(offset, count, columns)
            if self._then is not None and reader.near_end(offset + count):
                self._then()
                self._then = None
        return _compact(table) if compact else table


def _compact(table: pa.Table) -> pa.Table:
    """A copy of ``table`` when it is a small slice of much larger buffers.

    A slice keeps everything it was cut from alive for as long as the reply
    that holds it, outside any memory budget: a decoded row group of a sealed
    segment, or the whole append body an open segment's batch was decoded from
    (Arrow IPC is read without copying). A topic page takes a few rows of every
    partition, so with 64 partitions one page pinned 64 row groups or bodies
    (hundreds of MB), and pages prepared ahead pinned more. The copy is each
    column's chunks concatenated (new buffers holding just the slice): half to a
    fifth of what ``take`` cost (0.06 ms against 0.13-0.30 ms for a 10,000-row
    page of a 64k-row group), for the rows in the reply only.

    A partition read skips it (``compact=False``, ``Engine.read_partition``): the
    server encodes its one partition's rows into the reply at once, and the copy
    cost a Parquet topic's first read a tenth of its rate (4-22% over 5 pairs).
    """
    if table.num_rows and table.get_total_buffer_size() > COMPACT_ABOVE * table.nbytes:
        return pa.Table.from_arrays(
            [pa.concat_arrays(column.chunks) for column in table.columns], schema=table.schema
        )
    return table


def _columns(focus: DataFocus, time_range: TimeRange | None, schema: pa.Schema) -> Columns | None:
    """The columns to read for ``focus`` (None: all), with ``time`` when a time range needs it."""
    columns = focus.columns(schema)
    if columns is None or time_range is None or "time" in columns or "time" not in schema.names:
        return columns
    wanted = {*columns, "time"}
    return tuple(name for name in schema.names if name in wanted)


def _sources(
    view: PartitionView,
    data_dir: Path,
    cache: ReaderCache,
    start: int = 0,
    columns_of: ColumnsOf | None = None,
    archive: ArchivedRun | None = None,
    time_range: TimeRange | None = None,
) -> Iterator[_Source]:
    """The runs holding rows at or after ``start``, oldest first (archived ones first).

    Segments that end before ``start`` are skipped without opening them: a
    partition's history can hold many segments, and opening each one for
    every page made topic iteration slower the longer the topic was.
    """
    if archive is not None and start < view.start:
        yield from _archived_sources(archive, start, time_range)
    first = bisect.bisect_right(view.sealed, start, key=lambda row: row.end_index)
    rows = view.sealed[first:]
    for i, row in enumerate(rows):
        after = rows[i + 1] if i + 1 < len(rows) else None
        yield _sealed_source(row, data_dir, cache, after, columns_of)
    for seg, visible in view.pending:
        if visible > 0 and seg.first_index + visible > start:
            yield _pending_source(seg, visible)


def _sources_before(
    view: PartitionView,
    data_dir: Path,
    cache: ReaderCache,
    upper: int,
    archive: ArchivedRun | None = None,
) -> Iterator[_Source]:
    """The runs holding rows below ``upper``, newest first, opened only as reached."""
    for seg, visible in reversed(view.pending):
        if visible > 0 and seg.first_index < upper:
            yield _pending_source(seg, visible)
    last = bisect.bisect_left(view.sealed, upper, key=lambda row: row.first_index)
    for row in reversed(view.sealed[:last]):
        yield _sealed_source(row, data_dir, cache)
    if archive is not None:
        for archived in archive.before(upper):
            src = _archived_source(archive, archived)
            if src is not None:
                yield src


def _archived_sources(
    archive: ArchivedRun, start: int, time_range: TimeRange | None
) -> Iterator[_Source]:
    """Archived segments from ``start``; those outside ``time_range`` are not opened,
    nor those whose object expired at the partition's oldest end (the read moves past)."""
    for seg in archive.after(start):
        if time_range is None or time_range.overlaps(seg.min_time_ms, seg.max_time_ms):
            src = _archived_source(archive, seg)
            if src is not None:
                yield src


def _archived_source(archive: ArchivedRun, seg: ArchivedSegment) -> _Source | None:
    file = archive.open(seg)
    if file is None:
        return None
    times = (seg.min_time_ms, seg.max_time_ms)
    return _Source(seg.start, min(seg.end, archive.local_start), file.schema, times, file)


def _sealed_source(
    row: SegmentRow,
    data_dir: Path,
    cache: ReaderCache,
    after: SegmentRow | None = None,
    columns_of: ColumnsOf | None = None,
) -> _Source:
    """``columns_of``: what a read takes of a segment, so the next one is decoded the same."""
    reader = cache.get(row.id, data_dir / row.path, row.format)
    times = (row.min_time_ms, row.max_time_ms)
    then = None
    if after is not None:
        then = functools.partial(
            cache.prefetch, after.id, data_dir / after.path, after.format, columns_of
        )
    return _Source(row.first_index, row.end_index, reader.schema, times, reader, then)


def _pending_source(seg: OpenSegment, visible: int) -> _Source:
    times = (seg.min_time_ms or 0, seg.max_time_ms or 0)
    end = seg.first_index + visible
    return _Source(seg.first_index, end, seg.schema, times, seg.table(visible))


def read_range(
    view: PartitionView,
    data_dir: Path,
    cache: ReaderCache,
    start: int,
    limit: int,
    time_range: TimeRange | None,
    max_bytes: int | None,
    focus: DataFocus | None = None,
    archive: ArchivedRun | None = None,
    compact: bool = True,
    forward: bool = False,
) -> PartitionRead:
    """Up to ``limit`` rows from ``start`` (clamped to the oldest retained index, in the
    ``archive`` if given).

    With a ``focus`` only the columns it needs are read (plus ``time`` for a
    time range); the caller applies the focus to the result. ``compact=False``
    leaves the rows as slices of what they were read from (see ``_compact``):
    for a caller that encodes them at once and lets go. ``forward``: the caller
    reads on from where this stops, so decoded chunks it passes are let go of
    (``SegmentReader.read``).
    """
    pos = max(start, view.start if archive is None else archive.start)
    tables: list[pa.Table] = []
    schema: pa.Schema | None = None
    rows = 0
    archived = 0
    nbytes = 0
    status = RecordStatus.ALL
    first_pos = pos
    # one rule for the columns read and the columns decoded ahead of the read
    columns_of = None if focus is None else functools.partial(_columns, focus, time_range)
    for src in _sources(view, data_dir, cache, pos, columns_of, archive, time_range):
        pos = max(pos, src.first)  # past archived segments skipped (time range, expired)
        if rows >= limit:
            status = RecordStatus.RECORD_LIMITED
            break
        if max_bytes is not None and nbytes >= max_bytes:
            status = RecordStatus.BYTE_LIMITED
            break
        if time_range is not None and src.times is not None and not time_range.overlaps(*src.times):
            pos = src.end
            continue
        if schema is not None and not src.schema.equals(schema):
            status = RecordStatus.SCHEMA_CHANGE
            break
        columns = columns_of(src.schema) if columns_of is not None else None
        while pos < src.end and rows < limit and (max_bytes is None or nbytes < max_bytes):
            if time_range is not None and (pos := src.next_match(pos, time_range)) >= src.end:
                break
            chunk = min(src.end - pos, limit - rows if time_range is None else max(limit, 1024))
            # a time range may keep fewer rows than it read, and the next page starts among them
            table = src.read(pos, chunk, columns, compact, forward and time_range is None)
            read_rows = table.num_rows
            if time_range is not None:
                mask = _time_mask(table, time_range)
                if rows + pc.sum(mask).as_py() > limit:
                    # keep exactly up to the limit-th match, continue after it next time
                    positions = pc.indices_nonzero(mask).to_pylist()
                    cut = positions[limit - rows - 1] + 1
                    table = table.slice(0, cut)
                    mask = _time_mask(table, time_range)
                    read_rows = cut
                table = table.filter(mask)
            if table.num_rows:
                schema = src.schema
                tables.append(table)
            rows += table.num_rows
            archived += table.num_rows if src.archived else 0
            nbytes += table.nbytes
            pos += read_rows
        if pos < src.end:
            status = RecordStatus.RECORD_LIMITED if rows >= limit else RecordStatus.BYTE_LIMITED
            break
    else:
        status = RecordStatus.ALL
        pos = max(pos, view.end)  # every source read: past any skipped at the end too
    if pos >= view.end and status != RecordStatus.SCHEMA_CHANGE:
        status = RecordStatus.ALL
    table = pa.concat_tables(tables) if tables else _empty(view, data_dir, cache)
    span = Span(first_pos, pos) if pos > first_pos else None
    return PartitionRead(table, span, status, archived)


def _empty(view: PartitionView, data_dir: Path, cache: ReaderCache) -> pa.Table:
    for src in _sources(view, data_dir, cache):
        return src.schema.empty_table()
    return pa.table({})


def read_reverse(
    view: PartitionView,
    data_dir: Path,
    cache: ReaderCache,
    before: int,
    limit: int,
    time_range: TimeRange | None,
    max_bytes: int | None,
    focus: DataFocus | None = None,
    archive: ArchivedRun | None = None,
) -> tuple[PartitionRead, int]:
    """Up to ``limit`` rows below ``before``, newest first, all of one schema.

    Returns the read and the new exclusive upper bound for the cursor.
    """
    start = view.start if archive is None else archive.start
    upper = min(before, view.end)
    lo = max(start, upper - limit)
    # stay within the newest run of one schema below ``upper``
    run_start: int = start
    schema: pa.Schema | None = None
    for src in _sources_before(view, data_dir, cache, upper, archive):
        if src.end < lo:
            break  # older runs cannot move ``lo``: leave them unopened
        if schema is not None and not src.schema.equals(schema):
            run_start = src.end
            break
        schema = src.schema
    lo = max(lo, run_start)
    result = read_range(
        view, data_dir, cache, lo, max(upper - lo, 0), time_range, max_bytes, focus, archive
    )
    table = result.table
    flipped = table.take(pa.array(range(table.num_rows - 1, -1, -1), pa.int64()))
    if lo > start:
        status = RecordStatus.SCHEMA_CHANGE if lo == run_start else RecordStatus.RECORD_LIMITED
    else:
        status = RecordStatus.ALL
    span = Span(lo, upper) if upper > lo else None
    return PartitionRead(flipped, span, status, result.archived), lo


def select_partitions(names: list[str], selectors: list[str] | None) -> list[str]:
    """plateau's partition_filter: exact names, or ``regex:`` patterns."""
    if not selectors:
        return sorted(names)
    chosen: set[str] = set()
    for sel in selectors:
        if sel.startswith("regex:"):
            try:
                pattern = re.compile(sel[len("regex:") :])
            except re.error as exc:
                raise InvalidInput(f"bad partition_filter regex {sel!r}: {exc}") from exc
            chosen.update(n for n in names if pattern.search(n))
        else:
            chosen.update(n for n in names if n == sel)
    return sorted(chosen)


def iterate(
    views: dict[str, Callable[[], PartitionView]],
    data_dir: Path,
    cache: ReaderCache,
    cursor: dict[str, int],
    limit: int,
    order: Order,
    time_range: TimeRange | None,
    max_bytes: int | None,
    focus: DataFocus | None = None,
    archives: Callable[[str, PartitionView], ArchivedRun | None] | None = None,
) -> TopicRead:
    """One page across partitions (sorted by name), all rows of one schema.

    Each partition first gets an even share of ``limit`` so that one busy
    partition cannot starve the others; what is left over goes to whoever still
    has rows. ``next`` holds every selected partition's position.

    ``views`` gives a partition's view when asked: a view holds its open and
    sealing segments (and the append bodies their rows point into), so it is
    taken right before that partition is read and dropped after. Views of all
    partitions taken at the start of a slow page kept every segment sealed
    meanwhile alive, outside the memory budget, for the whole page.

    ``archives`` gives a partition's archived segments below its local start: its
    span then starts in the archive, and a cursor below the local start reads there.
    """
    desc = order == Order.DESC
    spans: dict[str, tuple[int, int]] = {}
    runs: dict[str, ArchivedRun | None] = {}

    def view_of(name: str) -> PartitionView:
        v = views[name]()
        run = runs[name] = archives(name, v) if archives is not None else None
        spans[name] = (v.start if run is None else run.start, v.end)
        return v

    for name in views:
        view_of(name)
    nxt = {name: int(cursor.get(name, spans[name][1 if desc else 0])) for name in views}
    if not desc:
        nxt = {n: max(i, spans[n][0]) for n, i in nxt.items()}
    tables: list[pa.Table] = []
    schema: pa.Schema | None = None
    rows = 0
    archived = 0
    nbytes = 0
    stopped: RecordStatus | None = None
    share = max(1, -(-limit // max(len(views), 1)))
    for quota in (share, limit):
        for name in views:
            want = min(quota, limit - rows)
            if want <= 0 or stopped in (RecordStatus.BYTE_LIMITED,):
                break
            if max_bytes is not None and nbytes >= max_bytes:
                stopped = RecordStatus.BYTE_LIMITED
                break
            budget = None if max_bytes is None else max_bytes - nbytes
            start, end = spans[name]
            if (nxt[name] <= start) if desc else (nxt[name] >= end):
                continue
            view = view_of(name)
            run = runs[name]
            if desc:
                result, new_pos = read_reverse(
                    view, data_dir, cache, nxt[name], want, time_range, budget, focus, run
                )
            else:
                result = read_range(
                    view,
                    data_dir,
                    cache,
                    nxt[name],
                    want,
                    time_range,
                    budget,
                    focus,
                    run,
                    forward=True,
                )
                new_pos = result.span.end if result.span else nxt[name]
            del view
            if (
                result.table.num_rows
                and schema is not None
                and not result.table.schema.equals(schema)
            ):
                stopped = RecordStatus.SCHEMA_CHANGE
                continue
            if result.table.num_rows:
                schema = result.table.schema
                tables.append(result.table)
            rows += result.table.num_rows
            archived += result.archived
            nbytes += result.table.nbytes
            nxt[name] = new_pos
    remaining = any((nxt[n] > s) if desc else (nxt[n] < e) for n, (s, e) in spans.items())
    if not remaining:
        status = RecordStatus.ALL
    elif stopped is not None:
        status = stopped
    elif max_bytes is not None and nbytes >= max_bytes:
        status = RecordStatus.BYTE_LIMITED
    else:
        status = RecordStatus.RECORD_LIMITED
    table = pa.concat_tables(tables) if tables else pa.table({})
    return TopicRead(table, nxt, status, archived)
