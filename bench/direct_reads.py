"""How fast this disk gives back sealed segments read with O_DIRECT, as the node reads them.

    python bench/direct_reads.py [--file-bytes 2147483648] [--files 4]
        [--threads 1,2,4,8] [--read-mib 1,4,16] [--data-root DIR]

Why: the node reads sealed arrow segments with ``O_DIRECT`` (``storage.direct_reads``),
straight from the disk, so a read of values that do not compress cannot go faster
than the disk's direct reads, whatever the node's CPU. The reads go through the
node's own call (``direct_io.read_bytes_direct``): a first version that read into an
``mmap`` buffer with ``os.preadv`` got less than half the rate on the same disk.
Plateau's Rust server writes through the page cache and reads rows it has just
written from memory, so in
``bench/ingest_vs_rs.py`` its reads are not bound by the disk at all. This measures
that bound on its own: ``--files`` files of ``--file-bytes`` random bytes are written
(and fsynced) under ``--data-root``, then read whole with ``O_DIRECT`` by each number of
``--threads`` (taking ranges in turn) at each ``--read-mib``, and deleted.

Progress goes to stderr; the last stdout line is one JSON object: ``runs[]`` (one per
threads x size: ``threads``, ``read_mib``, ``gb_per_s``), ``gb_per_s_max`` and
``rows_per_s_at_140_bytes`` (the best rate over 140 bytes, the incompressible workload's row).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MiB, default_data_root, emit, log
from plateau.storage.data.direct_io import open_direct, read_bytes_direct

ROW_BYTES = 140  # bench/workloads.py's incompressible row


def write_files(root: Path, files: int, size: int) -> list[Path]:
    """Random bytes (nothing a device could compress or deduplicate), fsynced."""
    paths = []
    block = os.urandom(16 * MiB)
    for i in range(files):
        path = root / f"segment-{i}"
        with path.open("wb") as f:
            left = size
            while left > 0:
                f.write(block[: min(left, len(block))])
                left -= len(block)
            f.flush()
            os.fsync(f.fileno())
        paths.append(path)
    return paths


def read_all(paths: list[Path], threads: int, read_bytes: int) -> tuple[int, float]:
    """Bytes read and seconds taken reading every file whole with ``threads`` threads,
    ``read_bytes`` a read, through the node's own direct read (``read_bytes_direct``:
    an aligned read into a new buffer of Arrow's memory pool, as a decode-ahead does)."""
    fds = {}
    try:
        for path in paths:
            fd = open_direct(path)
            if fd is None:
                raise OSError(f"{path}: this filesystem has no O_DIRECT")
            fds[path] = fd
        jobs = [
            (fds[p], off, min(read_bytes, size - off))
            for p in paths
            for size in [p.stat().st_size]
            for off in range(0, size, read_bytes)
        ]
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="reader") as pool:
            total = sum(pool.map(lambda job: read_bytes_direct(*job).size, jobs))
        return total, time.perf_counter() - started
    finally:
        for fd in fds.values():
            os.close(fd)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--file-bytes", type=int, default=2 * 1024 * MiB, help="bytes a file [2 GiB]")
    ap.add_argument("--files", type=int, default=4, help="files, read in turn [4]")
    ap.add_argument("--threads", default="1,2,4,8", help="reader threads to try [1,2,4,8]")
    ap.add_argument("--read-mib", default="1,4,16", help="MiB a read to try [1,4,16]")
    ap.add_argument("--data-root", type=Path, default=default_data_root(), help="[$TMPDIR]")
    args = ap.parse_args(argv)
    try:
        args.thread_counts = _ints(args.threads)
        args.read_sizes = _ints(args.read_mib)
    except ValueError as exc:
        ap.error(f"--threads and --read-mib take comma-separated integers: {exc}")
    if not args.thread_counts or not args.read_sizes:
        ap.error("--threads and --read-mib need at least one value each")
    if min(args.thread_counts + args.read_sizes) < 1 or args.files < 1 or args.file_bytes < MiB:
        ap.error("--threads, --read-mib and --files must be positive, --file-bytes >= 1 MiB")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="plateau-direct-reads-", dir=args.data_root))
    try:
        paths = write_files(root, args.files, args.file_bytes)
        runs = []
        for size in args.read_sizes:
            for threads in args.thread_counts:
                got, seconds = read_all(paths, threads, size * MiB)
                rate = got / seconds / 1e9
                log(f"{threads} threads, {size} MiB reads: {rate:.2f} GB/s")
                runs.append({"threads": threads, "read_mib": size, "gb_per_s": round(rate, 3)})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    best = max(r["gb_per_s"] for r in runs)
    result = {
        "bench": "direct_reads",
        "file_bytes": args.file_bytes,
        "files": args.files,
        "runs": runs,
        "gb_per_s_max": best,
        "rows_per_s_at_140_bytes": round(best * 1e9 / ROW_BYTES),
    }
    emit(result)
    return result


if __name__ == "__main__":
    main()
