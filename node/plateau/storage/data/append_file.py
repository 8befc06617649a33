"""The open segment's file: appended through the page cache, or straight to the disk (O_DIRECT).

Why O_DIRECT: an acknowledged append must be on the disk, so every byte the
open segment gets is written once and fsynced at once; the page cache only
stands in between, and its pages cost CPU to fill, sync and drop again. 1.4 MB
appends from 4 threads, each followed by its fdatasync (``bench/direct_append.py``):
0.27 ms of CPU per MB through the page cache (pages dropped after the sync, as
``PageDropper`` does), 0.11-0.13 with O_DIRECT, at the same MB/s and latency (the
disk's). On the node (``bench/ingest.py --format arrow``, interleaved): 1.15 ->
1.04 cores for 3-5% more rows/s; the write stage now waits for the disk (0.9 ->
1.9 ms) and the fsync no longer does (2.0 -> 1.0 ms).

O_DIRECT wants the buffer's address, the length and the file offset aligned
to the device's logical block size (``ALIGN``). A segment's messages are not,
so ``DirectFile`` copies them into an aligned staging buffer (the copy the
page cache made before) and keeps the partial last block in memory: each
write starts at the block that holds the file's end, rewriting its bytes
unchanged and padding the last block with zeros. Durability ordering:

1. Bytes already acknowledged are rewritten only with the same bytes, so a
   torn write of the shared block loses nothing acknowledged.
2. The file's length on disk runs ahead of its data by the zero padding
   (under one block). Recovery reads the file as a stream, and a stream
   reader takes four zero bytes for its end (Arrow's legacy end-of-stream),
   so padding ends the stream where a torn tail would.
3. ``finish`` cuts the padding (``ftruncate``) before the final fsync, so a
   sealed file is exactly an Arrow IPC file.

``fdatasync`` follows each group of writes as before: O_DIRECT bypasses the
page cache, not the device's write cache, nor the journal that records the
file's new blocks and size.

Filesystems without O_DIRECT (tmpfs before Linux 6.6) refuse it at open, or at the first write
(``open_append`` writes one block to see); the file is then written through the
page cache.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol, TypeAlias

import pyarrow as pa

from plateau.storage.data.direct_io import ALIGN
from plateau.storage.data.durable_io import PageDropper

IOV_MAX = 1024
STAGING_BYTES = 2 * 1024 * 1024
"""One staging buffer: an append larger than this is written in several direct writes."""
STAGING_BUFFERS = 8
"""At most this many staging buffers exist (16 MiB); a writer past them waits for one."""
_ZEROS = bytes(ALIGN)

Piece: TypeAlias = pa.Buffer | bytes | memoryview


class AppendFile(Protocol):
    """A file written only at its end, by one writer at a time (the partition lock)."""

    fd: int
    direct: bool

    def write(self, pieces: Sequence[Piece]) -> int: ...

    def cut(self, position: int) -> None: ...

    def sync(self) -> None: ...

    def finish(self) -> None: ...


def write_all(fd: int, pieces: Sequence[Piece]) -> int:
    """Write every piece in order at the file's position; returns the bytes written."""
    views = [memoryview(p) for p in pieces if len(memoryview(p))]
    total = 0
    while views:
        n = os.writev(fd, views[:IOV_MAX])
        total += n
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]
    return total


class BufferedFile:
    """Through the page cache: ``writev`` from the pieces, fsync, then drop the synced pages."""

    direct = False

    def __init__(self, fd: int, drop_pages: bool) -> None:
        self.fd = fd
        self._dropper = PageDropper(drop_pages)

    def write(self, pieces: Sequence[Piece]) -> int:
        return write_all(self.fd, pieces)

    def cut(self, position: int) -> None:
        os.ftruncate(self.fd, position)
        os.lseek(self.fd, position, os.SEEK_SET)

    def sync(self) -> None:
        self._dropper.sync(self.fd)

    def finish(self) -> None:
        os.fsync(self.fd)


class StagingPool:
    """Page-aligned buffers shared by every direct file of the node.

    Lock order: a leaf. It is taken under a partition lock (the write happens
    there) and nothing is taken under it; a buffer is held only for one
    append's copy and direct writes.
    """

    def __init__(self, size: int = STAGING_BYTES, limit: int = STAGING_BUFFERS) -> None:
        self.size = size
        self.limit = limit
        self._free: list[mmap.mmap] = []
        self._made = 0
        self._cond = threading.Condition(threading.Lock())

    @contextlib.contextmanager
    def buffer(self) -> Iterator[memoryview]:
        with self._cond:
            while not self._free and self._made >= self.limit:
                self._cond.wait()
            if self._free:
                buf = self._free.pop()
            else:
                self._made += 1
                buf = None
        if buf is None:
            buf = mmap.mmap(-1, self.size)  # anonymous: page-aligned, outside the lock
        view = memoryview(buf)
        try:
            yield view
        finally:
            view.release()
            with self._cond:
                self._free.append(buf)
                self._cond.notify()


STAGING = StagingPool()


NATIVE_COPY_BYTES = 64 * 1024
"""Pieces at least this large are copied into the staging buffer by pyarrow, without the GIL.

A slice assignment copies under the GIL: a 2 MiB piece held it for a few hundred
microseconds, and every other append's thread waiting to retake it after one of its
pyarrow calls waited that long (48 writers of 2.5 MB bodies: the ``decode`` stage,
0.3 ms alone, took 4 ms). Smaller pieces (length prefixes, padding, metadata) are
not worth a release and retake of the GIL."""


class _Copier:
    """Copies pieces into one staging buffer: large ones natively, small ones in Python."""

    def __init__(self, buf: memoryview) -> None:
        self._buf = buf

    def copy(self, at: int, data: memoryview) -> None:
        n = len(data)
        if n < NATIVE_COPY_BYTES:
            self._buf[at : at + n] = data
            return
        target = pa.py_buffer(self._buf[at : at + n])
        # pyarrow aborts the process on a read-only target; a staging map is writable
        assert target.is_mutable
        writer = pa.FixedSizeBufferWriter(target)
        writer.write(data)
        writer.close()
        # (both go here: the staging view can be released once the copy is done)


class DirectFile:
    """With O_DIRECT, through an aligned staging buffer; the last partial block kept in memory."""

    direct = True

    def __init__(self, fd: int, pool: StagingPool = STAGING) -> None:
        self.fd = fd
        self._pool = pool
        self._length = 0  # bytes of data in the file; the file may run on by zero padding
        self._tail = b""  # the data of the block the file ends in: _length % ALIGN bytes

    def write(self, pieces: Sequence[Piece]) -> int:
        with self._pool.buffer() as buf:
            copier = _Copier(buf)
            base = self._length - len(self._tail)
            fill = len(self._tail)
            buf[:fill] = self._tail
            total = 0
            for piece in pieces:
                view = memoryview(piece).cast("B")
                total += len(view)
                done = 0
                while done < len(view):
                    n = min(len(view) - done, len(buf) - fill)
                    copier.copy(fill, view[done : done + n])
                    fill += n
                    done += n
                    if fill == len(buf):
                        self._pwrite(buf, base)
                        base += fill
                        fill = 0
            whole = fill - fill % ALIGN
            if fill > whole:
                buf[fill : whole + ALIGN] = _ZEROS[: whole + ALIGN - fill]
                self._pwrite(buf[: whole + ALIGN], base)
            elif fill:
                self._pwrite(buf[:fill], base)
            self._tail = bytes(buf[whole:fill])
        self._length += total
        return total

    def _pwrite(self, data: memoryview, offset: int) -> None:
        """All of ``data``: a write cut short (a volume filling up) is continued, so that
        the error that stops it is the filesystem's own (``ENOSPC``: 507, not a 500)."""
        done = 0
        while done < len(data):
            n = os.pwrite(self.fd, data[done:], offset + done)
            if n <= 0:
                raise OSError(errno.ENOSPC, f"direct write stopped at {offset + done}")
            done += n

    def cut(self, position: int) -> None:
        """Back to ``position`` bytes (after a failed write): the tail block is read back."""
        os.ftruncate(self.fd, position)
        whole = position - position % ALIGN
        self._tail = b""
        if position > whole:
            with self._pool.buffer() as buf:
                got = os.preadv(self.fd, [buf[:ALIGN]], whole)
                self._tail = bytes(buf[: position - whole])
                if got < position - whole:
                    raise OSError(f"short direct read: {got} bytes at {whole}")
        self._length = position

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def finish(self) -> None:
        """Cut the zero padding, then sync: the file is exactly its data."""
        os.ftruncate(self.fd, self._length)
        os.fsync(self.fd)


def open_append(path: Path, direct: bool, drop_pages: bool) -> AppendFile:
    """Create ``path`` (it must not exist) for appending; O_DIRECT if asked and possible.

    Some filesystems take O_DIRECT at open and refuse the writes (a larger logical
    block, or an overlay that passes the flag on): one aligned block of zeros is
    written first, and an ``EINVAL`` there means the page cache too, not failed
    appends.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    o_direct = getattr(os, "O_DIRECT", 0)
    if direct and o_direct:
        fd = None
        try:
            # read-write: ``cut`` reads its new last block back
            fd = os.open(path, flags & ~os.O_WRONLY | os.O_RDWR | o_direct, 0o644)
            with STAGING.buffer() as buf:
                buf[:ALIGN] = _ZEROS
                os.pwrite(fd, buf[:ALIGN], 0)
            os.ftruncate(fd, 0)
            return DirectFile(fd)
        except OSError as exc:
            if fd is not None:
                os.close(fd)
            if exc.errno != errno.EINVAL:  # no O_DIRECT on this filesystem
                raise
            path.unlink(missing_ok=True)
    return BufferedFile(os.open(path, flags, 0o644), drop_pages)


def open_recycled(path: Path) -> AppendFile | None:
    """Open a kept write-ahead file (``recycle``) at ``path`` to be written from its start.

    Its blocks read as zeros and stay allocated, so writes overwrite them in place;
    the zeros after the data end its stream as ``DirectFile``'s padding does. None
    (and ``path`` deleted) where O_DIRECT is refused: the caller creates a new file.
    """
    o_direct = getattr(os, "O_DIRECT", 0)
    if o_direct:
        try:
            return DirectFile(os.open(path, os.O_RDWR | os.O_CLOEXEC | o_direct))
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
    path.unlink(missing_ok=True)
    return None
