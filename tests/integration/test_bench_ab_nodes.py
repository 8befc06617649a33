"""bench/ab_nodes.py end to end: two real nodes, one from a checked-out commit, one JSON line.

Short phases (the figures are not the point here): what a user of the bench
relies on is that each side ran the tree and environment it names, that every
pair produced figures and ratios, and that the worktree it made is gone after.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_commit_against_the_working_tree_in_interleaved_pairs(tmp_path: Path) -> None:
    before = git("worktree", "list")
    head_root = tmp_path / "head"
    head_root.mkdir()
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "ab_nodes.py"),
            "--base", "HEAD",
            "--head-env", "PLATEAU_SERVER__GIL_SWITCH_INTERVAL_MS=2",
            "--pairs", "2",
            "--duration", "1",
            "--clients", "2",
            "--partitions", "2",
            "--rows-per-batch", "2000",
            "--data-root", str(tmp_path),
            "--head-data-root", str(head_root),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["base"]["commit"] == git("rev-parse", "HEAD")
    assert result["head"]["commit"] is None  # the working tree
    assert result["head"]["env"] == {"PLATEAU_SERVER__GIL_SWITCH_INTERVAL_MS": "2"}
    assert result["base"]["data_root"] == str(tmp_path)
    assert result["head"]["data_root"] == str(head_root)
    for side in ("base", "head"):
        runs = result[side]["runs"]
        assert [r["pair"] for r in runs] == [0, 1]
        assert all(r["rows_per_s"] > 0 and r["errors"] == 0 for r in runs), runs
    ratios = result["head_vs_base"]["ratios"]["rows_per_s"]
    assert len(ratios) == 2 and all(r is not None and r > 0 for r in ratios)
    # the second pair ran head first
    assert "pair 1 head" in out.stderr.split("pair 1 base")[0]
    assert git("worktree", "list") == before
    # data directories and the worktree removed
    assert list(tmp_path.iterdir()) == [head_root] and list(head_root.iterdir()) == []


def test_a_data_root_that_is_not_a_directory_exits_2(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "ab_nodes.py"),
            "--base", "HEAD",
            "--head-data-root", str(tmp_path / "missing"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert "--head-data-root" in out.stderr and "is not a directory" in out.stderr
    assert out.stdout == ""
