"""What both floor servers do with a body: an O_DIRECT write of it and its fdatasync.

One file per request path, written at its end in whole blocks (the padding
of a body's last block is not cut: nothing reads these files back).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

ALIGN = 4096


class Files:
    """The open files by request path.

    Lock order: ``_lock`` (the map) is released before a file's own lock is
    taken; a file's lock is held over its write and fdatasync, as a node's
    partition lock and group commit serialize one partition's appends.
    """

    def __init__(self, root: Path) -> None:
        self._root = root
        self._lock = threading.Lock()
        self._files: dict[str, _File] = {}

    def get(self, path: str) -> _File:
        name = path.split("?")[0].strip("/").replace("/", "_") or "root"
        with self._lock:
            f = self._files.get(name)
            if f is None:
                flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_DIRECT", 0)
                f = self._files[name] = _File(os.open(self._root / name, flags, 0o644))
        return f


class _File:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.end = 0
        self.lock = threading.Lock()

    def append(self, block_aligned: memoryview) -> None:
        """Write a page-aligned buffer whose length is a multiple of ALIGN, then fdatasync."""
        with self.lock:
            os.pwrite(self.fd, block_aligned, self.end)
            self.end += len(block_aligned)
            os.fdatasync(self.fd)


def aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
