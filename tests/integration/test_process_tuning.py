"""The node's process-wide knobs (``server.tuning``) reach the process, seen in its log.

Real node processes. The startup line reports what is in force after
``run_node`` set it, read back from the interpreter (``sys.getswitchinterval``)
and from pyarrow (the default pool's backend), not echoed from the settings, so
an operator can see it in the pod's log. Bad values stop the node before it
opens anything, exit 2, naming the setting.
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
from testkit.arrowhttp import append
from testkit.nodeproc import NodeProcess, metric_values

SERVING = re.compile(
    r"plateau node serving .* \(GIL switch interval ([0-9.]+) ms, Arrow memory pool (\w+)\)"
)


def in_force(proc: NodeProcess) -> tuple[float, str]:
    """The GIL switch interval and the Arrow pool the node's startup line reports."""
    found = SERVING.findall(proc.log_path.read_text(errors="replace"))
    assert found, proc.log()
    interval, pool = found[-1]
    return float(interval), str(pool)


def has_jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


@pytest.mark.parametrize(
    ("env", "interval", "pool"),
    [
        ({}, 1.0, "jemalloc"),
        (
            {
                "PLATEAU_SERVER__GIL_SWITCH_INTERVAL_MS": "2.5",
                "PLATEAU_SERVER__ARROW_MEMORY_POOL": "mimalloc",
            },
            2.5,
            "mimalloc",
        ),
        ({"PLATEAU_SERVER__ARROW_MEMORY_POOL": "system"}, 1.0, "system"),
    ],
)
def test_the_node_runs_with_the_configured_knobs(
    tmp_path: Path, env: dict[str, str], interval: float, pool: str
) -> None:
    if pool == "jemalloc" and not has_jemalloc():
        pool = pa.default_memory_pool().backend_name  # the node keeps it, with a warning
    proc = NodeProcess(tmp_path / "data", env=env).start()
    try:
        assert in_force(proc) == (interval, pool)
        table = pa.table(
            {"time": pa.array(range(1000), pa.int64()), "v": [str(i) for i in range(1000)]}
        )
        with httpx.Client(base_url=proc.url) as http:
            r = append(http, "t", "p", table)
            assert r.status_code == 200, r.text
            r = http.get("/topic/t/partition/p/records?start=0", headers={"accept": ARROW_FILE})
            assert r.status_code == 200, r.text
        assert pa.ipc.open_file(r.content).read_all().select(["time", "v"]).equals(table)
    finally:
        proc.stop()


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("gil_switch_interval_ms", "0"),
        ("gil_switch_interval_ms", "-1"),
        ("gil_switch_interval_ms", "101"),
        ("gil_switch_interval_ms", "fast"),
        ("arrow_memory_pool", "tcmalloc"),
        ("arrow_memory_pool", ""),
        ("arrow_memory_pool", "JEMALLOC "),
        ("gc_freeze", "maybe"),
    ],
)
def test_a_bad_value_stops_the_node_with_exit_2(tmp_path: Path, setting: str, value: str) -> None:
    env = {f"PLATEAU_SERVER__{setting.upper()}": value}
    proc = NodeProcess(tmp_path / "data", env=env)
    with pytest.raises(RuntimeError, match=setting):
        proc.start(timeout=10)
    assert proc.proc is not None and proc.proc.returncode == 2
    assert not (tmp_path / "data").exists()  # refused before the engine opened the directory


@pytest.mark.parametrize("freeze", [True, False])
def test_the_startup_heap_is_kept_out_of_the_collector(tmp_path: Path, freeze: bool) -> None:
    """What the node made while starting is frozen before it serves (``server.gc_freeze``),
    seen on the node's own /metrics and log; the collections it still runs are counted."""
    env = {} if freeze else {"PLATEAU_SERVER__GC_FREEZE": "false"}
    proc = NodeProcess(tmp_path / "data", env=env).start()
    try:
        table = pa.table({"time": pa.array(range(100), pa.int64()), "v": ["x"] * 100})
        with httpx.Client(base_url=proc.url) as http:
            for _ in range(20):  # requests allocate: young collections run meanwhile
                assert append(http, "t", "p", table).status_code == 200
        (frozen,) = metric_values(proc.url, "plateau_gc_frozen_objects").values()
        pauses = metric_values(proc.url, "plateau_gc_pause_seconds_count")
        logged = "startup objects kept out of the garbage collector" in proc.log()
    finally:
        proc.stop()
    if freeze:
        assert frozen > 10_000  # modules, settings, the app: about 120,000 on this machine
        assert logged
    else:
        assert frozen == 0 and not logged
    assert pauses.get((("generation", "0"),), 0) > 0, pauses


def test_the_pool_cannot_be_chosen_once_pyarrow_is_loaded() -> None:
    """Arrow reads the variable once, as it loads: too late, and the node refuses to pretend."""
    assert "pyarrow" in sys.modules  # this test process has loaded it (import above)
    before = os.environ.get(ARROW_POOL_ENV)
    with pytest.raises(RuntimeError, match="before pyarrow loads"):
        choose_arrow_pool("system")
    assert os.environ.get(ARROW_POOL_ENV) == before  # nothing changed
