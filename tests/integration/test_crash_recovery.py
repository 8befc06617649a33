"""kill -9 during sustained appends: every acknowledged record survives, nothing twice."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from testkit.arrowhttp import append, read_all
from testkit.nodeproc import NodeProcess


def writer(
    url: str,
    partition: str,
    stop: threading.Event,
    acked: list[tuple[int, int, int]],
    first_seq: int,
) -> None:
    """Appends batches tagged with a unique sequence number; records (seq, start, end) of acks."""
    seq = first_seq
    with httpx.Client(base_url=url, timeout=10) as c:
        while not stop.is_set():
            n = 200 + seq % 300
            table = pa.table(
                {
                    "seq": pa.array([seq] * n, pa.int64()),
                    "i": pa.array(range(n), pa.int64()),
                }
            )
            try:
                r = append(c, "crash", partition, table)
            except httpx.HTTPError:
                return  # the node died under us: this append is not acknowledged
            if r.status_code == 200:
                span = r.json()["span"]
                acked.append((seq, span["start"], span["end"]))
            elif r.status_code != 429:
                raise AssertionError(r.text)
            seq += 1


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_kill_9_loses_no_acknowledged_record(tmp_path: Path, fmt: str) -> None:
    node = NodeProcess(tmp_path / "data").start()
    with node.client() as c:
        c.put(
            "/admin/topics/crash",
            json={"partitions": 2, "segment": {"format": fmt, "max_rows": 5000}},
        ).raise_for_status()
    acked: dict[str, list[tuple[int, int, int]]] = {"0": [], "1": []}
    for round_ in range(2):
        stop = threading.Event()
        threads = [
            threading.Thread(target=writer, args=(node.url, p, stop, acked[p], round_ * 1_000_000))
            for p in acked
        ]
        for t in threads:
            t.start()
        # under way first (a fresh node's first append can take a second or two:
        # imports), then 1.5 s more of sustained appends
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and min(len(a) for a in acked.values()) < 20 * (
            round_ + 1
        ):
            time.sleep(0.05)
        time.sleep(1.5)
        node.kill()  # SIGKILL while the writers are mid-append
        stop.set()
        for t in threads:
            t.join()
        node.start()
    with node.client() as c:
        for p, acks in acked.items():
            assert len(acks) > 10, "writers made too little progress to test anything"
            tables = read_all(c, "crash", p)
            got = pa.concat_tables(tables) if tables else None
            assert got is not None
            seqs = got.column("seq").to_pylist()
            # every acknowledged batch is at exactly its acknowledged indexes
            for seq, start, end in acks:
                assert seqs[start:end] == [seq] * (end - start)
                assert got.column("i").to_pylist()[start:end] == list(range(end - start))
            # nothing duplicated: each batch's rows appear once, contiguously
            runs = [s for i, s in enumerate(seqs) if i == 0 or seqs[i - 1] != s]
            assert len(runs) == len(set(runs)), "a batch appears twice"
            spans = sorted((s, e) for _, s, e in acks)
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
            # appends continue after the last index; none reused
            r = append(c, "crash", p, pa.table({"seq": [-1], "i": [0]}))
            assert r.json()["span"]["start"] >= max(e for _, _, e in acks)
    node.stop()
