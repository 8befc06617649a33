"""The most a fsync-per-append server could acknowledge on this disk, next to the servers.

Issue 28 asks the node, which fsyncs every acknowledged append, to ingest
1.3x as fast as plateau's Rust server, which acknowledges from memory. Whether
that is possible on a given machine is a property of its disk, so
bench/ingest_vs_rs.py measures it in the same run, between the servers'
phases: ``--clients`` threads in a closed loop, each writing one body's bytes
(the workload's mean body) to its own file with O_DIRECT and ``fdatasync``
after each write, exactly as the node's open segments do
(``bench/direct_append.py``'s ``run``), and nothing else.

``gap_ms`` is time each thread spends between its appends: what a real
server's receive, parse, validation and reply cost per append on the
writer's path. At 0 it is the disk's ceiling for any server; at 1 ms, one of
a server whose whole append path outside the disk takes 1 ms. Each ceiling
is reported in rows/s at the workload's raw bytes a row (what the node
writes when it compresses nothing) and against plateau's rate of the same
pair.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from direct_append import run

DEFAULT_GAPS_MS = (0.0, 1.0, 2.0, 4.0)


def measure(
    clients: int,
    seconds: float,
    body_bytes: int,
    bytes_per_row: float,
    gaps_ms: tuple[float, ...],
    root: Path,
) -> list[dict[str, Any]]:
    """One closed-loop O_DIRECT + fdatasync run per gap, in the order given."""
    where = Path(tempfile.mkdtemp(prefix="plateau-disk-ceiling-", dir=root))
    out: list[dict[str, Any]] = []
    try:
        for gap in gaps_ms:
            r = run("direct", clients, seconds, body_bytes, gap / 1e3, where)
            out.append(
                {
                    "gap_ms": gap,
                    "mb_per_s": r["mb_per_s"],
                    "p50_ms": r["p50_ms"],
                    "p99_ms": r["p99_ms"],
                    "rows_per_s": round(r["mb_per_s"] * 1e6 / bytes_per_row),
                }
            )
    finally:
        shutil.rmtree(where, ignore_errors=True)
    return out


def parse_gaps(text: str) -> tuple[float, ...]:
    """``0,1,2`` -> (0.0, 1.0, 2.0); ValueError on anything but non-negative numbers."""
    gaps = tuple(float(g) for g in text.split(",") if g.strip())
    if not gaps or any(g < 0 for g in gaps):
        raise ValueError(f"a comma-separated list of milliseconds >= 0, got {text!r}")
    return gaps
