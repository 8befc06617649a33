"""Decoded chunks of sealed segments, kept within one byte budget for all readers.

A chunk is what a segment is decoded in: a row group (parquet) or a record
batch (arrow). Sealed files are immutable and their paths never reused, so
``(path, chunk)`` names a decoded chunk for good.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import pyarrow as pa

Columns = tuple[str, ...]
"""Top-level columns of a projection, in schema order."""
ChunkId = int | tuple[int, Columns]
"""A chunk decoded whole (its number) or only some columns of it (number, columns)."""


class DecodedCache:
    """Decoded chunks by ``(segment path, chunk)``, within one byte budget, least recent out.

    Why: topic iteration takes a share of every partition per page, so without
    it each row group or compressed batch is decoded once per page that
    touches it (4x for 4 partitions).
    """

    def __init__(self, budget_bytes: int) -> None:
        self._lock = threading.Lock()
        self._budget = budget_bytes
        self._size = 0
        self._chunks: OrderedDict[tuple[str, ChunkId], pa.Table] = OrderedDict()
        self._by_key: dict[str, set[ChunkId]] = {}
        self._unread: dict[tuple[str, ChunkId], int] = {}  # decoded ahead, not read yet
        self._unread_bytes = 0
        self._ahead_queued = 0
        self._mean_chunk = 0.0
        self._stored_ahead = 0  # bytes of stored pages read ahead (``stored_batches``)

    def reserve_ahead(self) -> bool:
        """Room to decode one more chunk ahead? If so it is counted until ``put``.

        Why: decoding ahead for more readers or partitions than the cache holds
        (a topic of 64 partitions read at once) evicted chunks decoded ahead
        before anyone read them: 1 GB/s of decoding for nothing, and the memory
        churn with it. Chunks decoded ahead and not yet read, and those queued,
        may take half of the budget.
        """
        with self._lock:
            expected = self._unread_bytes + (self._ahead_queued + 1) * self._mean_chunk
            if expected + self._stored_ahead > self._budget / 2:
                return False
            self._ahead_queued += 1
            return True

    def unreserve_ahead(self) -> None:
        with self._lock:
            self._ahead_queued -= 1

    def reserve_stored(self, nbytes: int) -> bool:
        """Room for a stored page of ``nbytes`` read ahead? If so it is counted until
        ``release_stored``: in the same half of the budget as chunks decoded ahead, and in
        ``used`` (decoded chunks are evicted to make room), so the memory budget sees it."""
        with self._lock:
            expected = self._unread_bytes + self._ahead_queued * self._mean_chunk
            if expected + self._stored_ahead + nbytes > self._budget / 2:
                return False
            self._stored_ahead += nbytes
            self._evict_locked()
            return True

    def release_stored(self, nbytes: int) -> None:
        with self._lock:
            self._stored_ahead -= nbytes

    @property
    def stored_ahead(self) -> int:
        """Bytes of stored pages read ahead and not yet taken or dropped."""
        return self._stored_ahead

    @property
    def used(self) -> int:
        return self._size + self._stored_ahead

    def get(self, key: str, chunk: ChunkId) -> pa.Table | None:
        with self._lock:
            table = self._chunks.get((key, chunk))
            if table is not None:
                self._chunks.move_to_end((key, chunk))
                self._unread_bytes -= self._unread.pop((key, chunk), 0)
            return table

    def __contains__(self, item: tuple[str, ChunkId]) -> bool:
        with self._lock:
            return item in self._chunks

    def put(self, key: str, chunk: ChunkId, table: pa.Table, ahead: bool = False) -> None:
        size = table.nbytes
        with self._lock:
            self._pop_locked(key, chunk)
            self._mean_chunk += (size - self._mean_chunk) / 8
            if size > self._budget:
                return
            self._chunks[(key, chunk)] = table
            if ahead:
                self._unread[(key, chunk)] = size
                self._unread_bytes += size
            self._by_key.setdefault(key, set()).add(chunk)
            self._size += size
            self._evict_locked()

    def _evict_locked(self) -> None:
        while self._chunks and self._size + self._stored_ahead > self._budget:
            (old_key, old_chunk), _ = next(iter(self._chunks.items()))
            self._pop_locked(old_key, old_chunk)

    def discard(self, key: str, chunk: ChunkId) -> None:
        """Forget one chunk (a forward read went past it: ``SegmentReader.read``)."""
        with self._lock:
            self._pop_locked(key, chunk)

    def drop(self, key: str) -> None:
        """Forget every chunk of ``key`` (its segment was closed or deleted)."""
        with self._lock:
            for chunk in list(self._by_key.get(key, ())):
                self._pop_locked(key, chunk)

    def _pop_locked(self, key: str, chunk: ChunkId) -> None:
        old = self._chunks.pop((key, chunk), None)
        if old is None:
            return
        self._unread_bytes -= self._unread.pop((key, chunk), 0)
        self._size -= old.nbytes
        chunks = self._by_key[key]
        chunks.discard(chunk)
        if not chunks:
            del self._by_key[key]
