"""Page-cache hints for one sealed file read through the page cache.

A history scan reads each page of a sealed file once. Two hints keep that
cheap: ``WILLNEED`` a stretch ahead of the reader, so the kernel's reads
overlap the decoding, and ``DONTNEED`` behind it once a chunk is decoded (the
``DecodedCache`` keeps that copy). Without the second the scan would fill the
page cache with pages read once; on VMs that hand free guest memory back to the
host every newly cached page costs a host page fault. Files read with
``O_DIRECT`` leave no pages behind and need neither (``SegmentReader`` skips them).

Lock order: ``_mark_lock`` (how far ahead the last hint reached) and ``_fd_lock``
(held while the descriptor is advised or closed) are leaves and never nest.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import Executor

from plateau.storage.data.durable_io import PAGE

READ_AHEAD_BYTES = 8 * 1024 * 1024
"""How far past the chunks a read touches the reader decodes ahead and hints the kernel."""


class PageHints:
    """``posix_fadvise`` on one descriptor, from the hints thread when there is one."""

    def __init__(self, fd: int, size: int, hints: Executor | None) -> None:
        self._fd = fd
        self._size = size
        self._hints = hints
        self._mark_lock = threading.Lock()
        self._read_ahead_to = 0
        self._fd_lock = threading.Lock()
        self._fd_open = True

    def read_ahead(self, begin: int) -> None:
        """Ask for ``READ_AHEAD_BYTES`` from ``begin``, unless the last hint reaches far enough."""
        with self._mark_lock:
            if begin + READ_AHEAD_BYTES // 2 < self._read_ahead_to:
                return
            begin = max(begin, self._read_ahead_to)
            end = min(self._size, begin + READ_AHEAD_BYTES)
            self._read_ahead_to = end
        if end > begin:
            self._advise(begin, end - begin, os.POSIX_FADV_WILLNEED)

    def drop(self, begin: int, end: int) -> None:
        """Drop the pages wholly inside ``[begin, end)``: a wrong range costs a read, never data."""
        first = -(-begin // PAGE) * PAGE
        last = end // PAGE * PAGE
        if last > first:
            self._advise(first, last - first, os.POSIX_FADV_DONTNEED)

    def close(self, close_fd: Callable[[], object]) -> None:
        """Close the descriptor (``close_fd``) once no hint is using it.

        A hint racing a close could otherwise advise a descriptor number that
        another file reopened in between.
        """
        with self._fd_lock:
            self._fd_open = False
            close_fd()

    def _advise(self, offset: int, length: int, advice: int) -> None:
        """Why a thread: WILLNEED allocates the page cache and queues the reads before
        it returns, about 0.2 ms per 8 MiB here (strace), on the path of every page
        that starts a new batch; nothing waits for a hint.
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
