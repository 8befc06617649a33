"""A full volume: writes refused with a clear error, reads go on, nothing corrupted.

The volume is a real, small tmpfs mounted for the test (root needed; CI runs as
root, so there the test never skips).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from testkit.arrowhttp import append, read_all
from testkit.nodeproc import NodeProcess

MiB = 1024 * 1024


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "vol"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={6 * MiB}", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot mount a tmpfs in CI: {r.stderr}")
        pytest.skip(f"mounting a tmpfs needs root: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def rows(seq: int, n: int = 2000) -> pa.Table:
    return pa.table(
        {
            "seq": pa.array([seq] * n, pa.int64()),
            "v": pa.array([os.urandom(100) for _ in range(n)], pa.binary()),
        }
    )


@pytest.mark.parametrize(("floor", "expected"), [(3 * MiB, 503), (0, 507)])
@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_full_volume_refuses_writes_and_keeps_data(
    small_volume: Path, fmt: str, floor: int, expected: int
) -> None:
    node = NodeProcess(
        small_volume / "data",
        env={"PLATEAU_STORAGE__MIN_FREE_BYTES": str(floor)},
        args=["--capacity-bytes", str(6 * MiB)],
    )
    node.log_path = small_volume.parent / "node.log"
    try:
        node.start()
        with node.client() as c:
            c.put(
                "/admin/topics/full",
                json={
                    "retention": {"max_bytes": 4 * MiB},
                    "segment": {"format": fmt, "max_rows": 3000, "compression": "none"},
                },
            ).raise_for_status()
            acked: list[tuple[int, int, int]] = []
            refusal = None
            for seq in range(100):
                r = append(c, "full", "0", rows(seq))
                if r.status_code == 200:
                    acked.append((seq, r.json()["span"]["start"], r.json()["span"]["end"]))
                elif r.status_code == 429:
                    time.sleep(0.1)
                else:
                    refusal = r
                    break
            assert refusal is not None, "the volume never filled up"
            assert refusal.status_code == expected, refusal.text
            assert "disk" in refusal.json()["message"] or "volume" in refusal.json()["message"]
            assert acked, "nothing was written before the volume filled"
            # reads go on, and every acknowledged row retention kept is intact at its index
            check_intact(c, acked)
        # and after a crash and restart on the full volume, they are all still there
        node.kill()
        node.start()
        with node.client() as c:
            check_intact(c, acked)
        node.stop()
    finally:
        if node.proc is not None and node.proc.returncode is None:
            node.kill()  # a failed assertion must not leave the node running


def check_intact(c: httpx.Client, acked: list[tuple[int, int, int]]) -> None:
    first = c.get("/topic/full").json()["partitions"]["0"]["start"]
    seqs = pa.concat_tables(read_all(c, "full", "0")).column("seq").to_pylist()
    kept = [(seq, s, e) for seq, s, e in acked if s >= first]
    assert kept, "retention removed everything: the test proves nothing"
    for seq, s, e in kept:
        assert seqs[s - first : e - first] == [seq] * (e - s)
