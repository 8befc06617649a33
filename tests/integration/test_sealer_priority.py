"""The sealer threads run ``storage.sealer_nice`` levels below the node, seen from outside.

Read from ``/proc/<pid>/task/*/stat`` of a real node after it sealed segments:
Linux keeps a nice value per thread, and ``ps -L`` or ``top -H`` show the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from plateau.client import PlateauClient
from plateau.storage.engine import SEALER_THREADS
from testkit.nodeproc import NodeProcess
from tests.spark.topics import wait_sealed

ROWS = 100


def thread_nices(pid: int) -> dict[int, int]:
    """Nice value of each thread of ``pid`` (``stat``'s 19th field)."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        out[int(task.name)] = int(fields[16])  # fields[0] is the 3rd field (state)
    return out


def seal_some(node: NodeProcess, fmt: str) -> None:
    with PlateauClient(node.url) as client:
        client.put_topic(
            f"t-{fmt}", partitions=2, segment_format=fmt, segment_max_rows=ROWS,
            segment_max_age_seconds=3600,
        )  # fmt: skip
        for p in ("0", "1"):
            for start in range(0, 3 * ROWS, ROWS):
                client.append(f"t-{fmt}", p, pa.table({"v": list(range(start, start + ROWS))}))
    wait_sealed(node.data_dir, f"t-{fmt}", {"0": 2 * ROWS, "1": 2 * ROWS})


def lowered(node: NodeProcess, base: int) -> set[int]:
    nices = thread_nices(node.pid)
    assert nices[node.pid] == base, "the main thread keeps the node's priority"
    return {tid for tid, nice in nices.items() if nice != base}


@pytest.mark.parametrize("base", [0, 3])
def test_seals_run_on_threads_below_the_node(tmp_path: Path, base: int) -> None:
    """Relative to the node's own nice (``base``): a node started under ``nice 3`` seals at 10."""

    def start_niced() -> None:
        os.nice(base)

    node = NodeProcess(
        tmp_path / "data", env={"PLATEAU_STORAGE__SEALER_NICE": "7"}, preexec=start_niced
    )
    node.start()
    try:
        assert lowered(node, base) == set(), "no seal yet, no lowered thread"
        seal_some(node, "parquet")
        seal_some(node, "arrow")
        nices = thread_nices(node.pid)
        sealers = lowered(node, base)
        assert 1 <= len(sealers) <= SEALER_THREADS
        assert {nices[tid] for tid in sealers} == {base + 7}
    finally:
        node.stop()


def test_zero_leaves_the_sealers_at_the_nodes_priority(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data", env={"PLATEAU_STORAGE__SEALER_NICE": "0"}).start()
    try:
        seal_some(node, "parquet")
        assert lowered(node, 0) == set()
    finally:
        node.stop()


@pytest.mark.parametrize("value", ["20", "-1", "low"])
def test_a_bad_value_stops_the_node_with_one_line(tmp_path: Path, value: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from plateau.cli import main; main()", "node",
         "--data-dir", str(tmp_path / "data"), "--bind", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PLATEAU_STORAGE__SEALER_NICE": value},
    )  # fmt: skip
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "sealer_nice" in proc.stderr, proc.stderr
    assert not (tmp_path / "data").exists(), "a refused start creates nothing"
