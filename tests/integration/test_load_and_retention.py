"""Load shedding, retention and readers racing writers, over HTTP against a real node."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from plateau.protocol import RETRY_AFTER_HEADER
from testkit.arrowhttp import append, iterate, read_all
from testkit.nodeproc import NodeProcess


def payload(rows: int, width: int = 100) -> pa.Table:
    return pa.table({"v": pa.array([os.urandom(width) for _ in range(rows)], pa.binary())})


@pytest.mark.slow
def test_load_shedding_is_observable_and_lossless(tmp_path: Path) -> None:
    """Parquet seals are slow next to tiny segments: the node must refuse whole appends (429)."""
    node = NodeProcess(tmp_path / "data").start()
    with node.client() as c:
        c.put(
            "/admin/topics/hot",
            json={"segment": {"format": "parquet", "max_rows": 2000, "compression": "zstd"}},
        ).raise_for_status()
    body_rows = 2000
    acked: list[tuple[int, int, int]] = []
    rejected = [0]
    lock = threading.Lock()

    def hammer(worker: int) -> None:
        with httpx.Client(base_url=node.url, timeout=30) as cl:
            for seq in range(40):
                tag = worker * 1000 + seq
                t = payload(body_rows).append_column("tag", pa.array([tag] * body_rows))
                r = append(cl, "hot", "0", t)
                with lock:
                    if r.status_code == 429:
                        rejected[0] += 1
                        assert int(r.headers[RETRY_AFTER_HEADER]) >= 1
                        assert r.json()["code"] == 429
                    else:
                        assert r.status_code == 200, r.text
                        acked.append((tag, r.json()["span"]["start"], r.json()["span"]["end"]))

    threads = [threading.Thread(target=hammer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rejected[0] > 0, "expected the node to shed load"
    with node.client() as c:
        got = pa.concat_tables(read_all(c, "hot", "0"))
        tags = got.column("tag").to_pylist()
        # only acknowledged appends are stored, each whole, at its span
        assert len(tags) == sum(e - s for _, s, e in acked)
        for tag, s, e in acked:
            assert tags[s:e] == [tag] * (e - s)
        metrics = c.get("/metrics").text
        assert 'plateau_rejected_appends_total{reason="busy"}' in metrics
    node.stop()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_retention_holds_budget_plus_one_segment(tmp_path: Path, fmt: str) -> None:
    node = NodeProcess(tmp_path / "data").start()
    budget = 400_000
    with node.client() as c:
        c.put(
            "/admin/topics/ret",
            json={
                "partitions": 2,
                "retention": {"max_bytes": budget},
                "segment": {"format": fmt, "max_rows": 1000, "compression": "none"},
            },
        ).raise_for_status()
        seg_bytes = 0
        for i in range(60):
            while True:
                r = append(c, "ret", str(i % 2), payload(500))
                if r.status_code != 429:
                    break
                time.sleep(0.05)
            assert r.status_code == 200, r.text
            info = c.get("/admin/topics/ret").json()
            on_disk = segment_bytes(tmp_path / "data/topics/ret")
            seg_bytes = max(seg_bytes, 1000 * 110)
            assert on_disk <= budget + 2 * seg_bytes, (on_disk, info)
        usage = c.get("/topic/ret").json()
        assert usage["partitions"]["0"]["start"] > 0, "old segments were never deleted"
        assert usage["partitions"]["0"]["end"] == 15_000
        # a lowered budget takes effect at once
        c.put("/admin/topics/ret", json={"retention": {"max_bytes": 0}}).raise_for_status()
        remaining = [
            f
            for f in (tmp_path / "data/topics/ret").glob("*/*")
            if f.suffix in (".arrow", ".parquet")
        ]
        assert remaining == []
    node.stop()


@pytest.mark.slow
def test_reader_iterates_while_writers_append(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "data").start()
    with node.client() as c:
        c.put(
            "/admin/topics/live",
            json={"partitions": 3, "segment": {"format": "arrow", "max_rows": 3000}},
        ).raise_for_status()
    per_partition = 30
    done = threading.Event()

    def write(p: str) -> None:
        with httpx.Client(base_url=node.url, timeout=30) as cl:
            for seq in range(per_partition):
                t = pa.table({"p": [p] * 500, "seq": [seq] * 500, "i": list(range(500))})
                while append(cl, "live", p, t).status_code == 429:
                    time.sleep(0.02)

    writers = [threading.Thread(target=write, args=(str(p),)) for p in range(3)]
    for w in writers:
        w.start()
    seen: dict[str, list[int]] = {"0": [], "1": [], "2": []}
    cursor: dict[str, int] = {}
    deadline = time.monotonic() + 60
    with node.client() as c:
        while time.monotonic() < deadline:
            table, status = iterate(c, "live", cursor, page_size=700)
            for p, seq, i in zip(
                *(table.column(n).to_pylist() for n in ("p", "seq", "i"))
                if table.num_rows
                else ([], [], []),
                strict=True,
            ):
                seen[p].append(seq * 500 + i)
            cursor = status["next"]  # type: ignore[assignment]
            if not any(w.is_alive() for w in writers) and status["status"] == "All":
                if done.is_set():
                    break
                done.set()  # one more full pass after the writers finished
    for p, values in seen.items():
        # every record exactly once, in index order, per partition
        assert values == list(range(per_partition * 500)), p
    node.stop()


def segment_bytes(directory: Path) -> int:
    """Bytes of sealed segments; a file retention deletes while we look counts as gone."""
    total = 0
    for f in directory.glob("*/*"):
        if f.suffix in (".arrow", ".parquet"):
            with contextlib.suppress(FileNotFoundError):
                total += f.stat().st_size
    return total
