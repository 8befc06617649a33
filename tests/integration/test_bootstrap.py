"""``source tools/bootstrap.sh`` as the README's quick start has a user do it, in real bash.

It must leave the caller's shell as it was: a user's interactive terminal must not
inherit ``set -e`` (the first failing ``plateau`` command, exit 2, would close it),
and a script that sources it under ``set -euo pipefail`` (tools/run-tests) keeps
its own options and stops when bootstrapping fails. The clone's .venv exists,
so ``uv sync --frozen`` is quick.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")

# Everything `set -o` and `shopt` can report, plus $- (which holds i for interactive).
STATE = 'printf "%s\\n" "$-"; set +o; shopt -p'


def bash(
    script: str, *, interactive: bool, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    args = [str(BASH), "--norc", "--noprofile"] + (["-i"] if interactive else [])
    return subprocess.run(
        [*args, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        check=False,
    )


def split(stdout: str) -> tuple[str, str, str]:
    before, after, rest = stdout.split("=====\n")
    return before, after, rest


def test_interactive_shell_keeps_its_options_and_survives_a_failing_command() -> None:
    script = f"""
set +e +u; set -o noclobber; shopt -s extglob
{STATE}; echo =====
source tools/bootstrap.sh; echo "rc=$?"
{STATE}; echo =====
source tools/bootstrap.sh; echo "rc=$?"
false
echo "alive after a failing command"
ls /nonexistent-plateau-path 2>/dev/null | cat
echo "alive after a failing pipeline"
bash -c 'echo "UV=$UV"; echo "PATH=$PATH"'
echo "leftovers=$(type -t _plateau_bootstrap)${{root-}}${{uv_home-}}${{uv_version-}}"
"""
    proc = bash(script, interactive=True)
    before, after, rest = split(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    assert "i" in before.splitlines()[0]  # really an interactive shell
    assert after.startswith("rc=0\n"), after
    assert after.removeprefix("rc=0\n") == before  # every set -o and shopt option as it was
    lines = rest.splitlines()
    assert lines[:3] == ["rc=0", "alive after a failing command", "alive after a failing pipeline"]
    exported = dict(line.split("=", 1) for line in lines[3:5])
    uv = Path(exported["UV"])
    assert uv.name == "uv" and os.access(uv, os.X_OK)  # exported to child processes
    path = exported["PATH"].split(":")
    venv_bin = str(ROOT / ".venv" / "bin")
    assert path[0] == venv_bin and path.count(venv_bin) == 1  # sourcing twice adds it once
    assert lines[5] == "leftovers="  # no helper function nor variable left behind


@pytest.fixture
def broken_clone(tmp_path: Path) -> Path:
    """A copy of the script in a tree with no project: ``uv sync`` fails there."""
    (tmp_path / "tools").mkdir()
    shutil.copy(ROOT / "tools" / "bootstrap.sh", tmp_path / "tools" / "bootstrap.sh")
    return tmp_path / "tools" / "bootstrap.sh"


def test_a_failure_returns_non_zero_says_why_and_keeps_the_shell(broken_clone: Path) -> None:
    script = f"""
set +e +u
{STATE}; echo =====
source {broken_clone}; echo "rc=$?"
{STATE}; echo =====
echo "still here"
"""
    proc = bash(script, interactive=True)
    before, after, rest = split(proc.stdout)
    assert proc.returncode == 0
    assert after.startswith("rc=1\n"), after
    assert after.removeprefix("rc=1\n") == before
    assert rest == "still here\n"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("bootstrap:")]
    assert len(errors) == 1 and "failed: uv sync" in errors[0], proc.stderr


def test_a_strict_script_keeps_its_options_and_stops_on_failure(broken_clone: Path) -> None:
    """What tools/run-tests does: ``set -euo pipefail`` stays on, and a failure stops it."""
    ok = bash(
        f"set -euo pipefail; {STATE}; echo =====; source tools/bootstrap.sh; {STATE}; "
        "echo =====; command -v ruff",
        interactive=False,
    )
    before, after, rest = split(ok.stdout)
    assert ok.returncode == 0, ok.stderr
    assert after == before
    assert {"set -o errexit", "set -o nounset", "set -o pipefail"} <= set(after.splitlines())
    assert rest.strip() == str(ROOT / ".venv" / "bin" / "ruff")
    stopped = bash(f"set -euo pipefail; source {broken_clone}; echo not reached", interactive=False)
    assert stopped.returncode == 1 and "not reached" not in stopped.stdout
    assert "bootstrap: failed: uv sync" in stopped.stderr
