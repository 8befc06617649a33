"""Topics with values derived from their indexes, so that every row read can be checked."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa

from plateau.client import PlateauClient
from plateau.protocol.snapshot import SNAPSHOT_FILE, SnapshotError, decode

T0_MS = 1_763_000_000_000  # 2025-11-13T02:13:20Z
STEP_MS = 1000


def value(partition: str, index: int) -> int:
    return int(partition) * 1_000_000 + index


def rows(partition: str, start: int, end: int) -> pa.Table:
    idx = range(start, end)
    return pa.table(
        {
            "v": pa.array([value(partition, i) for i in idx], pa.int64()),
            "s": pa.array([f"r{i}" for i in idx], pa.string()),
            "x": pa.array([i / 4 for i in idx], pa.float64()),
            "time": pa.array([T0_MS + i * STEP_MS for i in idx], pa.int64()),
        }
    )


def expected_time(index: int) -> datetime:
    return datetime.fromtimestamp(T0_MS / 1000, UTC) + timedelta(milliseconds=index * STEP_MS)


def fill(
    client: PlateauClient,
    topic: str,
    fmt: str,
    partitions: list[str],
    sealed: int,
    open_: int,
    segment_rows: int = 100,
) -> None:
    """``sealed`` rows per partition in segments of ``segment_rows``, then ``open_`` unsealed."""
    client.put_topic(
        topic, partitions=len(partitions), segment_format=fmt, segment_max_rows=segment_rows,
        segment_max_age_seconds=3600,
    )  # fmt: skip
    for p in partitions:
        for start in range(0, sealed, segment_rows):
            client.append(topic, p, rows(p, start, start + segment_rows))
        if open_:
            client.append(topic, p, rows(p, sealed, sealed + open_))


def snapshot_ends(data_dir: Path, topic: str) -> dict[str, int]:
    """Each partition's end as the node's last published snapshot lists it ({}: none yet)."""
    try:
        snapshot = decode((data_dir / SNAPSHOT_FILE).read_bytes())
    except (OSError, SnapshotError):
        return {}
    listed = snapshot.topics.get(topic)
    return {p: d.end for p, d in listed.partitions.items()} if listed is not None else {}


def wait_sealed(data_dir: Path, topic: str, ends: dict[str, int], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while snapshot_ends(data_dir, topic) != ends:
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: snapshot {snapshot_ends(data_dir, topic)} != {ends}")
        time.sleep(0.05)
