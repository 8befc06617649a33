"""``server.arrow_memory_pool``: the node's Arrow buffers come from the allocator it names.

A real node process: its startup line reports the backend of Arrow's default
pool after ``run_node`` set it (read back from pyarrow, not echoed from the
setting), and appends and reads work on each pool. A name the node does not
know stops it before it opens anything, exit 2, naming the setting.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from plateau.protocol import ARROW_FILE
from plateau.server.tuning import ARROW_POOL_ENV, choose_arrow_pool
from testkit.nodeproc import NodeProcess

SERVING = re.compile(r"plateau node serving .* Arrow memory pool (\w+)\)")


def pool_in_log(proc: NodeProcess) -> str:
    found = SERVING.findall(proc.log_path.read_text(errors="replace"))
    assert found, proc.log()
    return str(found[-1])


def has_jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


def ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


@pytest.mark.parametrize(("value", "expected"), [(None, "jemalloc"), ("mimalloc", "mimalloc")])
def test_the_node_allocates_from_the_configured_pool(
    tmp_path: Path, value: str | None, expected: str
) -> None:
    if expected == "jemalloc" and not has_jemalloc():
        expected = pa.default_memory_pool().backend_name  # the node keeps it, with a warning
    env = {} if value is None else {"PLATEAU_SERVER__ARROW_MEMORY_POOL": value}
    proc = NodeProcess(tmp_path / "data", env=env).start()
    try:
        assert pool_in_log(proc) == expected
        table = pa.table(
            {"time": pa.array(range(1000), pa.int64()), "v": [str(i) for i in range(1000)]}
        )
        with httpx.Client(base_url=proc.url) as http:
            r = http.post(
                "/topic/t/partition/p", content=ipc(table), headers={"content-type": ARROW_FILE}
            )
            assert r.status_code == 200, r.text
            r = http.get("/topic/t/partition/p/records?start=0", headers={"accept": ARROW_FILE})
            assert r.status_code == 200, r.text
        assert pa.ipc.open_file(r.content).read_all().select(["time", "v"]).equals(table)
    finally:
        proc.stop()


@pytest.mark.parametrize("value", ["tcmalloc", "", "JEMALLOC "])
def test_an_unknown_pool_stops_the_node_with_exit_2(tmp_path: Path, value: str) -> None:
    proc = NodeProcess(tmp_path / "data", env={"PLATEAU_SERVER__ARROW_MEMORY_POOL": value})
    with pytest.raises(RuntimeError, match="arrow_memory_pool"):
        proc.start(timeout=10)
    assert proc.proc is not None and proc.proc.returncode == 2
    assert not (tmp_path / "data").exists()  # refused before the engine opened the directory


def test_the_pool_cannot_be_chosen_once_pyarrow_is_loaded() -> None:
    """Arrow reads the variable once, as it loads: too late, and the node refuses to pretend."""
    assert "pyarrow" in sys.modules  # this test process has loaded it (import above)
    before = os.environ.get(ARROW_POOL_ENV)
    with pytest.raises(RuntimeError, match="before pyarrow loads"):
        choose_arrow_pool("system")
    assert os.environ.get(ARROW_POOL_ENV) == before  # nothing changed
