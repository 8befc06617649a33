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
import subprocess
import sys
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from plateau.protocol import ARROW_FILE
from plateau.server.tuning import (
    ARROW_POOL_ENV,
    MIMALLOC_PURGE_ENV,
    choose_arrow_pool,
    choose_read_pool_purge_delay,
)
from testkit.arrowhttp import append
from testkit.nodeproc import NodeProcess, metric_values

SERVING = re.compile(
    r"plateau node serving .* \(GIL switch interval ([0-9.]+) ms, Arrow memory pool (\w+), "
    r"read pool purge delay (-?\d+) ms\)"
)


def in_force(proc: NodeProcess) -> tuple[float, str, int]:
    """The GIL switch interval, the Arrow pool and the read pool's purge delay the node's
    startup line reports."""
    found = SERVING.findall(proc.log_path.read_text(errors="replace"))
    assert found, proc.log()
    interval, pool, purge = found[-1]
    return float(interval), str(pool), int(purge)


def has_jemalloc() -> bool:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


@pytest.mark.parametrize(
    ("env", "interval", "pool", "purge"),
    [
        ({}, 1.0, "jemalloc", 10_000),
        (
            {
                "PLATEAU_SERVER__GIL_SWITCH_INTERVAL_MS": "2.5",
                "PLATEAU_SERVER__ARROW_MEMORY_POOL": "mimalloc",
                "PLATEAU_SERVER__READ_POOL_PURGE_DELAY_MS": "-1",
            },
            2.5,
            "mimalloc",
            -1,
        ),
        ({"PLATEAU_SERVER__ARROW_MEMORY_POOL": "system"}, 1.0, "system", 10_000),
        # an operator's own mimalloc setting wins over the node's
        ({"MIMALLOC_PURGE_DELAY": "50"}, 1.0, "jemalloc", 50),
    ],
)
def test_the_node_runs_with_the_configured_knobs(
    tmp_path: Path, env: dict[str, str], interval: float, pool: str, purge: int
) -> None:
    if pool == "jemalloc" and not has_jemalloc():
        pool = pa.default_memory_pool().backend_name  # the node keeps it, with a warning
    proc = NodeProcess(tmp_path / "data", env=env).start()
    try:
        assert in_force(proc) == (interval, pool, purge)
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
        ("read_pool_purge_delay_ms", "-2"),
        ("read_pool_purge_delay_ms", "soon"),
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


FREED_RSS = """
import os, sys
from plateau.server.tuning import choose_read_pool_purge_delay
choose_read_pool_purge_delay(int(sys.argv[1]))
import time
import numpy as np
import pyarrow as pa
from plateau.storage.data.direct_io import READ_POOL

def rss_mib():
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) // 1024

# eight decoded row groups' worth, written to (faulted in), then freed as a scan frees them
held = [pa.allocate_buffer(9 << 20, memory_pool=READ_POOL) for _ in range(8)]
for buf in held:
    np.frombuffer(buf, dtype=np.uint8)[:] = 1
used = rss_mib()
del held
time.sleep(0.5)
pa.allocate_buffer(1 << 20, memory_pool=READ_POOL)  # mimalloc purges as it allocates
print(used, rss_mib())
"""


@pytest.mark.parametrize(("delay_ms", "kept"), [(10_000, True), (0, False)])
def test_the_purge_delay_reaches_the_read_pool(delay_ms: int, kept: bool) -> None:
    """Memory a scan freed stays with the process for the delay (so the next row group
    reuses it instead of faulting fresh pages in), or goes back to the kernel at once:
    mimalloc itself, in a fresh interpreter that sets the knob as ``plateau node`` does."""
    env = {k: v for k, v in os.environ.items() if k != MIMALLOC_PURGE_ENV}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "node")
    out = subprocess.run(
        [sys.executable, "-c", FREED_RSS, str(delay_ms)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    used, after = map(int, out.split())
    if kept:
        assert after >= used - 8, (used, after)  # the 72 MiB freed are still resident
    else:
        assert after <= used - 48, (used, after)  # most of them given back


def test_the_purge_delay_cannot_be_chosen_once_pyarrow_is_loaded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(MIMALLOC_PURGE_ENV, raising=False)
    with pytest.raises(RuntimeError, match="before pyarrow loads"):
        choose_read_pool_purge_delay(10_000)
    assert MIMALLOC_PURGE_ENV not in os.environ
