"""bench/workloads.py: the two workloads of ingest_vs_rs.py are what their names claim.

Issue 28's figures rest on them: a node that skips compression where it does not
pay must face data lz4 cannot shrink, and the "40% less disk" target needs data
that the node's arrow codec (lz4 on Arrow IPC buffers) can shrink that far. Both
must also stay storable by plateau's Rust server, or the comparison cannot run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import workloads
from plateau.protocol.topic_config import SegmentConfig

ROWS = 10_000
START_MS = 1_780_000_000_000


@pytest.fixture(scope="module")
def bodies() -> dict[str, list[bytes]]:
    return {w: workloads.make_workload_bodies(w, 3, ROWS, START_MS) for w in workloads.WORKLOADS}


def test_the_node_compresses_arrow_topics_with_lz4_by_default() -> None:
    # the codec the ratios below are measured with
    assert SegmentConfig(format="arrow").codec() == "lz4"


def test_incompressible_bodies_do_not_shrink_under_lz4(bodies: dict[str, list[bytes]]) -> None:
    ratios = workloads.codec_ratios(bodies["incompressible"])
    assert ratios["lz4"] >= 0.95, ratios
    assert 130 <= len(bodies["incompressible"][0]) / ROWS <= 150


def test_compressible_bodies_shrink_by_40_percent_under_lz4(
    bodies: dict[str, list[bytes]],
) -> None:
    ratios = workloads.codec_ratios(bodies["compressible"])
    assert ratios["lz4"] <= 0.6, ratios
    assert 100 <= len(bodies["compressible"][0]) / ROWS <= 140


@pytest.mark.parametrize("workload", workloads.WORKLOADS)
def test_rows_fit_plateau_rs(workload: str, bodies: dict[str, list[bytes]]) -> None:
    """An int64 ``time`` first; no binary or fixed-size list (its arrow2 writer lacks them)."""
    tables = [pa.ipc.open_file(pa.py_buffer(b)).read_all() for b in bodies[workload]]
    schema = tables[0].schema
    assert schema.field(0).name == "time"
    assert schema.field(0).type == pa.int64()
    for f in schema:
        assert not pa.types.is_binary(f.type) and not pa.types.is_fixed_size_binary(f.type)
        assert not pa.types.is_fixed_size_list(f.type)
    assert all(t.num_rows == ROWS for t in tables)
    # distinct bodies: a partition does not get the same batch back to back
    assert len(set(bodies[workload])) == len(bodies[workload])
    # time grows from one body to the next, as a stream of events does
    assert tables[0]["time"][-1].as_py() < tables[1]["time"][0].as_py()


def test_unknown_workload_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown workload"):
        workloads.workload_table("images", 10, 0, START_MS)
