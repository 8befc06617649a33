"""Spark reading a node's data directory through a real read-only bind mount, in a
private mount namespace made by the test (``unshare -m`` + ``mount --bind -o ro``),
while the node appends, seals and deletes (retention) in the real directory.

Every batch read must be a consistent snapshot: each record exactly once, values
matching their indexes (no half-written segment), no gap inside a partition. A
segment deleted by retention under a running query must give the failOnDataLoss
behaviour: a clear error naming the partition and the lost indexes, or (false) the
other records without those, never a crash deep in a task.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plateau.client import PlateauClient
from testkit.nodeproc import NodeProcess
from tests.spark.conftest import IN_CI
from tests.spark.topics import rows, snapshot_ends

READER = Path(__file__).with_name("ro_reader.py")


def wide_rows(partition: str, start: int, end: int) -> Any:
    """Rows with ~1 KB of incompressible payload: segments of 100 rows are ~100 KB."""
    table = rows(partition, start, end)
    payload = [os.urandom(500).hex() for _ in range(end - start)]
    return table.append_column("payload", [payload])


@pytest.fixture
def readonly(tmp_path: Path) -> Iterator[Any]:
    """Runs ``ro_reader.py`` in a private mount namespace on a read-only view of a dir."""
    why = None
    if os.geteuid() != 0:
        why = "needs root for unshare -m and mount"
    elif shutil.which("unshare") is None:
        why = "no unshare (util-linux)"
    if why:
        if IN_CI:
            pytest.fail(f"CI=true never skips: {why}")
        pytest.skip(why)
    view = tmp_path / "ro-view"
    view.mkdir()

    def run(data_dir: Path, *args: str) -> subprocess.Popen[str]:
        script = 'mount --bind -o ro "$1" "$2" && shift 2 && exec "$@"'
        cmd = [
            "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
            str(data_dir), str(view), sys.executable, str(READER), args[0], str(view), *args[1:],
        ]  # fmt: skip
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    yield run


def results(proc: subprocess.Popen[str], timeout: float = 300) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"reader failed ({proc.returncode}): {err[-3000:]}"
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_read_only_mount_reads_consistent_snapshots_while_node_writes(
    tmp_path: Path, readonly: Any
) -> None:
    node = NodeProcess(tmp_path / "data").start()
    stop = threading.Event()
    errors: list[BaseException] = []
    writer: threading.Thread | None = None
    try:
        with PlateauClient(node.url) as client:
            for fmt in ("parquet", "arrow"):  # retention keeps ~20 segments of ~100 KB
                client.put_topic(
                    f"live-{fmt}", partitions=2, segment_format=fmt, segment_max_rows=100,
                    segment_max_age_seconds=0.3, max_bytes=2_000_000,
                )  # fmt: skip
                for p in ("0", "1"):
                    client.append(f"live-{fmt}", p, wide_rows(p, 0, 150))

        def append() -> None:
            try:
                with PlateauClient(node.url) as c:
                    ends = {(t, p): 150 for t in ("live-parquet", "live-arrow") for p in "01"}
                    while not stop.is_set():
                        for (t, p), start in ends.items():
                            ends[(t, p)] = c.append(t, p, wide_rows(p, start, start + 37)).end
                        time.sleep(0.1)  # ~1.5 MB/s: a segment per partition per 0.3 s
            except BaseException as e:
                errors.append(e)

        writer = threading.Thread(target=append, daemon=True)
        deadline = time.monotonic() + 30
        while not all(snapshot_ends(node.data_dir, f"live-{f}") for f in ("parquet", "arrow")):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        writer.start()
        lines = results(
            readonly(node.data_dir, "consistency", "live-parquet", "live-arrow", "--reads", "5")
        )
    finally:
        stop.set()
        if writer is not None and writer.is_alive():  # its last appends land first
            writer.join(30)
        node.stop()
    assert not errors, errors
    assert lines[0] == {"read_only": True}, "the reader's view must be a read-only mount"
    reads = lines[1:]
    assert len(reads) == 10
    for topic in ("live-parquet", "live-arrow"):
        seen = [r for r in reads if r["topic"] == topic]
        for r in seen:  # one run per partition: no gap, nothing twice (checked in the reader)
            assert set(r["ranges"]) == {"0", "1"}
            assert all(len(runs) == 1 for runs in r["ranges"].values()), r
        firsts = [r["ranges"]["0"][0][0] for r in seen]
        lasts = [r["ranges"]["0"][0][1] for r in seen]
        assert lasts[-1] > lasts[0], f"{topic}: the node kept appending and sealing: {lasts}"
        assert firsts[-1] > 0, f"{topic}: retention deleted the oldest segments: {firsts}"
    assert not (node.data_dir / "written-by-reader").exists()


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_segment_deleted_under_a_running_query(
    tmp_path: Path, readonly: Any, fail_on_data_loss: str
) -> None:
    node = NodeProcess(tmp_path / "data").start()
    gate = tmp_path / "gate"
    gate.mkdir()
    try:
        with PlateauClient(node.url) as client:
            # an hour's age limit: the 1-row segment [1000, 1001) stays open (unlisted) however
            # long Spark takes to start on a loaded machine (the default 60 s sealed it once)
            client.put_topic(
                "loss", partitions=2, segment_max_rows=100, max_bytes=10_000_000,
                segment_max_age_seconds=3600,
            )  # fmt: skip
            for start in range(0, 1001, 100):  # in turn, so that both have old segments
                for p in ("0", "1"):  # (the last append seals [900, 1000))
                    client.append("loss", p, wide_rows(p, start, min(start + 100, 1001)))
        deadline = time.monotonic() + 30
        while snapshot_ends(node.data_dir, "loss") != {"0": 1000, "1": 1000}:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        reader = readonly(node.data_dir, "gated", "loss", str(gate), fail_on_data_loss)
        deadline = time.monotonic() + 120
        while not (gate / "started").exists():  # the plan is made, the first task runs
            assert reader.poll() is None, reader.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with PlateauClient(node.url) as client:  # keeps about half of each partition
            client.put_topic("loss", max_bytes=600_000)
        deadline = time.monotonic() + 30
        while (
            min(
                int(p.name.split("-")[0])
                for p in (node.data_dir / "topics" / "loss" / "1").glob("*.parquet")
            )
            == 0
        ):
            assert time.monotonic() < deadline, "retention deleted nothing"
            time.sleep(0.05)
        kept = {
            p: sorted(
                int(f.name.split("-")[0])
                for f in (node.data_dir / "topics" / "loss" / p).glob("*.parquet")
            )[0]
            for p in "01"
        }
        (gate / "go").touch()
        (line,) = results(reader)
    finally:
        node.stop()
    if fail_on_data_loss == "true":
        assert "error" in line, line
        # task 0 read partition 0's first segment (open before the deletion); task 1 found
        # the next one gone
        assert "partition '0': indexes [100, 200)" in line["error"], line["error"]
        assert "deleted by retention" in line["error"] and "failOnDataLoss" in line["error"]
    else:
        assert "error" not in line, line
        # partition 1 lost its oldest segments; all it still had was read, exactly once
        assert line["ranges"]["1"] == [[kept["1"], 999]]
        # partition 0's first segment was open in the running task: read whole
        assert line["ranges"]["0"] == [[0, 99], [kept["0"], 999]]
