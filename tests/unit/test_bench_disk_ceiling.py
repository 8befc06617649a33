"""bench/disk_ceiling.py: the disk's fsync-per-append ceiling that ingest_vs_rs.py reports.

The runs are real: O_DIRECT writes and fdatasync on the test's own directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import disk_ceiling
import ingest_vs_rs

RS = ["--against-plateau-rs", sys.executable]


def test_each_gap_is_measured_and_converted_to_rows(tmp_path: Path) -> None:
    runs = disk_ceiling.measure(2, 0.3, 64 * 1024, 128.0, (0.0, 5.0), tmp_path)
    assert [r["gap_ms"] for r in runs] == [0.0, 5.0]
    for r in runs:
        assert r["mb_per_s"] > 0
        assert r["rows_per_s"] == round(r["mb_per_s"] * 1e6 / 128.0)
        assert 0 < r["p50_ms"] <= r["p99_ms"]
    # a writer that spends 5 ms between appends cannot append as often as one that does not
    assert runs[1]["mb_per_s"] < runs[0]["mb_per_s"]
    assert list(tmp_path.iterdir()) == []  # its files are gone


def test_ceilings_are_summarized_per_gap_over_pairs() -> None:
    def run(gap: float, rows: int, ratio: float) -> dict[str, float]:
        return {"gap_ms": gap, "rows_per_s": rows, "vs_plateau": ratio}

    pairs = [[run(0.0, 10, 2.0), run(1.0, 6, 1.2)], [run(0.0, 14, 1.6), run(1.0, 8, 1.0)]]
    out = ingest_vs_rs.summarize_ceilings(pairs)["by_gap_ms"]
    assert out["0"]["rows_per_s_median"] == 12
    assert out["0"]["vs_plateau_median"] == 1.8
    assert out["1"]["rows_per_s_median"] == 7
    assert out["1"]["vs_plateau_median"] == 1.1


def test_gaps_parse_and_bad_ones_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert ingest_vs_rs.parse_args(RS).ceiling_gaps == disk_ceiling.DEFAULT_GAPS_MS
    assert ingest_vs_rs.parse_args([*RS, "--ceiling-gaps-ms", "0, 3"]).ceiling_gaps == (0.0, 3.0)
    for bad in (
        ["--ceiling-gaps-ms", "1,-2"],
        ["--ceiling-gaps-ms", "x"],
        ["--ceiling-seconds", "-1"],
    ):
        with pytest.raises(SystemExit) as exit_:
            ingest_vs_rs.parse_args([*RS, *bad])
        assert exit_.value.code == 2
        assert "--ceiling" in capsys.readouterr().err
