"""schemathesis against a real node, from the node's own /openapi.json: no 5xx, ever.

All operations, every phase (examples, coverage, fuzzing, and the stateful
phase that follows the document's links from creating a topic to appending,
reading and deleting), for a fixed time budget. A topic ``events`` (the
document's example name) holds data, so examples reach stored records.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from testkit.arrowhttp import append
from testkit.nodeproc import NodeProcess

BUDGET_SECONDS = 45


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    env = {"PLATEAU_STORAGE__CAPACITY_BYTES": str(2**62)}
    proc = NodeProcess(tmp_path / "data", token="fuzz", env=env).start()
    yield proc
    proc.stop()


@pytest.mark.slow
def test_schemathesis_finds_no_server_error(node: NodeProcess, tmp_path: Path) -> None:
    with node.client() as c:
        assert c.put("/admin/topics/events", json={"partitions": 2}).status_code == 201
        table = pa.table({"x": pa.array(range(100), pa.int64())})
        assert append(c, "events", "0", table).status_code == 200
    cli = Path(sys.executable).parent / "schemathesis"
    cmd = [
        str(cli),
        "run",
        f"{node.url}/openapi.json",
        "--checks",
        "not_a_server_error",
        "--header",
        "Authorization: Bearer fuzz",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-time",
        str(BUDGET_SECONDS),
        "--seed",
        "1",
        "--workers",
        "1",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path / "report"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=BUDGET_SECONDS * 4)
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert "passed" in proc.stdout and "Stateful" in proc.stdout, tail
    assert node.proc is not None and node.proc.poll() is None
