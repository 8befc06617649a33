"""examples/spark_job.py run by spark-submit, as a user runs it locally: on a node's data
directory (a parquet topic, through read_topic) and on its URL (an arrow topic)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import plateau.spark
from plateau.client import PlateauClient
from testkit.nodeproc import ROOT, NodeProcess
from tests.spark.conftest import IN_CI
from tests.spark.topics import fill, value, wait_sealed

JOB = ROOT / "examples" / "spark_job.py"


def spark_submit() -> str:
    found = shutil.which("spark-submit", path=str(Path(sys.executable).parent))
    if found is None:
        if IN_CI:
            pytest.fail("CI=true never skips: no spark-submit next to the interpreter")
        pytest.skip("no spark-submit (the spark extra)")
    return found


def run_job(*args: str) -> tuple[dict[str, Any], str]:
    """The job's report (its last stdout line) and all it printed (spark-submit sends the
    Python driver's stderr to its own stdout)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    cmd = [
        spark_submit(), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
        "--jars", str(plateau.spark.jar_path()),
        "--conf", "spark.driver.host=127.0.0.1", str(JOB), *args,
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1])), out.stdout + out.stderr


def test_spark_job_on_a_volume_and_on_a_url(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data").start()
    try:
        with PlateauClient(node.url) as client:
            fill(client, "logs", "parquet", ["0", "1"], 400, 1)  # one open row each
            fill(client, "logs-arrow", "arrow", ["0"], 300, 20)
        wait_sealed(node.data_dir, "logs", {"0": 400, "1": 400})
        report, _ = run_job("--path", str(node.data_dir), "--topic", "logs", "--column", "v",
                         "--out", str(tmp_path / "hourly"))  # fmt: skip
        assert report == {"topic": "logs", "hours": 1, "rows": 800}  # sealed rows only
        (row,) = pq.read_table(tmp_path / "hourly").to_pylist()
        expected = [value(p, i) for p in "01" for i in range(400)]
        assert row["rows"] == 800
        assert row["mean_v"] == pytest.approx(sum(expected) / len(expected))
        report, log = run_job("--url", node.url, "--topic", "logs-arrow", "--format", "arrow")
        assert report == {"topic": "logs-arrow", "hours": 1, "rows": 320}
        assert "reading through format('plateau')" not in log  # the JVM reader ran
    finally:
        node.stop()
