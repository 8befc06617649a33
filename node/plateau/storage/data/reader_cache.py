"""Open segment readers, shared by every read, and the threads that serve them."""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa

from plateau.storage.data.decoded_cache import Columns, DecodedCache
from plateau.storage.data.sealed_reader import SegmentReader
from plateau.storage.types import SegmentId

ColumnsOf = Callable[[pa.Schema], Columns | None]
"""The columns a read wants of a segment with this schema (None: all)."""

DECODE_THREADS = 2
"""Decode-ahead threads: two partitions' chunks are read (a direct read waits on the disk)
and decoded at once."""


class ReaderCache:
    """Open readers by segment id, least recently used evicted first.

    Owns the thread that passes the readers' page-cache hints to the kernel
    and the one that decodes ahead.
    """

    def __init__(
        self,
        capacity: int = 32,
        decoded_bytes: int = 64 * 1024 * 1024,
        drop_pages: bool = True,
        decode_ahead: bool = True,
        direct_reads: bool = True,
    ) -> None:
        self._lock = threading.Lock()
        self._drop_pages = drop_pages
        self._direct = direct_reads
        self._capacity = capacity
        self._decoded = DecodedCache(decoded_bytes)
        self._readers: OrderedDict[SegmentId, SegmentReader] = OrderedDict()
        self._hints = ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-hints")
        self._decoder = (
            ThreadPoolExecutor(max_workers=DECODE_THREADS, thread_name_prefix="decode-ahead")
            if decode_ahead and decoded_bytes > 0
            else None
        )

    def decoded_bytes(self) -> int:
        """Bytes of decoded chunks held now (the read cache's part of the memory budget)."""
        return self._decoded.used

    def get(self, segment_id: SegmentId, path: Path, fmt: str) -> SegmentReader:
        with self._lock:
            reader = self._readers.get(segment_id)
            if reader is not None:
                self._readers.move_to_end(segment_id)
                return reader
        reader = SegmentReader(
            path, fmt, self._decoded, self._drop_pages, self._hints, self._decoder, self._direct
        )
        with self._lock:
            raced = self._readers.get(segment_id)
            if raced is not None:  # opened by another thread meanwhile: keep one
                reader.close()
                self._readers.move_to_end(segment_id)
                return raced
            self._readers[segment_id] = reader
            while len(self._readers) > self._capacity:
                _, old = self._readers.popitem(last=False)
                old.close()
        return reader

    def prefetch(
        self, segment_id: SegmentId, path: Path, fmt: str, columns_of: ColumnsOf | None = None
    ) -> None:
        """Open a segment and decode its first chunk in the background (the next one a scan
        reaches), so that crossing into it does not stall the page that does. With
        ``columns_of``, only the columns it picks from the segment's schema."""
        if self._decoder is None:
            return
        with self._lock:
            reader = self._readers.get(segment_id)
        if reader is not None:
            reader.decode_ahead(0, columns_of(reader.schema) if columns_of else None)
            return
        with contextlib.suppress(RuntimeError):  # shut down: the node is closing
            self._decoder.submit(self._open_ahead, segment_id, path, fmt, columns_of)

    def _open_ahead(
        self, segment_id: SegmentId, path: Path, fmt: str, columns_of: ColumnsOf | None
    ) -> None:
        with contextlib.suppress(OSError, pa.ArrowException):  # deleted meanwhile: nothing to do
            reader = self.get(segment_id, path, fmt)
            reader.decode_ahead(0, columns_of(reader.schema) if columns_of else None)

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
        """Drop pending hints and decodes, and close every reader (engine shutdown)."""
        if self._decoder is not None:
            self._decoder.shutdown(wait=True, cancel_futures=True)
        self._hints.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            readers = list(self._readers.values())
            self._readers.clear()
        for reader in readers:
            reader.close()
