"""Real PySpark (``local[2]``, a real JVM) for the Spark reader's tests.

One SparkSession per test process (PySpark allows one JVM gateway per
process), started on first use and stopped at the end. Java and PySpark are
installed by ``tools/run-tests``; with ``CI=true`` a missing one fails.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import plateau.spark
from testkit.nodeproc import NodeProcess

IN_CI = os.environ.get("CI") == "true"
ROOT = Path(__file__).resolve().parents[2]


def spark_conf() -> dict[str, str]:
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "1g",
        "spark.sql.session.timeZone": "UTC",
        # loopback only: tests send no traffic off this machine
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
    }


def s3a_jars() -> Path | None:
    """``tools/fetch-s3a-jars``' directory (``tools/run-tests`` fetches it; cached)."""
    out = subprocess.run(
        [str(ROOT / "tools" / "fetch-s3a-jars")], capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        print(f"no S3A jars (s3a:// unreadable): {out.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    return Path(out.stdout.strip().splitlines()[-1])


def start_session(cores: int, name: str) -> Any:
    """A local Spark session with plateau registered; workers run this interpreter."""
    from pyspark.sql import SparkSession

    import plateau.spark

    # Python workers must run this interpreter (it has plateau and pyarrow)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    builder = SparkSession.builder.master(f"local[{cores}]").appName(name)
    # plateau's JVM reader (read_topic over a url): tools/run-tests builds the jar
    builder = builder.config("spark.jars", str(plateau.spark.jar_path()))
    # Spark's S3A connector (the archive's tests read s3a://): on the driver's class path,
    # which in local mode is the executors' too (spark.jars would copy 0.7 GB per session)
    s3a = s3a_jars()
    if s3a is not None:
        builder = builder.config("spark.driver.extraClassPath", f"{s3a}/*")
    for key, value in spark_conf().items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    plateau.spark.register(session)
    return session


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    why = None
    if shutil.which("java") is None:
        why = "no java on PATH (tools/run-tests installs openjdk-17-jdk-headless)"
    if importlib.util.find_spec("pyspark") is None:
        why = "pyspark is not installed (the spark extra: uv sync --extra spark)"
    elif not plateau.spark.JAR.is_file():
        why = "plateau's Spark jar is not built (tools/run-tests runs tools/build-spark-jar)"
    if why:
        if IN_CI:
            pytest.fail(f"CI=true never skips: {why}")
        pytest.skip(why)
    session = start_session(2, "plateau-tests")
    yield session
    session.stop()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    """A node of its own for a test that writes while Spark reads."""
    proc = NodeProcess(tmp_path / "data").start()
    yield proc
    proc.stop()
