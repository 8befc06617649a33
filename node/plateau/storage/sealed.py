"""Sealed segments: writing them once, reading them many times.

A sealed file is immutable and complete (``files.publish`` or the footer
written, fsynced and renamed); the manifest row that names it is committed
only afterwards.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections import OrderedDict
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from plateau.storage.files import PAGE, publish
from plateau.storage.types import SegmentId

PARQUET_ROW_GROUP = 65_536
READ_AHEAD_BYTES = 8 * 1024 * 1024
DICTIONARY_SAMPLE_ROWS = 4096
DICTIONARY_MAX_DISTINCT = 0.5
STREAM_START = 8  # Arrow file magic and padding before the stream of messages


def sealed_name(first_index: int, segment_id: int, fmt: str) -> str:
    return f"{first_index:020d}-{segment_id}.{fmt}"


def dictionary_columns(table: pa.Table) -> list[str]:
    """Columns whose values repeat enough for a dictionary, judged on a sample.

    Parquet's writer gives up on a dictionary only after hashing a page's worth
    of values and finding it too big, so asking for one on a near-unique column
    (``time``, ids, random or free-text payloads) is pure cost: with random
    values that attempt was a fifth of the CPU of a seal. Counting distinct
    values in the first ``DICTIONARY_SAMPLE_ROWS`` rows costs about 2 ms per
    segment; a column where at most ``DICTIONARY_MAX_DISTINCT`` of them differ
    (keys, enums, categories) still gets its dictionary.
    """
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    limit = sample.num_rows * DICTIONARY_MAX_DISTINCT
    chosen = []
    for name, column in zip(table.schema.names, sample.columns, strict=True):
        try:
            distinct = pc.count_distinct(column, mode="all").as_py()
        except pa.ArrowNotImplementedError:
            chosen.append(name)  # a nested type: leave the choice to the writer
            continue
        if distinct <= limit:
            chosen.append(name)
    return chosen


def write_sealed(
    final: Path, table: pa.Table, fmt: str, compression: str, drop_pages: bool = True
) -> int:
    """Write ``table`` as a complete sealed file at ``final``; returns its size in bytes."""
    codec = None if compression == "none" else compression

    def write(f: BinaryIO) -> None:
        if fmt == "parquet":
            pq.write_table(
                table,
                f,
                row_group_size=PARQUET_ROW_GROUP,
                compression=codec or "none",
                use_dictionary=dictionary_columns(table),
                write_statistics=True,
            )
        else:
            options = pa.ipc.IpcWriteOptions(compression=codec)
            with pa.ipc.new_file(f, table.schema, options=options) as writer:
                writer.write_table(table)

    return publish(final, write, drop_pages)


def read_whole(path: Path, fmt: str) -> pa.Table:
    if fmt == "parquet":
        return pq.read_table(path)
    with pa.memory_map(str(path)) as source:
        return pa.Table.from_batches(*_arrow_batches(source))


def _arrow_batches(source: pa.NativeFile) -> tuple[list[pa.RecordBatch], pa.Schema]:
    """Batches of an Arrow segment; one sealed in place on a full volume has no footer."""
    try:
        reader = pa.ipc.open_file(source)
        return [reader.get_batch(i) for i in range(reader.num_record_batches)], reader.schema
    except pa.ArrowInvalid:
        source.seek(STREAM_START)
        stream = pa.ipc.open_stream(source)
        return list(stream), stream.schema


class DecodedCache:
    """The last decoded run of each segment, within one byte budget for all of them.

    Why: topic iteration takes a share of every partition per page, so without
    it each row group or compressed batch is decoded once per page that
    touches it (4x for 4 partitions). Sealed files are immutable and their
    paths never reused, so a path names its contents for good.
    """

    def __init__(self, budget_bytes: int) -> None:
        self._lock = threading.Lock()
        self._budget = budget_bytes
        self._size = 0
        self._runs: OrderedDict[str, tuple[int, int, pa.Table]] = OrderedDict()

    def get(self, key: str, first: int, last: int) -> tuple[int, pa.Table] | None:
        """The cached run of ``key`` covering chunks ``first..last``: (its first chunk, table)."""
        with self._lock:
            run = self._runs.get(key)
            if run is None or not (run[0] <= first and last <= run[1]):
                return None
            self._runs.move_to_end(key)
            return run[0], run[2]

    def put(self, key: str, first: int, last: int, table: pa.Table) -> None:
        size = table.nbytes
        with self._lock:
            self._drop_locked(key)
            if size > self._budget:
                return
            self._runs[key] = (first, last, table)
            self._size += size
            while self._size > self._budget:
                _, (_, _, old) = self._runs.popitem(last=False)
                self._size -= old.nbytes

    def drop(self, key: str) -> None:
        with self._lock:
            self._drop_locked(key)

    def _drop_locked(self, key: str) -> None:
        old = self._runs.pop(key, None)
        if old is not None:
            self._size -= old[2].nbytes


class SegmentReader:
    """Random access by row offset into one sealed file; safe to share between threads.

    Arrow segments are read with pread (``pa.OSFile``), parquet segments
    through a memory map (pyarrow's buffered parquet reads cost about twice
    the CPU per row here). The reader asks
    the kernel to read ahead (``posix_fadvise(WILLNEED)``) the next
    ``READ_AHEAD_BYTES`` past every run it decodes: the disk then works while
    this page is encoded and sent. Once a run of an arrow segment is decoded
    (a copy the ``DecodedCache`` keeps), its pages are dropped from the page cache
    (``drop_pages``, setting ``storage.drop_read_pages``), as the write path
    drops what it wrote (``files.PageDropper``). Why: a history scan would
    otherwise fill the page cache with pages read once, and on VMs that hand
    free guest memory back to the host every newly cached page costs a host
    page fault. Measured here (bench/read.py, first pass after a restart,
    arrow): memory-mapped and cached 1.9-2.8M rows/s at 0.9 node cores and
    1.1 GB RSS, dropped 3.1-3.8M rows/s at 0.75 cores and 180 MB RSS (a raw
    scan of a cold file here: 0.73 GB/s at 1.2 ns CPU per byte keeping the
    pages, 3.3 GB/s at 0.06 ns dropping them behind). Pages that are not
    mapped can be dropped and never count as the node's RSS.

    Offsets are estimated from row positions (rows are of similar size within
    a segment); a wrong guess costs only a wasted or a missing hint or a page
    read twice, never a wrong read.
    """

    def __init__(
        self,
        path: Path,
        fmt: str,
        decoded: DecodedCache | None = None,
        drop_pages: bool = True,
        hints: Executor | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._drop = drop_pages
        self._hints = hints
        self._fd_lock = threading.Lock()  # held while the descriptor is advised or closed
        self._fd_open = True
        self._key = str(path)
        self._cache = decoded if decoded is not None else DecodedCache(0)
        self.fmt = fmt
        self._source: pa.NativeFile | None = None
        self._parquet: pq.ParquetFile | None = None
        self._batches: list[pa.RecordBatch] = []
        self._file_reader: pa.ipc.RecordBatchFileReader | None = None
        self._fd = os.open(path, os.O_RDONLY)
        # closes the descriptor when the reader is dropped without close() (evicted after
        # retention deleted its file): an open descriptor would keep the file's space in use
        self._close_fd = weakref.finalize(self, _close_quietly, self._fd)
        self._size = os.fstat(self._fd).st_size
        self._read_ahead_to = 0
        try:
            counts = self._open(path, fmt)
        except BaseException:
            self._close_fd()
            raise
        self._starts = [0]
        for c in counts:
            self._starts.append(self._starts[-1] + c)

    def _open(self, path: Path, fmt: str) -> list[int]:
        """Open the file; returns the rows of each row group (parquet) or batch (arrow)."""
        if fmt == "parquet":
            # memory-mapped: pyarrow's buffered parquet reads cost twice the CPU here
            self._parquet = pq.ParquetFile(path, memory_map=True)
            meta = self._parquet.metadata
            self.schema: pa.Schema = self._parquet.schema_arrow
            return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        # read with pread, not mapped: see the class docstring
        self._source = pa.OSFile(str(path))
        try:
            self._file_reader = pa.ipc.open_file(self._source)
        except pa.ArrowInvalid:
            self._file_reader = None  # sealed in place on a full volume: a stream
            self._batches, self.schema = _arrow_batches(self._source)
            return [b.num_rows for b in self._batches]
        self.schema = self._file_reader.schema
        return _batch_rows(path)

    @property
    def key(self) -> str:
        return self._key

    @property
    def rows(self) -> int:
        return self._starts[-1]

    def read(self, offset: int, count: int) -> pa.Table:
        """Rows ``[offset, offset + count)`` of the segment."""
        end = min(offset + count, self.rows)
        if end <= offset:
            return self.schema.empty_table()
        first = _chunk_of(self._starts, offset)
        last = _chunk_of(self._starts, end - 1)
        cached = self._cache.get(self._key, first, last)
        if cached is not None:
            run_first, run = cached
            table = run.slice(
                self._starts[first] - self._starts[run_first],
                self._starts[last + 1] - self._starts[first],
            )
        else:
            self._read_ahead(last + 1)
            with self._lock:
                table = self._decode(first, last)
            self._drop_pages(first, last)
            self._cache.put(self._key, first, last, table)
        base = self._starts[first]
        return table.slice(offset - base, end - offset)

    def _decode(self, first: int, last: int) -> pa.Table:
        """Row groups (parquet) or batches (arrow) ``first..last`` as one table."""
        if self._parquet is not None:
            return self._parquet.read_row_groups(list(range(first, last + 1)))
        reader = self._file_reader
        batches = (
            [reader.get_batch(i) for i in range(first, last + 1)]
            if reader is not None
            else self._batches[first : last + 1]
        )
        return pa.Table.from_batches(batches, schema=self.schema)

    def _offset(self, chunk: int) -> int:
        """Estimated file offset where ``chunk`` starts (rows are of similar size)."""
        return self._size * self._starts[chunk] // self.rows

    def _drop_pages(self, first: int, last: int) -> None:
        """Drop the decoded run's pages from the page cache: the decoded copy is what is kept.

        Pages wholly inside the estimated range only; a wrong estimate costs a
        page read again, never a wrong read.
        """
        if not self._drop or self._file_reader is None:
            return  # parquet: mapped pages stay cached; footerless arrow: already in memory
        begin = -(-self._offset(first) // PAGE) * PAGE
        end = self._offset(last + 1) // PAGE * PAGE
        if end > begin:
            self._advise(begin, end - begin, os.POSIX_FADV_DONTNEED)

    def _read_ahead(self, chunk: int) -> None:
        """Hint the kernel to read the file from ``chunk`` on, if not already hinted."""
        if chunk >= len(self._starts) - 1 or self.rows == 0:
            return
        begin = self._offset(chunk)
        if begin + READ_AHEAD_BYTES // 2 < self._read_ahead_to:
            return  # the last hint still reaches far enough ahead
        begin = max(begin, self._read_ahead_to)
        end = min(self._size, begin + READ_AHEAD_BYTES)
        self._read_ahead_to = end
        if end > begin:
            self._advise(begin, end - begin, os.POSIX_FADV_WILLNEED)

    def _advise(self, offset: int, length: int, advice: int) -> None:
        """``posix_fadvise``, on the hints thread when there is one.

        Why a thread: WILLNEED allocates the page cache and queues the reads
        before it returns, about 0.2 ms per 8 MiB here (strace), on the path of
        every page that starts a new batch; nothing waits for a hint.
        """
        if self._hints is None:
            self._advise_now(offset, length, advice)
            return
        with contextlib.suppress(RuntimeError):  # shut down: the node is closing
            self._hints.submit(self._advise_now, offset, length, advice)

    def _advise_now(self, offset: int, length: int, advice: int) -> None:
        with self._fd_lock:
            if self._fd_open:
                with contextlib.suppress(OSError):
                    os.posix_fadvise(self._fd, offset, length, advice)

    def close(self) -> None:
        """Close the files under the locks, so that no decode or hint is using them meanwhile.

        (A pread or fadvise racing a close could otherwise use a descriptor
        number that another file reopened in between.)
        """
        with self._lock:
            self._cache.drop(self._key)
            if self._source is not None:
                self._source.close()
            with self._fd_lock:
                self._fd_open = False
                self._close_fd()


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _batch_rows(path: Path) -> list[int]:
    """Rows of each batch of an Arrow file, reading little more than the metadata.

    Why only the first column: decoding every batch read (and
    decompressed) the whole segment from disk before the first page of a
    history read went out, 300-430 ms per 64 MiB segment. Decoding only the
    first column through a descriptor advised ``RANDOM`` (no read-ahead) reads
    about 2 MiB of it and takes about 16 ms cold.
    """
    fd = os.open(path, os.O_RDONLY)
    with os.fdopen(fd, "rb", buffering=0) as raw:
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        first_only = pa.ipc.IpcReadOptions(included_fields=[0])
        reader = pa.ipc.open_file(pa.PythonFile(raw, mode="r"), options=first_only)
        return [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]


def _chunk_of(starts: list[int], row: int) -> int:
    import bisect

    return bisect.bisect_right(starts, row) - 1


class ReaderCache:
    """Open readers by segment id, least recently used evicted first.

    Owns the thread that passes the readers' page-cache hints to the kernel.
    """

    def __init__(
        self, capacity: int = 32, decoded_bytes: int = 64 * 1024 * 1024, drop_pages: bool = True
    ) -> None:
        self._lock = threading.Lock()
        self._drop_pages = drop_pages
        self._capacity = capacity
        self._decoded = DecodedCache(decoded_bytes)
        self._readers: OrderedDict[SegmentId, SegmentReader] = OrderedDict()
        self._hints = ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-hints")

    def get(self, segment_id: SegmentId, path: Path, fmt: str) -> SegmentReader:
        with self._lock:
            reader = self._readers.get(segment_id)
            if reader is not None:
                self._readers.move_to_end(segment_id)
                return reader
        reader = SegmentReader(path, fmt, self._decoded, self._drop_pages, self._hints)
        with self._lock:
            self._readers[segment_id] = reader
            while len(self._readers) > self._capacity:
                _, old = self._readers.popitem(last=False)
                old.close()
        return reader

    def open_readers(self) -> int:
        with self._lock:
            return len(self._readers)

    def evict(self, segment_id: SegmentId) -> None:
        """Drop a deleted segment's reader; a read in flight keeps its file until it ends."""
        with self._lock:
            reader = self._readers.pop(segment_id, None)
        if reader is not None:
            self._decoded.drop(reader.key)

    def close(self) -> None:
        """Drop pending hints and close every reader (engine shutdown)."""
        self._hints.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            readers = list(self._readers.values())
            self._readers.clear()
        for reader in readers:
            reader.close()
