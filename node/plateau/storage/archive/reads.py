"""Reads below the local disk: a partition's archived segments read back from object storage.

Why: once retention has removed a segment from the local disk its rows live only in
the archive (``plateau.protocol.archive``). A partition read or a topic iteration that
asks for them is served from there (``record_reads``), so the node's HTTP API, the
Python client and Spark's url mode see one history. Indexes still on the local disk
are read locally even when archived: cheaper.

How an archived segment is read: the first time, one HEAD and one ranged GET of its
Parquet footer (kept for ``FOOTERS`` objects); then ranged GETs of only the row groups
and columns a read needs (the data focus's columns, plus ``time`` for a time range).
Decoded row groups are kept within ``storage.archive.read_cache_bytes`` (the memory
budget's ``archive_cache`` part), least recently used out, so consecutive pages of one
segment fetch each row group once (and one still kept is served after its object
expired). Segments whose
time bounds (the manifest's) miss a read's time range are not opened; row groups whose
``time`` statistics miss it are not fetched.

Expired objects: the node never deletes from the archive; the bucket's lifecycle rule
does, oldest first. An object found gone is skipped when no older archived object of its
partition remains (a listing of the partition's prefix tells): the partition's readable
start moves up to what the archive still has, as local retention moves it, and the node
remembers it (until a restart, when the first read finds it again). An object gone while
an older one remains is a hole in the history: that read fails with 503
``ArchiveUnavailable`` naming the object, as it does when the object storage does not
answer or refuses. Indexes are never skipped silently.

Which archived segments a partition's history has below its local disk, and the
engine's entry point, are in ``history``.

Lock order: ``ArchiveReader._lock`` is a leaf (``plateau.storage.catalog.locks``), held
only to look up or change its dicts. Every request to the object storage runs holding
no lock; reads wanting the same row group at once share one fetch (a future, awaited
outside the lock).
"""

from __future__ import annotations

import bisect
import datetime as dt
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from plateau.protocol.archive import ArchivedSegment
from plateau.protocol.errors import Unavailable
from plateau.storage.metrics import ARCHIVE_READ_BYTES
from plateau.storage.types import TimeRange

FOOTERS = 1024
"""Archived objects whose footer (and open handle) are kept: a few hundred bytes to a few
KiB each; a reader going forward needs one or two per partition."""
GONE_CODES = ("NO_SUCH_KEY", "NoSuchKey", "Path does not exist")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MS = dt.timedelta(milliseconds=1)

Columns = tuple[str, ...]


class ArchiveUnavailable(Unavailable):
    """A read needs the archive and the archive cannot give it: 503, naming the problem."""

    reason = "ArchiveUnavailable"

    def details(self) -> dict[str, object]:
        return {"reason": self.reason}


class _Gone(Exception):
    """The object is not in the bucket (expired by its lifecycle rule, or deleted)."""


class ArchiveExpired(FileNotFoundError):
    """An object expired at the partition's oldest end while a read was in it (its footer
    was kept from before). A ``FileNotFoundError``, as a local segment that retention
    removed mid-read: the engine reads again (``Engine._retrying_deleted``) and the fresh
    run leaves the expired segments out."""


@dataclass(frozen=True)
class _Footer:
    handle: pa.NativeFile  # ranged reads; opened once (its HEAD paid once)
    metadata: pq.FileMetaData
    schema: pa.Schema
    starts: tuple[int, ...]  # first row of each row group, then the row count
    times: tuple[tuple[int, int] | None, ...]  # each row group's time bounds (ms), if known


def _ms(value: object) -> int | None:
    """A ``time`` statistic in epoch milliseconds (floored), None if not understood."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return (aware - _EPOCH) // _MS
    return None


def _group_times(meta: pq.FileMetaData) -> tuple[tuple[int, int] | None, ...]:
    column = next(
        (j for j in range(meta.num_columns) if meta.schema.column(j).path == "time"), None
    )
    out: list[tuple[int, int] | None] = []
    for i in range(meta.num_row_groups):
        stats = None if column is None else meta.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max:
            out.append(None)
            continue
        lo, hi = _ms(stats.min), _ms(stats.max)
        out.append(None if lo is None or hi is None else (lo, hi))
    return tuple(out)


def _fetched_bytes(meta: pq.FileMetaData, group: int, columns: Columns | None) -> int:
    """Bytes a ranged read of ``group`` takes (its column chunks, only ``columns``' if given)."""
    rg = meta.row_group(group)
    total = 0
    for j in range(rg.num_columns):
        chunk = rg.column(j)
        if columns is None or chunk.path_in_schema.split(".")[0] in columns:
            total += chunk.total_compressed_size
    return total


def _strip_plateau_metadata(schema: pa.Schema) -> pa.Schema:
    """The schema without plateau's span keys (``plateau.first_index``...): they describe
    the object, not the records, and a local segment's reply carries none."""
    meta = schema.metadata
    if not meta or not any(k.startswith(b"plateau.") for k in meta):
        return schema
    return schema.with_metadata({k: v for k, v in meta.items() if not k.startswith(b"plateau.")})


class ArchiveReader:
    """Archived Parquet objects read by ranged GETs, decoded row groups cached by bytes."""

    def __init__(self, fs: Callable[[], pafs.FileSystem], root: str, cache_bytes: int) -> None:
        self._fs = fs  # asked each time: the archive's client is rebuilt after a refusal
        self._root = root
        self._budget = cache_bytes
        self._lock = threading.Lock()  # a leaf: the dicts below only
        self._footers: OrderedDict[str, _Footer] = OrderedDict()
        self._groups: OrderedDict[tuple[str, str, int, Columns | None], pa.Table] = OrderedDict()
        self._size = 0
        self._fetching: dict[tuple[str, str, int, Columns | None], Future[pa.Table]] = {}
        self._expired: dict[tuple[str, str], int] = {}  # (topic, partition) -> gone below

    def path(self, seg: ArchivedSegment) -> str:
        return f"{self._root}/{seg.key}"

    @property
    def cached_bytes(self) -> int:
        return self._size

    # --- expiry -------------------------------------------------------------------------
    def expired_below(self, topic: str, partition: str) -> int:
        """Indexes below this are known gone from the archive (0: none known)."""
        with self._lock:
            return self._expired.get((topic, partition), 0)

    def _found_gone(
        self,
        topic: str,
        seg: ArchivedSegment,
        older: list[ArchivedSegment],
        later: list[ArchivedSegment],
        cause: Exception,
    ) -> None:
        """``seg``'s object is gone: skip it if nothing older remains, else a 503. The
        listing also tells which ``later`` ones expired with it: skipped at once."""
        directory = self.path(seg).rsplit("/", 1)[0]
        try:
            listed = self._fs().get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        except OSError as exc:
            raise self._unavailable(topic, seg, exc) from exc
        present = {info.path for info in listed}
        remaining = [s for s in older if self.path(s) in present]
        if remaining:
            first = remaining[0]
            raise ArchiveUnavailable(
                f"archive: s3://{self.path(seg)} (indexes [{seg.start}, {seg.end}) of "
                f"{topic}/{seg.partition}) is gone from the bucket while older archived "
                f"segments remain (s3://{self.path(first)}): a hole in the history, not "
                f"skipped ({cause})"
            )
        gone_below = seg.end
        for s in later:
            if self.path(s) in present:
                break
            gone_below = s.end
        with self._lock:
            key = (topic, seg.partition)
            self._expired[key] = max(self._expired.get(key, 0), gone_below)
            self._footers.pop(self.path(seg), None)

    def _missing(self, path: str) -> bool:
        """Whether the object is known gone (False when the archive does not answer)."""
        try:
            return bool(self._fs().get_file_info(path).type == pafs.FileType.NotFound)
        except OSError:
            return False

    def _unavailable(self, topic: str, seg: ArchivedSegment, exc: BaseException) -> Exception:
        return ArchiveUnavailable(
            f"archive: cannot read s3://{self.path(seg)} (indexes [{seg.start}, {seg.end}) of "
            f"{topic}/{seg.partition}, no longer on the local disk): {exc}"
        )

    # --- footers ------------------------------------------------------------------------
    def open(
        self,
        topic: str,
        seg: ArchivedSegment,
        older: list[ArchivedSegment],
        later: list[ArchivedSegment],
    ) -> ArchivedFile | None:
        """The segment ready to read, or None when its object expired at the partition's
        oldest end (skip it). ``older``, ``later``: the partition's archived segments
        before and after it (below the local disk)."""
        path = self.path(seg)
        with self._lock:
            footer = self._footers.get(path)
            if footer is not None:
                self._footers.move_to_end(path)
        if footer is None:
            try:
                footer = self._fetch_footer(topic, seg)
            except _Gone as exc:
                self._found_gone(topic, seg, older, later, exc)
                return None
            with self._lock:
                self._footers[path] = footer
                while len(self._footers) > FOOTERS:
                    self._footers.popitem(last=False)
        return ArchivedFile(self, topic, seg, (older, later), footer)

    def _fetch_footer(self, topic: str, seg: ArchivedSegment) -> _Footer:
        try:
            handle = self._fs().open_input_file(self.path(seg))
            meta = pq.ParquetFile(handle, pre_buffer=False).metadata
        except FileNotFoundError as exc:
            raise _Gone(str(exc)) from exc
        except (OSError, pa.ArrowException) as exc:
            if any(code in str(exc) for code in GONE_CODES):
                raise _Gone(str(exc)) from exc
            raise self._unavailable(topic, seg, exc) from exc
        if meta.num_rows != seg.rows:
            raise ArchiveUnavailable(
                f"archive: s3://{self.path(seg)} holds {meta.num_rows} rows, the manifest "
                f"says {seg.rows} (indexes [{seg.start}, {seg.end})): not read"
            )
        footer_bytes = meta.serialized_size + 8
        ARCHIVE_READ_BYTES.labels(topic).inc(footer_bytes)
        starts = [0]
        for i in range(meta.num_row_groups):
            starts.append(starts[-1] + meta.row_group(i).num_rows)
        schema = _strip_plateau_metadata(meta.schema.to_arrow_schema())
        return _Footer(handle, meta, schema, tuple(starts), _group_times(meta))

    # --- row groups ---------------------------------------------------------------------
    def group(self, file: ArchivedFile, index: int, columns: Columns | None) -> pa.Table:
        """Row group ``index`` of ``file`` decoded (only ``columns``), fetched at most once
        while cached, and once for all readers asking at the same time."""
        key = (file.path, file.segment.etag, index, columns)
        with self._lock:
            table = self._groups.get(key)
            if table is not None:
                self._groups.move_to_end(key)
                return table
            pending = self._fetching.get(key)
            if pending is None:
                mine: Future[pa.Table] = Future()
                self._fetching[key] = mine
        if pending is not None:
            return pending.result()  # the fetching thread's result, or its error
        try:
            table = self._fetch_group(file, index, columns)
        except BaseException as exc:
            with self._lock:
                del self._fetching[key]
            mine.set_exception(exc)
            raise
        with self._lock:
            del self._fetching[key]
            if table.nbytes <= self._budget:
                self._groups[key] = table
                self._size += table.nbytes
                while self._size > self._budget:
                    _, dropped = self._groups.popitem(last=False)
                    self._size -= dropped.nbytes
        mine.set_result(table)
        return table

    def _fetch_group(self, file: ArchivedFile, index: int, columns: Columns | None) -> pa.Table:
        footer = file.footer
        try:
            # pre_buffer: the column chunks of the row group in few coalesced ranged GETs
            parquet = pq.ParquetFile(footer.handle, metadata=footer.metadata, pre_buffer=True)
            table = parquet.read_row_group(
                index, columns=None if columns is None else list(columns), use_threads=False
            )
        except (OSError, pa.ArrowException) as exc:
            if self._missing(file.path):
                # expired after its footer was read (S3 servers differ in how a ranged GET
                # of a gone key fails: asked): a hole is a 503, the oldest end is skipped
                # by reading again
                self._found_gone(file.topic, file.segment, *file.neighbours, exc)
                raise ArchiveExpired(f"s3://{file.path} expired at the oldest end") from exc
            with self._lock:  # open it again next time, with the archive's current client
                self._footers.pop(file.path, None)
            raise self._unavailable(file.topic, file.segment, exc) from exc
        ARCHIVE_READ_BYTES.labels(file.topic).inc(_fetched_bytes(footer.metadata, index, columns))
        return table.replace_schema_metadata(footer.schema.metadata)


class ArchivedFile:
    """One archived segment opened for reading: rows by offset, as a local segment reads."""

    def __init__(
        self,
        reader: ArchiveReader,
        topic: str,
        segment: ArchivedSegment,
        neighbours: tuple[list[ArchivedSegment], list[ArchivedSegment]],
        footer: _Footer,
    ) -> None:
        self.reader = reader
        self.topic = topic
        self.segment = segment
        self.neighbours = neighbours  # (older, later), as ``ArchiveReader.open`` takes them
        self.footer = footer
        self.path = reader.path(segment)

    @property
    def schema(self) -> pa.Schema:
        return self.footer.schema

    def read(self, offset: int, count: int, columns: Columns | None = None) -> pa.Table:
        """Rows ``[offset, offset + count)`` of the segment (fewer at its end)."""
        starts = self.footer.starts
        end = min(offset + count, starts[-1])
        parts: list[pa.Table] = []
        group = bisect.bisect_right(starts, offset) - 1
        while offset < end:
            table = self.reader.group(self, group, columns)
            lo, hi = offset - starts[group], min(end, starts[group + 1]) - starts[group]
            parts.append(table.slice(lo, hi - lo))
            offset = starts[group] + hi
            group += 1
        if not parts:
            schema = self.schema
            if columns is not None:
                schema = pa.schema([schema.field(c) for c in columns], metadata=schema.metadata)
            return schema.empty_table()
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def near_end(self, offset: int) -> bool:
        return False  # nothing is fetched ahead (yet): a page waits for its row group

    def next_match(self, offset: int, time_range: TimeRange) -> int:
        """The first offset at or after ``offset`` in a row group that may hold rows in
        ``time_range`` (by its ``time`` statistics); the row count if none does."""
        starts, times = self.footer.starts, self.footer.times
        group = bisect.bisect_right(starts, offset) - 1
        while group < len(times):
            bounds = times[group]
            if bounds is None or time_range.overlaps(*bounds):
                return max(offset, starts[group])
            group += 1
        return starts[-1]
