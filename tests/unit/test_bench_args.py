"""The benchmarks' ``--node-env``: every node-starting bench takes it the same way, and a
value that is not KEY=VALUE is a usage error (exit 2) before anything starts."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import archive
import ingest
import ingest_vs_rs

RS = ["--against-plateau-rs", sys.executable]  # any existing file passes that check


@pytest.mark.parametrize(
    "parse", [ingest.parse_args, archive.parse_args, lambda a: ingest_vs_rs.parse_args(RS + a)]
)
def test_node_env_is_a_mapping_and_bad_values_exit_2(
    parse: Callable[[list[str]], argparse.Namespace], capsys: pytest.CaptureFixture[str]
) -> None:
    args = parse(["--node-env", "A=1", "--node-env", "B=x=y", "--node-env", "C="])
    assert args.node_env == {"A": "1", "B": "x=y", "C": ""}
    assert parse([]).node_env == {}
    for bad in ("NOEQUALS", "=value"):
        with pytest.raises(SystemExit) as exit_:
            parse(["--node-env", bad])
        assert exit_.value.code == 2
        assert f"--node-env: expected KEY=VALUE, got {bad!r}" in capsys.readouterr().err
