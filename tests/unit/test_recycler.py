"""``Recycler``: kept write-ahead files are zeroed, bounded, handed out once, on real files."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from plateau.protocol.errors import Unavailable
from plateau.protocol.topic_config import TopicConfigRequest
from plateau.storage.data.recycle import RECYCLE_DIR, Recycler
from testkit.stress import run_stress
from tests.conftest import EngineFactory


def written(path: Path, size: int = 3 * 4096 + 123) -> Path:
    path.write_bytes(os.urandom(size))
    return path


def test_a_kept_file_reads_as_zeros_at_its_size_and_is_taken_once(tmp_path: Path) -> None:
    r = Recycler(tmp_path, limit=2)
    r.reset()
    wal = written(tmp_path / "a.open")
    assert r.give(wal)
    assert not wal.exists()
    (kept,) = (tmp_path / RECYCLE_DIR).iterdir()
    assert kept.read_bytes() == bytes(3 * 4096 + 123)  # same size, every byte zero
    target = tmp_path / "b.open"
    assert r.take(target)
    assert target.read_bytes() == bytes(3 * 4096 + 123)
    assert list((tmp_path / RECYCLE_DIR).iterdir()) == []
    assert not r.take(tmp_path / "c.open")  # nothing left to take
    assert (r.kept, r.reused) == (1, 1)


def test_no_more_than_the_limit_is_kept(tmp_path: Path) -> None:
    r = Recycler(tmp_path, limit=2)
    r.reset()
    results = [r.give(written(tmp_path / f"{i}.open")) for i in range(4)]
    assert results == [True, True, False, False]
    assert (tmp_path / "2.open").exists()  # not kept: the caller deletes it
    assert len(list((tmp_path / RECYCLE_DIR).iterdir())) == 2


def test_limit_zero_keeps_nothing(tmp_path: Path) -> None:
    r = Recycler(tmp_path, limit=0)
    r.reset()
    assert not r.give(written(tmp_path / "a.open"))
    assert not (tmp_path / RECYCLE_DIR).exists()


def test_reset_deletes_what_an_earlier_run_kept(tmp_path: Path) -> None:
    r = Recycler(tmp_path, limit=2)
    r.reset()
    assert r.give(written(tmp_path / "a.open"))
    again = Recycler(tmp_path, limit=2)
    again.reset()
    assert list((tmp_path / RECYCLE_DIR).iterdir()) == []
    assert not again.take(tmp_path / "b.open")


def test_a_missing_file_is_not_kept(tmp_path: Path) -> None:
    r = Recycler(tmp_path, limit=2)
    r.reset()
    assert not r.give(tmp_path / "gone.open")
    assert r.free_files() == 0
    assert r.give(written(tmp_path / "a.open"))  # its reserved place was given back


@pytest.fixture
def recycler_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """``caplog`` with the recycler's INFO lines, even after an earlier test's node ran
    ``dictConfig`` (``disable_existing_loggers``), which disables the recycler's logger and
    would leave a check of its lines unable to fail."""
    logger = logging.getLogger("plateau.storage.data.recycle")
    disabled, logger.disabled = logger.disabled, False
    try:
        with caplog.at_level(logging.INFO, logger=logger.name):
            yield caplog
    finally:
        logger.disabled = disabled


def test_a_filesystem_that_cannot_zero_is_asked_once(
    recycler_log: pytest.LogCaptureFixture,
) -> None:
    root = Path(tempfile.mkdtemp(dir="/dev/shm"))  # tmpfs: no FALLOC_FL_ZERO_RANGE
    try:
        r = Recycler(root, limit=2)
        r.reset()
        first, second = written(root / "a.open"), written(root / "b.open")
        before = second.read_bytes()
        assert not r.give(first) and not r.zeroes
        assert not r.give(second)
        assert first.exists() and second.read_bytes() == before  # the caller deletes them
        assert len([m for m in recycler_log.messages if "cannot zero a range" in m]) == 1
        assert r.free_files() == 0 and r.kept == 0
    finally:
        shutil.rmtree(root)


@pytest.mark.timeout(60)
def test_threads_giving_and_taking_at_once_never_stall_or_share_a_file(
    tmp_path: Path, recycler_log: pytest.LogCaptureFixture
) -> None:
    """Four threads give and take for 2 s (the lock is a leaf): ``run_stress`` fails on a
    call that takes over 5 s, no file is handed to two takers (a second rename of one kept
    file would fail and be logged), and every taken file reads as zeros."""
    r = Recycler(tmp_path, limit=3)
    r.reset()
    taken: list[Path] = []

    def worker(n: int) -> Callable[[], None]:
        calls = itertools.count()

        def step() -> None:
            i = next(calls)
            wal = written(tmp_path / f"w{n}-{i}.open", 4096)
            if not r.give(wal):
                wal.unlink()
            target = tmp_path / f"t{n}-{i}.open"
            if r.take(target):
                assert target.read_bytes() == bytes(4096)
                taken.append(target)
                target.unlink()

        return step

    run_stress({f"recycler-{n}": worker(n) for n in range(4)}, seconds=2.0, stall=5.0)
    assert taken, "no file was ever taken"
    assert not [rec for rec in recycler_log.records if "could not" in rec.getMessage()]
    assert r.kept - r.reused == r.free_files() <= 3
    assert len(list((tmp_path / RECYCLE_DIR).iterdir())) == r.free_files()


def test_release_deletes_every_kept_file(tmp_path: Path) -> None:
    r = Recycler(tmp_path, limit=3)
    r.reset()
    for i in range(2):
        assert r.give(written(tmp_path / f"{i}.open"))
    assert r.release() == 2
    assert list((tmp_path / RECYCLE_DIR).iterdir()) == []
    assert not r.take(tmp_path / "b.open")
    assert r.release() == 0


def test_an_engine_below_its_free_space_floor_lets_its_kept_files_go_first(
    make_engine: EngineFactory,
) -> None:
    """Room before speed: the floor check deletes the kept files, then judges again (this
    volume has far more free space than a kept file, so the append is refused anyway)."""
    e = make_engine()
    e.put_topic("t", TopicConfigRequest.model_validate({"segment": {"format": "parquet"}}))
    assert e.recycler.give(written(e.data_dir / "a.open"))
    e.settings.min_free_bytes = shutil.disk_usage(e.data_dir).free + 2**40
    table = pa.table({"time": pa.array([1], pa.timestamp("ms")), "x": [1]})
    with pytest.raises(Unavailable, match="disk nearly full"):
        e.append("t", "0", table)
    assert list((e.data_dir / RECYCLE_DIR).iterdir()) == []
    assert e.recycler.free_files() == 0
