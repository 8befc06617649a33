"""Reading sealed segments: random access by row, decoded chunks cached and decoded ahead.

A chunk is what a segment is decoded in: a row group (parquet, about 64k
rows) or a record batch (arrow, one append). Sealed files are immutable and
their paths never reused, so ``(path, chunk)`` names a decoded chunk for good.

Why decode ahead: a reader going forward through history (topic iteration,
partition reads, Spark-like scans) needs the next chunk soon after this one.
Decoding it on the request's thread stalled every page that crossed into a
new row group (four partitions roll over together: about 50 ms every 26
pages, three quarters of a parquet history scan's time). Decoding runs in
C++ without the GIL, so a background thread does it on the core the event
loop does not use, and the page finds the chunk decoded.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import logging
import os
import threading
import weakref
from concurrent.futures import Executor, Future
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from prometheus_client import Counter

from plateau.storage.data.arrow_footer import (
    Block,
    batch_header,
    batch_metadata,
    record_batch_blocks,
)
from plateau.storage.data.decoded_cache import ChunkId, Columns, DecodedCache
from plateau.storage.data.direct_io import open_direct, read_bytes_direct
from plateau.storage.data.page_hints import READ_AHEAD_BYTES, PageHints
from plateau.storage.data.parquet_chunks import (
    DirectRowGroups,
    dense,
    dictionary_leaves,
    row_group_end,
)
from plateau.storage.data.sealed_writer import arrow_batches
from plateau.storage.data.stored_batches import StoredAhead, StoredBatches
from plateau.storage.metrics import READ_BATCHES_STORED, READ_CHUNKS

log = logging.getLogger(__name__)

_DEMAND = READ_CHUNKS.labels(how="demand")
_AHEAD = READ_CHUNKS.labels(how="ahead")


class SegmentReader:
    """Random access by row offset into one sealed file; safe to share between threads.

    Arrow batches and Parquet row groups are read with ``O_DIRECT`` where the
    filesystem allows it (``direct``, setting ``storage.direct_reads``; see
    ``direct_io`` and ``parquet_chunks``): they never enter the page cache.
    Otherwise segments are read with pread (``pa.OSFile``), never mapped. With a
    ``decoder`` executor the chunks of
    the next ``READ_AHEAD_BYTES`` are decoded in the background (see the
    module docstring). Reads through the page cache also ask the kernel to
    read ahead (``posix_fadvise(WILLNEED)``), and once a chunk is decoded (a
    copy the ``DecodedCache`` keeps) its pages are dropped from the page
    cache (``drop_pages``, setting ``storage.drop_read_pages``), as the write
    path drops what it wrote (``files.PageDropper``). Why: a history scan
    would otherwise fill the page cache with pages read once, and on VMs that
    hand free guest memory back to the host every newly cached page costs a
    host page fault. Pages that are not mapped can be dropped and never count
    as the node's RSS.

    Chunk offsets come from the file's footer (parquet row groups, arrow
    blocks). Only an arrow file sealed in place without a footer has them
    estimated from row positions (rows are of similar size within a segment);
    a wrong guess there costs only a wasted or a missing hint, never a wrong
    read.
    """

    def __init__(
        self,
        path: Path,
        fmt: str,
        decoded: DecodedCache | None = None,
        drop_pages: bool = True,
        hints: Executor | None = None,
        decoder: Executor | None = None,
        direct: bool = False,
    ) -> None:
        self._lock = threading.Lock()  # held while decoding: pyarrow's file readers are not shared
        self._state_lock = threading.Lock()  # guards _pending
        self._pending: dict[ChunkId, Future[pa.Table]] = {}
        self._drop = drop_pages
        self._decoder = decoder
        self._closed = False
        self._key = str(path)
        self._cache = decoded if decoded is not None else DecodedCache(0)
        self.fmt = fmt
        self._source: pa.NativeFile | None = None
        self._parquet: pq.ParquetFile | None = None
        self._ends: list[int] = []  # file offset past each chunk, where the file says it
        self._batches: list[pa.RecordBatch] = []
        self._file_reader: pa.ipc.RecordBatchFileReader | None = None
        # readers that decode only some fields, by the columns they decode (under _lock)
        self._projected: dict[Columns, pa.ipc.RecordBatchFileReader] = {}
        self._blocks: list[Block] = []  # where each batch lies (from the footer)
        self._codecs: list[int | None] = []  # each batch's codec (None: plain), read at open
        self._direct_fd: int | None = None
        self._row_groups: DirectRowGroups | None = None  # parquet, read with O_DIRECT
        self._fd = os.open(path, os.O_RDONLY)
        # closes the descriptor when the reader is dropped without close() (evicted after
        # retention deleted its file): an open descriptor would keep the file's space in use
        self._close_fd = weakref.finalize(self, _close_quietly, self._fd)
        self._size = os.fstat(self._fd).st_size
        self._pages = PageHints(self._fd, self._size, hints)
        self._stored_ahead = StoredAhead(decoder, self._cache)
        try:
            counts = self._open(path, fmt)
            if direct and (self._file_reader is not None or self._parquet is not None):
                self._open_direct(path)
        except BaseException:
            self._close_fd()
            raise
        self._starts = [0]
        for c in counts:
            self._starts.append(self._starts[-1] + c)

    def _open(self, path: Path, fmt: str) -> list[int]:
        """Open the file; returns the rows of each chunk."""
        self._source = pa.OSFile(str(path))
        if fmt == "parquet":
            # no pre-buffering: it keeps the last row group's raw bytes (about 8 MiB) in each
            # open reader, 256 MiB over 32 readers, on top of the decoded cache
            meta = pq.read_metadata(self._source)
            schema = meta.schema.to_arrow_schema()
            # text columns stored with a dictionary are decoded as one (``parquet_chunks``)
            dictionaries = (
                dictionary_leaves(meta.row_group(0), schema) if meta.num_row_groups else []
            )
            self._parquet = pq.ParquetFile(
                self._source, pre_buffer=False, metadata=meta, read_dictionary=dictionaries
            )
            self.schema: pa.Schema = schema  # the file's (the reader's has the dictionaries)
            groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
            self._ends = [row_group_end(g) for g in groups]
            return [g.num_rows for g in groups]
        try:
            self._file_reader = pa.ipc.open_file(self._source)
        except pa.ArrowInvalid:
            self._file_reader = None  # sealed in place on a full volume: a stream
            self._batches, self.schema = arrow_batches(self._source)
            return [b.num_rows for b in self._batches]
        self.schema = self._file_reader.schema
        try:
            blocks = record_batch_blocks(self._fd)
            if len(blocks) != self._file_reader.num_record_batches:
                raise ValueError("the footer's blocks are not the reader's batches")
            headers = [batch_header(meta) for meta in batch_metadata(self._fd, blocks)]
        except (OSError, ValueError):
            return _batch_rows(path)
        self._blocks = blocks
        self._codecs = [h.codec for h in headers]
        self._ends = [block.offset + block.length for block in blocks]
        return [h.rows for h in headers]

    def _open_direct(self, path: Path) -> None:
        """Read chunks with ``O_DIRECT`` where the file and its schema allow it."""
        if self._parquet is None and (not self._blocks or _has_dictionary(self.schema)):
            return  # no footer blocks, or a dictionary batch needed: pyarrow's reader reads it
        fd = open_direct(path)
        if fd is None:
            return
        self._direct_fd = fd
        self._close_direct = weakref.finalize(self, _close_quietly, fd)
        if self._parquet is not None:
            self._row_groups = DirectRowGroups(fd, self._parquet.metadata, self._size)

    @property
    def direct(self) -> bool:
        """Whether chunks are read with ``O_DIRECT`` (not through the page cache)."""
        return self._direct_fd is not None

    @property
    def key(self) -> str:
        return self._key

    @property
    def rows(self) -> int:
        return self._starts[-1]

    @property
    def chunks(self) -> int:
        return len(self._starts) - 1

    def near_end(self, offset: int) -> bool:
        """Whether row ``offset`` is within the last ``READ_AHEAD_BYTES`` of the file.

        From there on a forward read opens the next segment ahead (a cold
        parquet footer or arrow batch metadata is a disk read or two), and its
        first chunk is decoded before the read reaches it.
        """
        if offset >= self.rows:
            return True
        return self._offset(_chunk_of(self._starts, offset)) + READ_AHEAD_BYTES >= self._size

    def read(
        self, offset: int, count: int, columns: Columns | None = None, forward: bool = False
    ) -> pa.Table:
        """Rows ``[offset, offset + count)`` of the segment; only ``columns`` when given.

        A projection is decoded on its own (only those parquet column chunks
        are read, only those Arrow fields decoded) and cached apart from the
        whole chunk.

        ``forward``: the caller goes on forward from ``offset + count`` (a
        partition read, topic iteration in ascending order), so the chunks this
        read went past are let go of at once. Why: left to the least-recent rule
        they stayed until the whole budget was full of row groups nobody would
        read again, and a fresh node's first scan faulted all that memory in
        (128 MiB of cache took 300 MiB of RSS with four readers; those faults
        were a fifth of the node's CPU in that read, on this VM 2.8 ms a MiB).
        Released as passed, the read pool reuses the same memory: RSS grew by
        110 MiB. What another reader loses is small: at 7M rows a second the
        budget's chunks turned over every 0.13 s anyway. A reverse read
        (``record_reads.read_reverse``) reads each page forward, then the rows
        before it: not ``forward``.
        """
        columns = self._projection(columns)
        end = min(offset + count, self.rows)
        if end <= offset:
            empty = self.schema.empty_table()
            return empty if columns is None else empty.select(list(columns))
        first = _chunk_of(self._starts, offset)
        last = _chunk_of(self._starts, end - 1)
        parts = [self._chunk(c, columns) for c in range(first, last + 1)]
        if forward:
            passed = last + 1 if end >= self._starts[last + 1] else last
            for chunk in range(first, passed):
                self._cache.discard(self._key, _ident(chunk, columns))
        self._look_ahead(last + 1, columns)
        table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
        return table.slice(offset - self._starts[first], end - offset)

    def stored(self, offset: int, count: int, codecs: frozenset[int]) -> StoredBatches | None:
        """Rows ``[offset, offset + count)`` as the file holds them: whole record batch
        messages, read and never decoded (``stored_reads``).

        None unless the rows are whole batches of an arrow file whose blocks the
        footer gives, with no dictionary, each stored plain or compressed with
        one of ``codecs`` (what the reader can decode): the caller then reads
        them decoded. Nothing is decoded ahead for such reads.
        """
        end = offset + count
        first = bisect.bisect_left(self._starts, offset)
        stop = bisect.bisect_left(self._starts, end)
        if (
            not self._blocks
            or count <= 0
            or _has_dictionary(self.schema)
            or stop >= len(self._starts)
            or self._starts[first] != offset
            or self._starts[stop] != end
            or not _readable(self._codecs[first:stop], codecs)
        ):
            return None  # before any read: a reader refused here costs nothing
        blocks = self._blocks[first:stop]
        begin, length = self._byte_range(first, stop)
        if length != sum(b.length for b in blocks):
            return None  # not back to back: a file the node did not write
        data = self._stored_ahead.take((first, stop))
        if data is None:
            data = self._read_stored(begin, length)
        for chunk in range(first, stop):
            self._drop_pages(chunk)
        ahead = min(stop + stop - first, self.chunks)
        if stop < ahead and _readable(self._codecs[stop:ahead], codecs):
            # the page after this one, of as many batches, read in the background
            next_begin, nbytes = self._byte_range(stop, ahead)
            read = functools.partial(self._read_stored, next_begin, nbytes)
            self._stored_ahead.submit((stop, ahead), nbytes, read)
        placed = [Block(b.offset - begin, b.meta_length, b.body_length) for b in blocks]
        READ_BATCHES_STORED.inc(len(placed))
        return StoredBatches(data, placed, end - offset)

    def _byte_range(self, first: int, stop: int) -> tuple[int, int]:
        """Where batches ``[first, stop)`` lie in the file: (offset, length)."""
        begin = self._blocks[first].offset
        last = self._blocks[stop - 1]
        return begin, last.offset + last.length - begin

    def _read_stored(self, begin: int, length: int) -> pa.Buffer:
        with self._lock:
            if self._closed:
                raise ValueError(f"segment reader of {self._key} is closed")
            if self._direct_fd is not None:
                return read_bytes_direct(self._direct_fd, begin, length)
            return pa.py_buffer(os.pread(self._fd, length, begin))

    def _projection(self, columns: Columns | None) -> Columns | None:
        """None for every column, so a read of all of them shares the whole chunk's entry."""
        return None if columns == tuple(self.schema.names) else columns

    def decode_ahead(self, chunk: int, columns: Columns | None = None) -> None:
        """Have ``chunk`` decoded in the background unless it is cached or on its way."""
        if self._decoder is None or not 0 <= chunk < self.chunks or self._closed:
            return
        columns = self._projection(columns)
        ident = _ident(chunk, columns)
        if (self._key, ident) in self._cache:
            return
        with self._state_lock:
            if ident in self._pending or not self._cache.reserve_ahead():
                return
            try:
                future = self._decoder.submit(self._decode_ahead, chunk, columns)
            except RuntimeError:  # shut down: the node is closing
                self._cache.unreserve_ahead()
                return
            self._pending[ident] = future

    def _decode_ahead(self, chunk: int, columns: Columns | None) -> pa.Table:
        try:
            return self._decode_into_cache(chunk, columns, _AHEAD)
        finally:
            self._cache.unreserve_ahead()

    def _chunk(self, chunk: int, columns: Columns | None) -> pa.Table:
        """One decoded chunk: cached, awaited from the decoder, or decoded here."""
        ident = _ident(chunk, columns)
        table = self._cache.get(self._key, ident)
        if table is not None:
            return table
        with self._state_lock:
            future = self._pending.get(ident)
        if future is not None:
            with contextlib.suppress(Exception):  # it failed: decode here, report that error
                return future.result()
        return self._decode_into_cache(chunk, columns, _DEMAND)

    def _decode_into_cache(self, chunk: int, columns: Columns | None, counter: Counter) -> pa.Table:
        ident = _ident(chunk, columns)
        try:
            with self._lock:
                if self._closed:
                    raise ValueError(f"segment reader of {self._key} is closed")
                table = self._decode(chunk) if columns is None else self._project(chunk, columns)
            self._cache.put(self._key, ident, table, ahead=counter is _AHEAD)
            counter.inc()
            self._drop_pages(chunk)
            return table
        finally:
            with self._state_lock:
                self._pending.pop(ident, None)

    def _project(self, chunk: int, columns: Columns) -> pa.Table:
        """Only ``columns`` of ``chunk``, reading and decoding no more than they need."""
        if self._row_groups is not None:
            return self._parquet_direct(chunk, columns)
        if self._parquet is not None:
            table = self._parquet.read_row_groups([chunk], columns=list(columns), use_threads=False)
            return dense(table, self.schema)
        if self._file_reader is None:  # footerless arrow, already in memory
            return pa.Table.from_batches([self._batches[chunk]], self.schema).select(list(columns))
        reader = self._projected.get(columns)
        if reader is None:
            fields = [self.schema.get_field_index(name) for name in columns]
            options = pa.ipc.IpcReadOptions(included_fields=fields)
            reader = pa.ipc.open_file(self._source, options=options)
            self._projected[columns] = reader
        return pa.Table.from_batches([reader.get_batch(chunk)], reader.schema)

    def _decode(self, chunk: int) -> pa.Table:
        if self._row_groups is not None:
            return self._parquet_direct(chunk, None)
        if self._parquet is not None:
            # one thread per decode: pyarrow's column threads only waited on each other here
            return dense(self._parquet.read_row_groups([chunk], use_threads=False), self.schema)
        if self._direct_fd is not None:
            block = self._blocks[chunk]
            try:
                data = read_bytes_direct(self._direct_fd, block.offset, block.length)
            except OSError as exc:
                self._stop_direct(exc)
                return self._decode(chunk)
            batch = pa.ipc.read_record_batch(pa.ipc.read_message(data), self.schema)
        elif self._file_reader is not None:
            batch = self._file_reader.get_batch(chunk)
        else:
            batch = self._batches[chunk]
        return pa.Table.from_batches([batch], schema=self.schema)

    def _parquet_direct(self, chunk: int, columns: Columns | None) -> pa.Table:
        assert self._row_groups is not None
        try:
            return self._row_groups.read(chunk, columns)
        except OSError as exc:
            self._stop_direct(exc)
            return self._decode(chunk) if columns is None else self._project(chunk, columns)

    def _stop_direct(self, exc: OSError) -> None:
        """The device refused a direct read: read through the page cache from now on."""
        log.warning("direct read of %s failed (%s); reading it buffered", self._key, exc)
        self._direct_fd = None
        self._row_groups = None
        self._close_direct()

    def _look_ahead(self, chunk: int, columns: Columns | None) -> None:
        """Hint the kernel and queue decodes for the chunks from ``chunk`` on."""
        if chunk >= self.chunks:
            return
        stop = self._offset(chunk) + READ_AHEAD_BYTES
        ahead = chunk
        while ahead < self.chunks and (ahead == chunk or self._offset(ahead + 1) <= stop):
            self.decode_ahead(ahead, columns)
            ahead += 1
        if self._direct_fd is None:
            self._pages.read_ahead(self._offset(chunk))

    def _offset(self, chunk: int) -> int:
        """File offset where ``chunk`` starts (past the last chunk: the file's size)."""
        if chunk >= self.chunks:
            return self._size
        if self._ends:
            return self._ends[chunk - 1] if chunk > 0 else 0
        return self._size * self._starts[chunk] // self.rows  # rows are of similar size

    def _drop_pages(self, chunk: int) -> None:
        """Drop a decoded chunk's pages from the page cache: the decoded copy is what is kept."""
        if not self._drop or self._direct_fd is not None:
            return  # direct reads leave no pages behind
        if self._file_reader is None and self._parquet is None:
            return  # footerless arrow: already in memory
        self._pages.drop(self._offset(chunk), self._offset(chunk + 1))

    def close(self) -> None:
        """Close the files under the locks, so that no decode or hint is using them meanwhile.

        (A pread or fadvise racing a close could otherwise use a descriptor
        number that another file reopened in between.)
        """
        self._stored_ahead.close()
        with self._lock:
            self._closed = True
            self._cache.drop(self._key)
            self._projected.clear()
            if self._source is not None:
                self._source.close()
            self._pages.close(self._close_fd)
            if self._direct_fd is not None:
                self._close_direct()


def _has_dictionary(schema: pa.Schema) -> bool:
    def nested(dtype: pa.DataType) -> bool:
        if isinstance(dtype, pa.DictionaryType):
            return True
        if isinstance(dtype, pa.BaseExtensionType):
            return nested(dtype.storage_type)
        return any(nested(dtype.field(i).type) for i in range(dtype.num_fields))

    return any(nested(field.type) for field in schema)


def _readable(batch_codecs: list[int | None], codecs: frozenset[int]) -> bool:
    """Whether a reader decoding ``codecs`` reads batches of these codecs (None: plain)."""
    return all(c is None or c in codecs for c in batch_codecs)


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _batch_rows(path: Path) -> list[int]:
    """Rows of each batch of an Arrow file whose footer ``arrow_footer`` cannot read.

    (``arrow_footer.batch_metadata`` and ``batch_header`` read only the batches'
    metadata: about 1 ms for a cold 64 MiB segment.) Why only the first column: decoding every
    batch read (and decompressed) the whole segment from disk before the first
    page of a history read went out, 300-430 ms per 64 MiB segment. Decoding
    only the first column through a descriptor advised ``RANDOM`` (no
    read-ahead) reads about 2 MiB of it and takes 12-16 ms cold.
    """
    fd = os.open(path, os.O_RDONLY)
    with os.fdopen(fd, "rb", buffering=0) as raw:
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        first_only = pa.ipc.IpcReadOptions(included_fields=[0])
        reader = pa.ipc.open_file(pa.PythonFile(raw, mode="r"), options=first_only)
        return [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]


def _ident(chunk: int, columns: Columns | None) -> ChunkId:
    """How the decoded cache names a chunk: its number, with the columns of a projection."""
    return chunk if columns is None else (chunk, columns)


def _chunk_of(starts: list[int], row: int) -> int:
    return bisect.bisect_right(starts, row) - 1
