"""bench/ab_nodes.py's pieces: its arguments, the pair order, the ratios, the worktrees.

The whole bench against real nodes runs in tests/integration/test_bench_ab_nodes.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import ab_nodes

ROOT = Path(__file__).resolve().parents[2]


def head_commit() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True)
    return out.stdout.decode().strip()


def test_sides_resolve_commits_and_the_working_tree() -> None:
    args = ab_nodes.parse_args(["--base", "HEAD", "--head-env", "A=1"])
    base, head = args.sides
    assert (base.rev, base.commit, base.env) == ("HEAD", head_commit(), {})
    assert (head.rev, head.commit, head.env) == (".", "", {"A": "1"})


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--base", "no-such-rev-x"], "'no-such-rev-x' is not a commit"),
        (["--base", ".", "--head", "0" * 40], "is not a commit"),
        (["--base", ".", "--base-env", "NOEQUALS"], "expected KEY=VALUE"),
        (["--base", ".", "--pairs", "0"], "--pairs must be at least 1"),
        (["--base", ".", "--duration", "0"], "--duration must be positive"),
        (["--base", ".", "--workload", "tensors"], "invalid choice"),
        ([], "--base"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        ab_nodes.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_pairs_alternate_which_side_runs_first() -> None:
    sides = ab_nodes.parse_args(["--base", "."]).sides
    firsts = [ab_nodes.order(pair, sides)[0].name for pair in range(4)]
    assert firsts == ["base", "head", "base", "head"]


def test_ratios_are_head_over_base_pair_by_pair() -> None:
    def run(rows: float, p99: float) -> dict[str, float]:
        return {"rows_per_s": rows, "p50_ms": 1.0, "p99_ms": p99, "cpu_us_per_row": 0.5}

    base = [run(100, 10), run(200, 0), run(100, 30)]
    head = [run(150, 5), run(300, 8), run(50, 30)]
    got = ab_nodes.compare(base, head)
    assert got["ratios"]["rows_per_s"] == [1.5, 1.5, 0.5]
    assert got["ratios"]["p99_ms"] == [0.5, None, 1.0]  # a 0 on either side: no ratio
    assert got["median"] == {
        "rows_per_s": 1.5,
        "p50_ms": 1.0,
        "p99_ms": 0.75,
        "cpu_us_per_row": 1.0,
    }


def test_a_commit_is_checked_out_for_the_run_and_removed_after(tmp_path: Path) -> None:
    sides = ab_nodes.parse_args(["--base", "HEAD"]).sides
    with ab_nodes.checked_out(sides, tmp_path):
        tree = sides[0].root
        assert tree.parent == tmp_path
        assert (tree / "node" / "plateau" / "__init__.py").is_file()
        assert sides[1].root == ROOT  # the working tree runs in place
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True
        ).stdout
        assert str(tree) in listed
    assert not tree.exists()
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True
    ).stdout
    assert str(tree) not in listed
