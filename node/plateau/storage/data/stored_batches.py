"""A sealed arrow segment's batches as stored, and the next page of them read ahead.

Why read ahead: a stored page (``storage.stored_reads``) costs the node a read
of the file and a copy, so a reader's page time is mostly the disk's: read on
the request's thread, four readers left the disk idle between their pages and
read 8M rows/s against the 11M of decoded pages, whose reads the decode-ahead
threads overlapped. So once a page is served, the same number of batches after
it is read in the background (``SegmentReader.stored``), on the decode-ahead
threads: the next request finds its bytes. Reads through ``O_DIRECT`` release
the GIL, so this costs little CPU.

Memory: each page read ahead holds one of the decoded cache's read-ahead
places (``DecodedCache.reserve_ahead``) until it is taken or dropped, and a
reader keeps at most ``MAX_PENDING`` (two readers paging through one segment
at different places each keep theirs).
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass

import pyarrow as pa

from plateau.storage.data.arrow_footer import Block
from plateau.storage.data.decoded_cache import DecodedCache

MAX_PENDING = 4
"""Pages read ahead and not taken, per segment reader; the oldest is dropped past this."""

ChunkRange = tuple[int, int]
"""``[first, stop)`` chunk numbers of a segment."""


@dataclass(frozen=True)
class StoredBatches:
    """Whole record batch messages of a segment, back to back as the file holds them."""

    data: pa.Buffer
    blocks: list[Block]  # each message's place in ``data``
    rows: int


class StoredAhead:
    """Stored pages read in the background, by the chunks they hold; shared by threads."""

    def __init__(self, executor: Executor | None, cache: DecodedCache) -> None:
        self._executor = executor
        self._cache = cache
        # guards _pending; taken before the decoded cache's lock (reserve_ahead), never after,
        # and nothing is awaited under it
        self._lock = threading.Lock()
        self._pending: OrderedDict[ChunkRange, Future[pa.Buffer]] = OrderedDict()

    def take(self, chunks: ChunkRange) -> pa.Buffer | None:
        """The bytes of ``chunks`` if they were read ahead (waiting for a read under way).

        None when they were not, or the read failed: the caller reads them
        itself and reports its own error.
        """
        with self._lock:
            future = self._pending.pop(chunks, None)
        if future is None:
            return None
        try:
            return future.result()
        except Exception:
            return None
        finally:
            self._cache.unreserve_ahead()

    def submit(self, chunks: ChunkRange, read: Callable[[], pa.Buffer]) -> None:
        """Have ``read`` (the bytes of ``chunks``) run in the background, room permitting."""
        if self._executor is None:
            return
        with self._lock:
            if chunks in self._pending or not self._cache.reserve_ahead():
                return
            try:
                future = self._executor.submit(read)
            except RuntimeError:  # shut down: the node is closing
                self._cache.unreserve_ahead()
                return
            self._pending[chunks] = future
            dropped = self._drop_oldest(MAX_PENDING)
        for _ in range(dropped):
            self._cache.unreserve_ahead()

    def close(self) -> None:
        """Drop every page read ahead (the segment reader is closing)."""
        with self._lock:
            dropped = self._drop_oldest(0)
        for _ in range(dropped):
            self._cache.unreserve_ahead()

    def _drop_oldest(self, keep: int) -> int:
        dropped = 0
        while len(self._pending) > keep:
            _, future = self._pending.popitem(last=False)
            with contextlib.suppress(Exception):
                future.cancel()
            dropped += 1
        return dropped
