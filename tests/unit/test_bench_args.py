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
import common
import direct_reads
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


def test_cold_reads_needs_a_writable_drop_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--cold-reads`` drops the page cache before each read: without the right to (not
    root), it is a usage error before any server starts, not a failure halfway through."""
    assert ingest_vs_rs.parse_args(RS).cold_reads is False
    missing = tmp_path / "absent" / "drop_caches"
    monkeypatch.setattr(ingest_vs_rs, "DROP_CACHES", missing)
    with pytest.raises(SystemExit) as exit_:
        ingest_vs_rs.parse_args([*RS, "--cold-reads"])
    assert exit_.value.code == 2
    assert f"--cold-reads: {missing} is not writable" in capsys.readouterr().err
    writable = tmp_path / "drop_caches"
    writable.write_text("")
    monkeypatch.setattr(ingest_vs_rs, "DROP_CACHES", writable)
    assert ingest_vs_rs.parse_args([*RS, "--cold-reads"]).cold_reads is True


def test_drop_page_cache_asks_the_kernel_to_drop_every_clean_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The value written is 3 (page cache, dentries and inodes), after a sync: dirty pages
    are not dropped, so without the sync a read could still come from memory."""
    target = tmp_path / "drop_caches"
    monkeypatch.setattr(common, "DROP_CACHES", target)
    common.drop_page_cache()
    assert target.read_text() == "3\n"


@pytest.mark.parametrize(
    "bad", [["--threads", "x"], ["--threads", ""], ["--read-mib", "0"], ["--files", "0"]]
)
def test_direct_reads_bad_arguments_exit_2(
    bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        direct_reads.parse_args(bad)
    assert exit_.value.code == 2
    assert "--threads" in capsys.readouterr().err


def test_direct_reads_reads_every_byte_of_every_file(tmp_path: Path) -> None:
    """The rate is over bytes actually read back: every file whole, at any thread count
    and read size (the last read of a file may be short)."""
    paths = direct_reads.write_files(tmp_path, 2, 3 * 1024 * 1024)
    assert [p.stat().st_size for p in paths] == [3 * 1024 * 1024] * 2
    for threads, size in ((1, 1024 * 1024), (3, 2 * 1024 * 1024)):
        got, seconds = direct_reads.read_all(paths, threads, size)
        assert got == 2 * 3 * 1024 * 1024
        assert seconds > 0
