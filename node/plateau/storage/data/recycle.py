"""Write-ahead files kept for the next segment instead of deleted.

Why: a parquet topic's write-ahead file is redundant once its Parquet file is
sealed, and deleting it frees 64 MiB of blocks per segment in a journal commit
(on a filesystem mounted with ``discard``, common on cloud disks, it discards them
too), and the appends' fsyncs waited behind those commits. Reusing them
(parquet topic, random values, bench/ab_nodes.py, 3 interleaved pairs): append
p99 54.8-61.9 -> 41.4-42.2 ms, rows/s 1.01-1.13x.

A kept file's blocks are zeroed as unwritten extents (``fallocate`` with
``FALLOC_FL_ZERO_RANGE``: metadata only, no data written, nothing freed), so
its old rows can never be read again: a new segment written into it is
followed by zeros, which end an Arrow stream the way a torn tail does (the
recovery already reads an open file that way, ``append_file``'s padding).

Durability ordering, each step complete before the next:

1. ``give`` (the sealer, after the Parquet file's manifest row is committed):
   zero the file and fsync it under its segment name, then rename it into
   ``<data>/recycle/``. A crash before the rename leaves a sealed segment's
   ``.open`` file, which the recovery deletes like any file no row names.
2. ``take`` (a partition opening a segment): rename a kept file to the new
   segment's name and fsync that directory before the file gets a byte, so an
   acknowledged append is never in a file whose name a crash could undo.
3. At start the node deletes whatever ``<data>/recycle/`` holds (kept files are
   a cache, never data), and at a clean stop too, after the last seal.

Filesystems without ``FALLOC_FL_ZERO_RANGE`` (tmpfs) refuse it, and the file is
deleted as before; after the first refusal the recycler keeps nothing more (a
node's data directory is one filesystem), so later seals skip the attempt.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import logging
import os
import shutil
import threading
from pathlib import Path

from plateau.storage.data.durable_io import fsync_dir, make_dirs
from plateau.storage.data.libc import libc_function
from plateau.storage.metrics import WRITE_AHEAD_FILES

log = logging.getLogger(__name__)

RECYCLE_DIR = "recycle"
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_ZERO_RANGE = 0x10

FALLOCATE = libc_function(
    "fallocate", [ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong]
)


class Recycler:
    """At most ``limit`` zeroed write-ahead files, shared by every partition of a node.

    Lock order: a leaf. Its lock only picks a name or pops one from the list;
    the zeroing, fsyncs and renames happen outside it.
    """

    def __init__(self, data_dir: Path, limit: int) -> None:
        self.directory = data_dir / RECYCLE_DIR
        self.limit = limit
        self._lock = threading.Lock()
        self._free: list[Path] = []
        self._reserved = 0  # files being zeroed for the list (counted against the limit)
        self._names = itertools.count()
        self.kept = 0  # files given and kept (tests read these; /metrics has the counter)
        self.reused = 0  # files taken for a new segment
        self.zeroes = True  # False once the filesystem refused a zero range: keep none

    def reset(self) -> None:
        """Delete what an earlier run kept (step 3); called before any partition opens."""
        shutil.rmtree(self.directory, ignore_errors=True)
        if self.limit > 0:
            try:
                make_dirs(self.directory)
            except OSError:  # a full volume: the node starts all the same, and keeps none
                log.warning("cannot create %s; write-ahead files are deleted", self.directory)

    def release(self) -> int:
        """Delete every kept file (the volume is nearly full: room before speed); returns
        how many. A file being given meanwhile may still be kept afterwards."""
        with self._lock:
            free, self._free = self._free, []
        for path in free:
            path.unlink(missing_ok=True)
            WRITE_AHEAD_FILES.labels("deleted").inc()
        return len(free)

    def free_files(self) -> int:
        with self._lock:
            return len(self._free)

    def give(self, path: Path) -> bool:
        """Zero ``path`` and keep it for a later segment (step 1); False if it was not kept
        (the list is full, or the filesystem cannot zero it): the caller deletes it."""
        if FALLOCATE is None:
            return False
        with self._lock:
            if not self.zeroes or len(self._free) + self._reserved >= self.limit:
                return False
            self._reserved += 1
            kept = self.directory / f"{next(self._names)}.wal"
        try:
            if not _zero(path):
                self._refused(path)
                return False
            path.rename(kept)
        except OSError:
            log.warning("could not keep %s for reuse; deleting it", path, exc_info=True)
            return False
        finally:
            with self._lock:
                self._reserved -= 1
        with self._lock:
            self._free.append(kept)
            self.kept += 1
        WRITE_AHEAD_FILES.labels("kept").inc()
        return True

    def _refused(self, path: Path) -> None:
        with self._lock:
            first, self.zeroes = self.zeroes, False
        if first:
            log.info(
                "the filesystem of %s cannot zero a range (FALLOC_FL_ZERO_RANGE); "
                "write-ahead files are deleted, not kept",
                path.parent,
            )

    def take(self, path: Path) -> bool:
        """Move a kept file to ``path``, durably (step 2); False if none is kept."""
        with self._lock:
            if not self._free:
                return False
            kept = self._free.pop()
        try:
            kept.rename(path)
            fsync_dir(path.parent)
        except OSError:
            log.warning("could not reuse %s for %s", kept, path, exc_info=True)
            kept.unlink(missing_ok=True)
            path.unlink(missing_ok=True)
            return False
        with self._lock:
            self.reused += 1
        WRITE_AHEAD_FILES.labels("reused").inc()
        return True


def _zero(path: Path) -> bool:
    """Make every block of ``path`` read as zeros, durably, without writing or freeing any."""
    assert FALLOCATE is not None
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size and FALLOCATE(fd, _FALLOC_FL_ZERO_RANGE | _FALLOC_FL_KEEP_SIZE, 0, size) != 0:
            err = ctypes.get_errno()
            if err not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise OSError(err, os.strerror(err), str(path))
            return False
        os.fsync(fd)
        return True
    finally:
        os.close(fd)
