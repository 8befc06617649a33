"""File-system primitives with the durability steps spelled out.

A file that readers may see must appear complete: write under a temporary
name, fsync the file, rename, fsync the directory. ``publish`` does exactly
that; everything that makes a file visible goes through it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, BinaryIO

import pyarrow as pa

from plateau.protocol.errors import Unavailable
from plateau.storage.data.libc import libc_function

TMP_SUFFIX = ".tmp"
PAGE = 4096


class PageDropper:
    """fsync a file, then tell the kernel its synced pages need not stay cached.

    Why: the node never reads back what it just wrote through the page cache
    (open segments are served from memory, a write-ahead file is read only by
    recovery), so cached copies only crowd out the readers' working set. On
    virtual machines that return free guest memory to the host, every newly
    cached 4 KiB page also costs a host page fault: measured here, writing
    into fresh page cache took 120-230 ns of CPU per 128-byte row against
    21 ns when the synced pages were dropped and reused.

    Only pages that are both synced and complete are dropped; the partial
    last page stays, as the next write extends it.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._dropped = 0

    def sync(self, fd: int) -> None:
        end = os.lseek(fd, 0, os.SEEK_CUR) if self.enabled else 0
        os.fsync(fd)
        if end > self._dropped:
            aligned = end - end % PAGE
            if aligned > self._dropped:
                os.posix_fadvise(fd, self._dropped, aligned - self._dropped, os.POSIX_FADV_DONTNEED)
                self._dropped = aligned


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


WRITE_BEHIND_BYTES = 2 * 1024 * 1024
WRITE_BEHIND_IN_FLIGHT = 8 * 1024 * 1024
"""Most bytes of one file under writeback before the writer waits for the older ones.

Why: writeback started and never waited for queues as fast as the sealer writes.
A random-values Parquet seal is as large as its write-ahead file (a 9 MiB row
group every callback), and the appends' ``O_DIRECT`` writes and fsyncs waited
behind the whole queue: append p99 61-96 ms. Waiting for the windows before the
newest once this many bytes are in flight (the way a streaming writer paces
itself with ``sync_file_range``) keeps the queue to about two row groups: p99
53-64 ms, rows/s 1.00-1.14x (bench/ab_nodes.py, interleaved, parquet topic,
random values). A file smaller than this (an ML-log seal: 6 MiB) never waits."""
_SYNC_FILE_RANGE_WRITE = 2  # start writeback of dirty pages in the range; do not wait
_SYNC_FILE_RANGE_WAIT = 1 | 2 | 4  # WAIT_BEFORE | WRITE | WAIT_AFTER: the range is on disk


SYNC_FILE_RANGE = libc_function(
    "sync_file_range", [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
)


class WriteBehind:
    """Start the writeback of a file's written bytes every ``WRITE_BEHIND_BYTES``.

    Why: a sealed file is tens of MB written at once, then fsynced. On ext4
    (data=ordered) that fsync's journal commit carries the file's block
    allocations, and every append's fsync committed meanwhile waits for those
    blocks' data: parquet appends waited 4.6 ms for their fsync against 2 ms on
    arrow topics, whose seal writes nothing. Starting writeback as the file is
    written (``sync_file_range``, which does not wait) leaves the final fsync
    a few MB, and the appends' commits little to wait for. Once more than
    ``WRITE_BEHIND_IN_FLIGHT`` bytes are under writeback the writer waits for all
    but the newest window, so the disk's queue stays short (the wait releases the
    GIL: ``libc``).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self.started = 0  # writeback started for [0, started)
        self.settled = 0  # and finished for [0, settled)

    def due(self, position: int) -> bool:
        """Whether a file of ``position`` bytes has enough new ones to start their writeback."""
        return SYNC_FILE_RANGE is not None and position - self.started >= WRITE_BEHIND_BYTES

    def written(self, position: int) -> None:
        """The file now holds ``position`` bytes: start writeback if enough are new."""
        if self.due(position):
            assert SYNC_FILE_RANGE is not None
            SYNC_FILE_RANGE(self._fd, self.started, position - self.started, _SYNC_FILE_RANGE_WRITE)
            if position - self.settled > WRITE_BEHIND_IN_FLIGHT and self.started > self.settled:
                SYNC_FILE_RANGE(
                    self._fd, self.settled, self.started - self.settled, _SYNC_FILE_RANGE_WAIT
                )
                self.settled = self.started
            self.started = position


class PythonWriteBehind:
    """A Python file that starts its writeback as it is written (``WriteBehind``)."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._written = 0
        self._behind = WriteBehind(file.fileno())

    def write(self, data: Any) -> int:
        n = self._file.write(data)
        self._written += n
        if self._behind.due(self._written):
            self._file.flush()  # Python's buffer first: writeback starts on what the file holds
            self._behind.written(self._written)
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def publish(final: Path, write: Callable[[BinaryIO], None], drop_pages: bool = False) -> int:
    """Atomically create ``final`` with what ``write`` writes; returns its size."""

    def through_python(tmp: Path) -> None:
        with tmp.open("wb") as f:
            write(PythonWriteBehind(f))  # type: ignore[arg-type]
            f.flush()
            PageDropper(drop_pages).sync(f.fileno())

    return _publish_via(final, through_python)


def publish_native(
    final: Path, write: Callable[[pa.NativeFile, Callable[[], None]], None], drop_pages: bool
) -> int:
    """``publish`` through a native (pyarrow) file: what ``write`` writes needs no GIL.

    Why: through a Python file object, Arrow's writers take the GIL for each of
    their writes (700-900 for a 64 MiB Parquet seal) and copy each page into a
    Python object under it; a Parquet seal then held the GIL for 28% of the time
    any thread held it (py-spy ``--gil``), and every append's Python steps waited
    behind it. ``write`` calls its second argument between pieces (row groups,
    batches): writeback starts there (``WriteBehind``).
    """

    def through_arrow(tmp: Path) -> None:
        with pa.OSFile(str(tmp), "wb") as sink:
            behind = WriteBehind(sink.fileno())
            write(sink, lambda: behind.written(sink.tell()))
            PageDropper(drop_pages).sync(sink.fileno())

    return _publish_via(final, through_arrow)


def _publish_via(final: Path, write_synced: Callable[[Path], None]) -> int:
    """The durability steps of ``publish``: ``write_synced`` writes and fsyncs a temporary
    file; it is renamed to ``final`` only then, and the directory fsynced after."""
    tmp = final.with_name(final.name + TMP_SUFFIX)
    try:
        write_synced(tmp)
        tmp.rename(final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(final.parent)
    return final.stat().st_size


def rename_durably(src: Path, dst: Path) -> None:
    src.rename(dst)
    fsync_dir(dst.parent)


def make_dirs(path: Path) -> None:
    """Create ``path`` and fsync each new directory's parent, so it survives a crash."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        fsync_dir(d.parent)


BALLAST = "ballast"


class Ballast:
    """A preallocated file that is given up when the volume is full at start.

    A node killed on a full volume must still be able to recover (SQLite needs
    a few pages, a torn segment is sealed). Deleting the ballast makes that
    room; it is re-created once space is free again.
    """

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size

    def release(self) -> bool:
        if not self.path.exists():
            return False
        self.path.unlink()
        fsync_dir(self.path.parent)
        return True

    def ensure(self) -> None:
        if self.size <= 0 or (self.path.exists() and self.path.stat().st_size >= self.size):
            return
        free = os.statvfs(self.path.parent)
        if free.f_bavail * free.f_frsize < 4 * self.size:
            return  # too tight now; tried again at the next start
        fd = os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            os.posix_fallocate(fd, 0, self.size)
            os.fsync(fd)
        finally:
            os.close(fd)


def disk_full(exc: BaseException) -> bool:
    """The volume is full, as the OS or SQLite says it (a write is refused, not a bug)."""
    if isinstance(exc, OSError):
        return exc.errno == errno.ENOSPC
    return "full" in str(exc)  # sqlite3: "database or disk is full"


def lock_data_dir(data_dir: Path) -> IO[bytes]:
    """One node per data directory: a second writer would corrupt segments and indexes."""
    f = (data_dir / "lock").open("a+b")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise Unavailable(f"data directory {data_dir} is in use by another plateau node") from None
    return f
