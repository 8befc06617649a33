"""``server.gil_switch_interval_ms``: the node's interpreter runs with the slice it is given.

A real node process: its startup line reports the interval the interpreter
has after ``run_node`` set it (read back with ``sys.getswitchinterval``), so
an operator can see in the pod's log what is in force. Bad values stop the
node before it opens anything, exit 2, naming the setting.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit.nodeproc import NodeProcess

SERVING = re.compile(r"plateau node serving .* \(GIL switch interval ([0-9.]+) ms[,)]")


def interval_in_log(proc: NodeProcess) -> float:
    found = SERVING.findall(proc.log_path.read_text(errors="replace"))
    assert found, proc.log()
    return float(found[-1])


@pytest.mark.parametrize(("value", "expected"), [(None, 1.0), ("2.5", 2.5)])
def test_the_node_runs_with_the_configured_interval(
    tmp_path: Path, value: str | None, expected: float
) -> None:
    env = {} if value is None else {"PLATEAU_SERVER__GIL_SWITCH_INTERVAL_MS": value}
    proc = NodeProcess(tmp_path / "data", env=env).start()
    try:
        assert interval_in_log(proc) == expected
    finally:
        proc.stop()


@pytest.mark.parametrize("value", ["0", "-1", "101", "fast"])
def test_a_bad_interval_stops_the_node_with_exit_2(tmp_path: Path, value: str) -> None:
    proc = NodeProcess(tmp_path / "data", env={"PLATEAU_SERVER__GIL_SWITCH_INTERVAL_MS": value})
    with pytest.raises(RuntimeError, match="gil_switch_interval_ms"):
        proc.start(timeout=10)
    assert proc.proc is not None and proc.proc.returncode == 2
    assert not (tmp_path / "data").exists()  # refused before the engine opened the directory
