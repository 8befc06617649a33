"""What an acknowledged append's fdatasync waits for on this disk: the data, or the journal too.

    python bench/append_commit.py [--threads 4] [--appends 300] [--append-bytes 1433600]
        [--rounds 2] [--dir DIR]

Each thread writes ``--append-bytes`` at a time with O_DIRECT to its own file,
each write followed by its ``fdatasync`` (``pwritev2(RWF_DSYNC)`` for ``dsync``),
as an open segment's appends are. The modes differ only in the blocks written to:

- ``append``: new blocks past the file's end (what the node does). ext4 must
  commit its journal (the new extents, the size) before ``fdatasync`` returns.
- ``fallocate`` / ``fallocate_keep_size``: blocks reserved first
  (``posix_fallocate``, or ``FALLOC_FL_KEEP_SIZE``): still unwritten extents whose
  conversion is journalled.
- ``dsync``: as ``append``, the write itself synchronous.
- ``overwrite``: blocks already written (zeros, synced before the clock starts):
  no metadata changes, so only the data and the device's cache flush are waited for.

Why it matters: ``overwrite`` against ``append`` is the share of an append's
disk wait that is the journal commit, which only writing every byte twice
(zeros ahead) or reusing old files (a torn write could then leave old bytes
inside a message that looks whole) would avoid; see docs/ingest.md. Modes
alternate within each round, so the disk's drift falls on all of them. The
last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import emit, percentile

MODES = ("append", "fallocate", "fallocate_keep_size", "dsync", "overwrite")
FALLOC_FL_KEEP_SIZE = 1
ZERO_CHUNK = 8 << 20


def _prepare(fd: int, mode: str, total: int) -> None:
    if mode == "overwrite":
        zeros = mmap.mmap(-1, ZERO_CHUNK)
        for offset in range(0, total, ZERO_CHUNK):
            os.pwrite(fd, memoryview(zeros)[: min(ZERO_CHUNK, total - offset)], offset)
        os.fsync(fd)
    elif mode == "fallocate":
        os.posix_fallocate(fd, 0, total)
        os.fsync(fd)
    elif mode == "fallocate_keep_size":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, ctypes.c_long(0), ctypes.c_long(total)):
            raise OSError(ctypes.get_errno(), "fallocate(FALLOC_FL_KEEP_SIZE)")
        os.fsync(fd)


def run(mode: str, threads: int, appends: int, size: int, root: Path) -> dict[str, Any]:
    data = mmap.mmap(-1, size)  # page-aligned, as O_DIRECT needs
    data.write(os.urandom(size))
    latencies: list[float] = []
    lock = threading.Lock()
    ready = threading.Barrier(threads)

    def writer(i: int) -> None:
        path = root / f"{mode}-{i}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
        mine = []
        try:
            _prepare(fd, mode, size * appends)
            ready.wait()
            for k in range(appends):
                t = time.perf_counter()
                if mode == "dsync":
                    os.pwritev(fd, [data], k * size, os.RWF_DSYNC)
                else:
                    os.pwrite(fd, data, k * size)
                    os.fdatasync(fd)
                mine.append(time.perf_counter() - t)
        finally:
            os.close(fd)
            path.unlink()
        with lock:
            latencies.extend(mine)

    pool = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    latencies.sort()
    return {
        "mode": mode,
        "mean_ms": round(sum(latencies) / len(latencies) * 1e3, 2),
        "p50_ms": round(percentile(latencies, 50) * 1e3, 2),
        "p99_ms": round(percentile(latencies, 99) * 1e3, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--appends", type=int, default=300, help="per thread and mode [300]")
    ap.add_argument("--append-bytes", type=int, default=1_433_600)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=None, help="where the files go [$TMPDIR]")
    args = ap.parse_args()
    if args.append_bytes % mmap.PAGESIZE or args.append_bytes <= 0:
        ap.error(f"--append-bytes must be a positive multiple of {mmap.PAGESIZE} (O_DIRECT)")
    if args.threads < 1 or args.appends < 1 or args.rounds < 1:
        ap.error("--threads, --appends and --rounds must be at least 1")
    root = Path(tempfile.mkdtemp(prefix="append-commit-", dir=args.dir))
    runs = []
    try:
        for _ in range(args.rounds):
            for mode in MODES:
                r = run(mode, args.threads, args.appends, args.append_bytes, root)
                print(json.dumps(r), file=sys.stderr)
                runs.append(r)
    except OSError as exc:
        raise SystemExit(f"{root}: {exc} (O_DIRECT and fallocate need a disk filesystem)") from exc
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def median(mode: str) -> float:
        return round(statistics.median(float(r["mean_ms"]) for r in runs if r["mode"] == mode), 2)

    summary = {
        "bench": "append_commit",
        "threads": args.threads,
        "append_bytes": args.append_bytes,
        "runs": runs,
        "mean_ms": {mode: median(mode) for mode in MODES},
        "overwrite_vs_append": round(median("overwrite") / median("append"), 3),
    }
    emit(summary)


if __name__ == "__main__":
    main()
