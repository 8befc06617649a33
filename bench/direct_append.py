"""Appends followed by their fsync, through the page cache against O_DIRECT, on this disk.

    python bench/direct_append.py [--threads 4] [--seconds 5] [--append-bytes 1433600]
        [--gap-ms 0] [--dir DIR]

Each thread appends ``--append-bytes`` to its own file and fdatasyncs it, as
the open segments of a node's partitions do (one append of 10,000 rows of
140 bytes is 1.4 MB); ``--gap-ms`` waits between appends, as a writer's other
stages do. Both modes run in turn, twice (buffered, direct, buffered, direct),
so the disk's drift falls on both. It measures the choice behind
``storage.direct_writes`` (``node/plateau/storage/data/append_file.py``):
the CPU per MB (process time) and the append+fsync latency. The last stdout
line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "node"))

from plateau.storage.data.append_file import DirectFile, open_append


def run(
    mode: str, threads: int, seconds: float, size: int, gap: float, root: Path
) -> dict[str, Any]:
    data = mmap.mmap(-1, size)
    data.write(os.urandom(size))
    latencies: list[float] = []
    written = [0] * threads
    lock = threading.Lock()

    def writer(i: int) -> None:
        path = root / f"{mode}-{i}"
        f = open_append(path, direct=mode == "direct", drop_pages=True)
        if mode == "direct" and not isinstance(f, DirectFile):
            raise SystemExit(f"{root}: this filesystem has no O_DIRECT")
        mine = []
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                if gap:
                    time.sleep(gap)
                t = time.perf_counter()
                f.write([memoryview(data)])
                f.sync()
                mine.append(time.perf_counter() - t)
                written[i] += size
        finally:
            os.close(f.fd)
            path.unlink()
        with lock:
            latencies.extend(mine)

    pool = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    cpu0, t0 = time.process_time(), time.monotonic()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
    latencies.sort()
    mb = sum(written) / 1e6
    return {
        "mode": mode,
        "mb_per_s": round(mb / wall),
        "cpu_ms_per_mb": round(cpu * 1e3 / mb, 3),
        "p50_ms": round(latencies[len(latencies) // 2] * 1e3, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1e3, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--append-bytes", type=int, default=1_433_600)
    ap.add_argument("--gap-ms", type=float, default=0.0)
    ap.add_argument("--dir", type=Path, default=None, help="where the files go [$TMPDIR]")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="direct-append-", dir=args.dir))
    try:
        runs = []
        for mode in ["buffered", "direct", "buffered", "direct"]:
            r = run(mode, args.threads, args.seconds, args.append_bytes, args.gap_ms / 1e3, root)
            print(json.dumps(r), file=sys.stderr)
            runs.append(r)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def median(mode: str, key: str) -> float:
        values = sorted(float(r[key]) for r in runs if r["mode"] == mode)
        return values[len(values) // 2]

    summary = {
        "bench": "direct_append",
        "threads": args.threads,
        "append_bytes": args.append_bytes,
        "gap_ms": args.gap_ms,
        "runs": runs,
        "cpu_ratio_direct_vs_buffered": round(
            median("direct", "cpu_ms_per_mb") / median("buffered", "cpu_ms_per_mb"), 3
        ),
        "mb_per_s_ratio_direct_vs_buffered": round(
            median("direct", "mb_per_s") / median("buffered", "mb_per_s"), 3
        ),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
