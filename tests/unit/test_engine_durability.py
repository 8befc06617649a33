"""Recovery, retention and the snapshot: what survives and what is removed."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from plateau.protocol.snapshot import SNAPSHOT_FILE, decode
from plateau.protocol.topic_config import RetentionConfig, TopicConfigRequest
from plateau.protocol.values import Span
from plateau.storage.catalog.manifest import SegmentRow
from plateau.storage.config import StorageSettings
from plateau.storage.engine import Engine
from plateau.storage.recovery import read_open_file, seal_in_place
from plateau.storage.retention import plan
from plateau.storage.types import Index, SegmentId
from tests.conftest import EngineFactory
from tests.unit.conftest import append_retrying, wait_for


def rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"x": pa.array(range(lo, hi), pa.int64())})


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_reopen_continues_indexes(make_engine: EngineFactory, fmt: str) -> None:
    e = make_engine()
    e.put_topic("t", TopicConfigRequest.model_validate({"segment": {"format": fmt}}))
    e.append("t", "0", rows(0, 10))
    e.close()
    e2 = make_engine()
    assert e2.append("t", "0", rows(10, 12)) == Span(10, 12)
    assert e2.read_partition("t", "0", 0, 100).table.column("x").to_pylist() == list(range(12))


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_torn_tail_is_cut_and_acknowledged_rows_survive(tmp_path: Path, fmt: str) -> None:
    """Simulates a crash mid-write: the file loses its last bytes (as after kill -9 of a write)."""
    settings = StorageSettings(data_dir=tmp_path / "data")
    e = Engine(settings)
    e.put_topic("t", TopicConfigRequest.model_validate({"segment": {"format": fmt}}))
    e.append("t", "0", rows(0, 100))
    e.append("t", "0", rows(100, 200))
    open_files = list((tmp_path / "data/topics/t/0").glob("*.open"))
    assert len(open_files) == 1
    # abandon the engine without close (no footer, no seal), then tear the last batch
    e._closed.set()  # stop its timer from sealing
    e._lock_file.close()  # as the kernel does when the process dies
    data = open_files[0].read_bytes()
    _, batches, end = read_open_file(open_files[0])
    assert len(batches) == 2 and len(data) - 4096 < end <= len(data)  # O_DIRECT pads a block
    open_files[0].write_bytes(data[: end - 40])
    e2 = Engine(settings)
    try:
        got = e2.read_partition("t", "0", 0, 1000).table.column("x").to_pylist()
        assert got == list(range(100))
        assert e2.append("t", "0", rows(0, 1)).start == 100
        assert not list((tmp_path / "data/topics/t/0").glob("*.open.tmp"))
    finally:
        e2.close()


def test_parquet_segment_sealed_in_place_before_a_failed_start_is_kept(tmp_path: Path) -> None:
    """A start on a full volume seals a parquet write-ahead file in place as ``.arrow``
    (``seal_in_place``), then may fail committing the manifest row (SQLite out of space)
    and retry with the ballast released. The retry must adopt the ``.arrow`` file: it once
    found no ``.parquet`` and no ``.open``, dropped the row and deleted the acknowledged
    rows as an orphan. The failed commit cannot be produced on demand, so the state it
    leaves is made with the real ``seal_in_place`` on a crashed engine's open segment."""
    settings = StorageSettings(data_dir=tmp_path / "data")
    e = Engine(settings)
    e.put_topic("t", TopicConfigRequest.model_validate({"segment": {"format": "parquet"}}))
    e.append("t", "0", rows(0, 100))
    e._closed.set()  # crash: no seal, no close
    e._lock_file.close()
    (open_path,) = (tmp_path / "data/topics/t/0").glob("*.open")
    (row,) = e._manifest.open_segments()
    _, _, valid_end = read_open_file(open_path)
    seal_in_place(open_path, valid_end, row)  # ... and the row's commit never happened
    e2 = Engine(settings)
    try:
        got = e2.read_partition("t", "0", 0, 1000).table.column("x").to_pylist()
        assert got == list(range(100))
        assert e2.append("t", "0", rows(0, 1)).start == 100
    finally:
        e2.close()


def test_orphan_and_temporary_files_are_removed(make_engine: EngineFactory) -> None:
    e = make_engine()
    e.append("t", "0", rows(0, 5))
    e.close()
    pdir = e.data_dir / "topics/t/0"
    (pdir / "00000000000000000999-999.parquet.tmp").write_bytes(b"junk")
    (pdir / "00000000000000000500-500.parquet").write_bytes(b"junk")
    e2 = make_engine()
    names = sorted(p.name for p in pdir.iterdir())
    assert all(not n.endswith(".tmp") and not n.startswith("00000000000000000500") for n in names)
    assert e2.read_partition("t", "0", 0, 10).table.num_rows == 5


def test_retention_plan_oldest_first() -> None:
    def seg(i: int, size: int, max_time: int) -> SegmentRow:
        return SegmentRow(
            SegmentId(i),
            "t",
            "0",
            "arrow",
            Index(i * 10),
            Index(i * 10 + 10),
            size,
            0,
            max_time,
            f"p{i}",
            0.0,
        )

    segs = [seg(3, 100, 3000), seg(1, 100, 1000), seg(2, 100, 2000)]
    assert [d.row.id for d in plan(segs, RetentionConfig(max_bytes=150), 0)] == [1, 2]
    aged = plan(segs, RetentionConfig(max_bytes=1000, max_age_seconds=1), 2500)
    assert [(d.row.id, d.reason) for d in aged] == [(1, "age")]


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_retention_keeps_budget_and_never_reuses_indexes(
    make_engine: EngineFactory, fmt: str
) -> None:
    e = make_engine()
    e.put_topic(
        "t",
        TopicConfigRequest.model_validate(
            {"segment": {"format": fmt, "max_rows": 1000}, "retention": {"max_bytes": 30_000}}
        ),
    )
    payload = pa.table({"v": pa.array([os.urandom(20) for _ in range(1000)], pa.binary())})
    for _ in range(12):
        append_retrying(e, "t", "0", payload)
    part = e._topic("t").partitions["0"]

    def snapshot_paths() -> list[str]:
        snap = decode((e.data_dir / SNAPSHOT_FILE).read_bytes())
        return [s.path for s in snap.topics["t"].partitions["0"].segments]

    # retention runs right after each seal: the budget holds once the last seal is done,
    # and the snapshot follows once that pass has published (then it unlinks the files)
    wait_for(
        lambda: (
            not part.sealing
            and sum(r.bytes for r in part.view().sealed) <= 30_000
            and snapshot_paths() == [r.path for r in part.view().sealed]
        )
    )
    assert len(part.view().sealed) >= 1
    usage = e.topic_usage("t").partitions["0"]
    assert usage.span.end == 12_000 and usage.span.start > 0
    assert all((e.data_dir / path).exists() for path in snapshot_paths())
    # lowering the budget to zero deletes every sealed segment at once...
    e.put_topic("t", TopicConfigRequest.model_validate({"retention": {"max_bytes": 0}}))
    e.close()
    e2 = make_engine()
    # ...and indexes still continue after a restart
    assert e2.append("t", "0", payload.slice(0, 1)).start == 12_000


def test_relaxed_durability_acknowledges_and_flushes(make_engine: EngineFactory) -> None:
    e = make_engine(durability={"mode": "relaxed", "relaxed_interval_ms": 20})
    assert e.append("t", "0", rows(0, 3)) == Span(0, 3)
    seg = e._topic("t").partitions["0"].open
    assert seg is not None
    wait_for(lambda: seg.commit.synced == 3)


def test_segments_seal_by_age_and_age_retention_deletes(make_engine: EngineFactory) -> None:
    e = make_engine(retention_interval_seconds=0.2)
    e.put_topic(
        "t",
        TopicConfigRequest.model_validate(
            {"segment": {"max_age_seconds": 0.2}, "retention": {"max_age_seconds": 3600}}
        ),
    )
    old_ms = 1_000  # records from 1970: older than any max age
    e.append("t", "0", pa.table({"time": pa.array([old_ms, old_ms + 1], pa.int64())}))
    part = e._topic("t").partitions["0"]
    # the timer seals the idle open segment; then age retention removes it
    wait_for(lambda: part.open is None and not part.sealing, timeout=10)
    wait_for(lambda: not part.view().sealed, timeout=10)
    assert e.topic_usage("t").partitions["0"].span == Span(2, 2)
    assert e.append("t", "0", rows(0, 1)).start == 2
