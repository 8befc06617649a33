"""A sealed arrow segment's batches as stored, and the next page of them read ahead.

Why read ahead: a stored page (``storage.stored_reads``) costs the node a read
of the file and a copy, so a reader's page time is mostly the disk's: read on
the request's thread, four readers left the disk idle between their pages and
read 8M rows/s against the 11M of decoded pages, whose reads the decode-ahead
threads overlapped. So once a page is served, the same number of batches after
it is read in the background (``SegmentReader.stored``), on the decode-ahead
threads: the next request finds its bytes. Reads through ``O_DIRECT`` release
the GIL, so this costs little CPU.

Memory: a page read ahead counts its bytes in the decoded cache's budget
(``DecodedCache.reserve_stored``: the half of it that reads ahead may use,
and what the node's memory budget sees as used) from the moment it is asked
for until it is taken or dropped; a reader keeps at most ``MAX_PENDING``
(two readers paging through one segment at different places keep theirs).
"""

from __future__ import annotations

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
        # guards _pending and _closed; taken before the decoded cache's lock, never after,
        # and nothing is awaited under it
        self._lock = threading.Lock()
        self._pending: OrderedDict[ChunkRange, tuple[Future[pa.Buffer], int]] = OrderedDict()
        self._closed = False

    def take(self, chunks: ChunkRange) -> pa.Buffer | None:
        """The bytes of ``chunks`` if they were read ahead (waiting for a read under way).

        None when they were not, or the read failed: the caller reads them
        itself and reports its own error.
        """
        with self._lock:
            entry = self._pending.pop(chunks, None)
        if entry is None:
            return None
        future, nbytes = entry
        try:
            return future.result()
        except Exception:
            return None
        finally:
            self._cache.release_stored(nbytes)

    def submit(self, chunks: ChunkRange, nbytes: int, read: Callable[[], pa.Buffer]) -> None:
        """Have ``read`` (the ``nbytes`` of ``chunks``) run in the background, room permitting."""
        if self._executor is None:
            return
        with self._lock:
            if self._closed or chunks in self._pending or not self._cache.reserve_stored(nbytes):
                return
            try:
                future = self._executor.submit(read)
            except RuntimeError:  # shut down: the node is closing
                self._cache.release_stored(nbytes)
                return
            self._pending[chunks] = (future, nbytes)
            dropped = self._drop_oldest(MAX_PENDING)
        self._release(dropped)

    def close(self) -> None:
        """Drop every page read ahead; none is read ahead from now on (the reader closes)."""
        with self._lock:
            self._closed = True
            dropped = self._drop_oldest(0)
        self._release(dropped)

    def _drop_oldest(self, keep: int) -> list[int]:
        dropped = []
        while len(self._pending) > keep:
            _, (future, nbytes) = self._pending.popitem(last=False)
            future.cancel()  # if it is running, it finishes and its bytes are dropped
            dropped.append(nbytes)
        return dropped

    def _release(self, dropped: list[int]) -> None:
        for nbytes in dropped:
            self._cache.release_stored(nbytes)
