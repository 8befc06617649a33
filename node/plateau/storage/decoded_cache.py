"""Decoded chunks of sealed segments, kept within one byte budget for all readers.

A chunk is what a segment is decoded in: a row group (parquet) or a record
batch (arrow). Sealed files are immutable and their paths never reused, so
``(path, chunk)`` names a decoded chunk for good.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import pyarrow as pa


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
        self._chunks: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()
        self._by_key: dict[str, set[int]] = {}

    @property
    def used(self) -> int:
        return self._size

    def get(self, key: str, chunk: int) -> pa.Table | None:
        with self._lock:
            table = self._chunks.get((key, chunk))
            if table is not None:
                self._chunks.move_to_end((key, chunk))
            return table

    def __contains__(self, item: tuple[str, int]) -> bool:
        with self._lock:
            return item in self._chunks

    def put(self, key: str, chunk: int, table: pa.Table) -> None:
        size = table.nbytes
        with self._lock:
            self._pop_locked(key, chunk)
            if size > self._budget:
                return
            self._chunks[(key, chunk)] = table
            self._by_key.setdefault(key, set()).add(chunk)
            self._size += size
            while self._size > self._budget:
                (old_key, old_chunk), _ = next(iter(self._chunks.items()))
                self._pop_locked(old_key, old_chunk)

    def drop(self, key: str) -> None:
        """Forget every chunk of ``key`` (its segment was closed or deleted)."""
        with self._lock:
            for chunk in list(self._by_key.get(key, ())):
                self._pop_locked(key, chunk)

    def _pop_locked(self, key: str, chunk: int) -> None:
        old = self._chunks.pop((key, chunk), None)
        if old is None:
            return
        self._size -= old.nbytes
        chunks = self._by_key[key]
        chunks.discard(chunk)
        if not chunks:
            del self._by_key[key]
