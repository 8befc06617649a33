"""Parquet topics' write-ahead files reused by later segments: never a stale row, after kill -9 too.

The dangerous case is the one this test builds on purpose: every batch the same
size, so the previous occupant's messages line up with the new ones, and a kept
file that was not zeroed would hand its old batches to the recovery as valid.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pytest

from plateau.storage.recovery import read_open_file
from testkit.arrowhttp import append_retrying, read_all
from testkit.nodeproc import NodeProcess, metric_values
from testkit.operatorproc import wait_until

ROWS = 1000  # per batch; four batches fill a segment
SEGMENT_ROWS = 4 * ROWS


def batch(seq: int) -> pa.Table:
    """Every batch the same size on disk: ``noise`` does not compress, the rest the same."""
    return pa.table(
        {
            "seq": pa.array([seq] * ROWS, pa.int64()),
            "i": pa.array(range(ROWS), pa.int64()),
            "noise": pa.array(np.frombuffer(os.urandom(ROWS * 8), dtype=np.int64)),
        }
    )


def files(url: str, event: str) -> float:
    return metric_values(url, "plateau_write_ahead_files_total").get((("event", event),), 0.0)


def counted(url: str, event: str, at_least: int) -> Callable[[], bool]:
    """Whether ``files(url, event)`` has reached ``at_least`` (for ``wait_until``)."""
    return lambda: files(url, event) >= at_least


def start_node(tmp_path: Path, env: dict[str, str] | None = None) -> NodeProcess:
    """A node with the parquet topic ``wal`` of one partition, segments of ``SEGMENT_ROWS``."""
    node = NodeProcess(tmp_path / "data", env=env).start()
    with node.client() as c:
        c.put(
            "/admin/topics/wal",
            json={"partitions": 1, "segment": {"format": "parquet", "max_rows": SEGMENT_ROWS}},
        ).raise_for_status()
    return node


def append(c: httpx.Client, seq: int) -> None:
    r = append_retrying(c, "wal", "0", batch(seq))
    assert r.status_code == 200, r.text


def test_a_reused_file_never_gives_back_its_old_rows(tmp_path: Path) -> None:
    node = start_node(tmp_path)
    acked: list[int] = []
    with node.client() as c:
        seq = 0
        # six full segments; a segment rolls (and is sealed, its file kept) when the
        # next batch does not fit, so the r-th round sees r kept before it ends
        for round_ in range(6):
            for _ in range(4):
                append(c, seq)
                acked.append(seq)
                seq += 1
            wait_until(counted(node.url, "kept", round_), f"{round_} files kept")
        # one batch into the next segment: a kept file four batches long, now holding one
        append(c, seq)
        acked.append(seq)
    assert files(node.url, "reused") >= 1, "no segment reused a kept file"
    (open_file,) = (tmp_path / "data" / "topics" / "wal" / "0").glob("*.open")
    # a new file would hold one batch (its noise: ROWS * 8 bytes); a reused one is four long
    assert open_file.stat().st_size >= 3 * ROWS * 8, "the open segment is not in a reused file"
    node.kill()  # nothing in flight: every append was acknowledged before this
    # on the disk: the one new batch, then zeros to the end of the file. Without the
    # zeroing the old batches follow (the block padding after a batch hides them only
    # when the batch does not end on a block boundary)
    _schema, batches, valid_end = read_open_file(open_file)
    assert [b.column(0)[0].as_py() for b in batches] == [acked[-1]]
    assert open_file.read_bytes()[valid_end:].count(0) == open_file.stat().st_size - valid_end

    node.start()
    with node.client() as c:
        got = pa.concat_tables(read_all(c, "wal", "0"))
    assert got.column("seq").to_pylist() == [s for s in acked for _ in range(ROWS)]
    assert got.column("i").to_pylist() == list(range(ROWS)) * len(acked)
    # kept files are a cache: the restart deleted them
    assert list((tmp_path / "data" / "recycle").iterdir()) == []
    node.stop()


def test_a_stopped_node_holds_no_kept_files(tmp_path: Path) -> None:
    node = start_node(tmp_path)
    with node.client() as c:
        for seq in range(9):
            append(c, seq)
    wait_until(counted(node.url, "kept", 2), "two files kept")
    assert list((tmp_path / "data" / "recycle").iterdir())
    node.stop()
    assert list((tmp_path / "data" / "recycle").iterdir()) == []


def test_with_no_kept_files_the_write_ahead_file_is_deleted(tmp_path: Path) -> None:
    """``storage.recycled_write_ahead_files: 0``: each sealed segment's file is deleted."""
    node = start_node(tmp_path, env={"PLATEAU_STORAGE__RECYCLED_WRITE_AHEAD_FILES": "0"})
    with node.client() as c:
        for seq in range(9):
            append(c, seq)
        wait_until(counted(node.url, "deleted", 2), "two write-ahead files deleted")
        assert files(node.url, "kept") == 0 and files(node.url, "reused") == 0
        got = pa.concat_tables(read_all(c, "wal", "0"))
    assert got.column("seq").to_pylist() == [s for s in range(9) for _ in range(ROWS)]
    assert not (tmp_path / "data" / "recycle").exists()
    node.stop()


def test_a_bad_setting_is_refused_at_start(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data", env={"PLATEAU_STORAGE__RECYCLED_WRITE_AHEAD_FILES": "-1"})
    with pytest.raises(RuntimeError, match="recycled_write_ahead_files") as err:
        node.start(timeout=15)
    assert "exited with 2" in str(err.value)
