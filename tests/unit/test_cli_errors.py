"""CLI failures that need no node: one ``error:`` line on stderr, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from plateau.cli import app

UNUSED_URL = "http://127.0.0.1:9"  # never contacted: every case fails before a request


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["topic", "set", "t", "--max-bytes", "10X"], "--max-bytes: '10X'"),
        (["topic", "set", "t", "--segment-max-bytes", "1KB"], "--segment-max-bytes"),
        (["topic", "set", "t", "--max-age", "a week"], "--max-age: 'a week'"),
        (["topic", "set", "t", "--max-age", "1500ms"], "whole number of seconds"),
        (["topic", "set", "t", "--segment-max-age", "5 min"], "--segment-max-age"),
        (["topic", "set", "t", "--format", "orc"], "parquet or arrow"),
        (["topic", "set", "t", "--no-archive", "--archive-required"], "give --archive"),
        (["topic", "set", "t", "--no-archive", "--no-archive-required"], "give --archive"),
        (["read", "t", "0", "--format", "xml"], "table, jsonl or arrow"),
        (["read", "t", "0", "--format", "arrow"], "--output"),
        (["append", "t", "0", "missing.parquet"], "no such file"),
        (["append", "t", "0", "data.xml"], "--format"),
        (["node", "--durability", "sometimes"], "bad settings"),
    ],
)
def test_one_line_exit_2(args: list[str], fragment: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, args, env={"PLATEAU_URL": UNUSED_URL})
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0]


def test_corrupt_file_is_refused_before_sending(tmp_path: Path) -> None:
    bad = tmp_path / "rows.arrow"
    bad.write_bytes(b"ARROW1 and then nothing")
    result = CliRunner().invoke(
        app, ["append", "t", "0", str(bad)], env={"PLATEAU_URL": UNUSED_URL}
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and "rows.arrow" in result.stderr
    assert "cannot reach" not in result.stderr
