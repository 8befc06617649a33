"""url mode's token from ``$PLATEAU_TOKEN`` when no option ``token`` is given: what a
Spark pod set up by ``plateau spark-conf --mode url`` has (the read token from the node's
Secret in its environment), against a real node that refuses reads without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import plateau.spark
from plateau.client import PlateauClient
from testkit.nodeproc import ROOT, NodeProcess
from tests.spark.topics import fill

WRITE = "w-token-env"
READ = "r-token-env"
ROWS = 2 * (100 + 5)  # two partitions, 100 sealed and 5 open rows each

# A driver whose environment had PLATEAU_TOKEN before its JVM started, as a pod's does:
# format("plateau") plans in a Python worker started by that JVM, read_topic here.
JOB = """
import json, sys
from tests.spark.conftest import start_session
import plateau.spark
spark = start_session(1, "token-env")
url, topic = sys.argv[1], sys.argv[2]
python = spark.read.format("plateau").option("url", url).option("topic", topic).load()
jvm = plateau.spark.read_topic(spark, url=url, topic=topic)
plan = jvm._jdf.queryExecution().executedPlan().toString()
print(json.dumps({"python": python.count(), "jvm": jvm.count(), "scan": "PlateauUrlScan" in plan}))
spark.stop()
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data = Path(tmp_path_factory.mktemp("token-env")) / "data"
    proc = NodeProcess(data, token=WRITE, read_token=READ).start()
    try:
        with PlateauClient(proc.url, token=WRITE) as client:
            fill(client, "t", "arrow", ["0", "1"], 100, 5)
        yield proc
    finally:
        proc.stop()


def run_job(node: NodeProcess, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", JOB, node.url, "t"]
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, env=full, timeout=300, check=False
    )


def test_a_driver_with_plateau_token_reads_without_the_option(
    spark: Any, node: NodeProcess
) -> None:
    out = run_job(node, {"PLATEAU_TOKEN": READ})
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"python": ROWS, "jvm": ROWS, "scan": True}


def test_read_topic_takes_the_environment_and_the_option_wins(
    spark: Any, node: NodeProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATEAU_TOKEN", READ)
    df = plateau.spark.read_topic(spark, url=node.url, topic="t")
    assert "PlateauUrlScan" in df._jdf.queryExecution().executedPlan().toString()
    assert df.count() == ROWS
    # the write token reads too; a wrong option is not rescued by the environment
    assert plateau.spark.read_topic(spark, url=node.url, topic="t", token=WRITE).count() == ROWS
    with pytest.raises(ValueError, match="option 'url': the node refused"):
        plateau.spark.read_topic(spark, url=node.url, topic="t", token="wrong")


def test_without_a_token_the_node_refuses(
    spark: Any, node: NodeProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PLATEAU_TOKEN", raising=False)
    with pytest.raises(ValueError, match="option 'url': the node refused"):
        plateau.spark.read_topic(spark, url=node.url, topic="t")
