"""The cluster e2e (tests/e2e) runs only when asked, in a real pytest run.

Starting the local cluster installs Debian packages, builds Kubernetes and changes
iptables: a newcomer running ``pytest`` or ``tools/run-tests`` as root must not get
that by surprise, and CI must keep running it. The gate deselects at collection, so
these runs reach no fixture (``--collect-only`` never runs one): no cluster starts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOW = "include them with tools/run-tests --e2e"


def pytest_e2e(env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "PLATEAU_E2E", "KUBECONFIG")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra, "tests/e2e"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**base, **env},
        timeout=120,
        check=False,
    )


def collected(out: str) -> tuple[int, int]:
    """(collected, deselected) from pytest's last line."""
    last = out.strip().splitlines()[-1]
    got = re.search(r"(\d+) tests? collected", last)
    gone = re.search(r"(\d+) deselected", last)
    return int(got.group(1)) if got else 0, int(gone.group(1)) if gone else 0


def test_not_asked_deselects_the_suite_and_says_how_in_one_line() -> None:
    proc = pytest_e2e({}, "--collect-only")
    got, gone = collected(proc.stdout)
    assert got == 0 and gone > 0, proc.stdout
    lines = [line for line in proc.stdout.splitlines() if HOW in line]
    assert len(lines) == 1 and lines[0].startswith(f"e2e: {gone} cluster tests deselected")
    assert "needs root" in lines[0] and "PLATEAU_E2E=1" in lines[0]


def test_a_plain_run_runs_none_of_it() -> None:
    proc = pytest_e2e({})
    assert proc.returncode == 5, proc.stdout  # pytest's "no tests ran"
    assert HOW in proc.stdout and re.search(r"^\d+ deselected in ", proc.stdout, re.M)
    assert not re.search(r"passed|failed|skipped|error", proc.stdout)


@pytest.mark.parametrize(
    "env",
    [
        {"PLATEAU_E2E": "1"},  # tools/run-tests --e2e
        {"CI": "true"},
        {"CI": "true", "PLATEAU_E2E": "0"},  # CI never skips
        {"KUBECONFIG": "/nonexistent/kubeconfig"},  # a cluster of the user's
    ],
)
def test_asked_collects_every_e2e_test(env: dict[str, str]) -> None:
    proc = pytest_e2e(env, "--collect-only")
    got, gone = collected(proc.stdout)
    assert got > 0 and gone == 0, proc.stdout
    assert HOW not in proc.stdout


def test_run_tests_without_e2e_is_quiet_here() -> None:
    """tools/run-tests already printed its line (PLATEAU_E2E=0): pytest adds only the count."""
    proc = pytest_e2e({"PLATEAU_E2E": "0", "KUBECONFIG": "/x"}, "--collect-only")
    got, gone = collected(proc.stdout)
    assert got == 0 and gone > 0, proc.stdout
    assert HOW not in proc.stdout
