"""Large append bodies land in recycled memory (``server/body_pool.py``), on a real node.

Each body is over 1 MiB, so the node copies it into a region of its pool, and
segments of 4 MiB seal every few appends, so regions come back and are lent to
later bodies while readers read the earlier ones. What users rely on: every
record reads back as sent, from open segments and sealed files and after a
restart, on arrow and parquet topics, as Arrow file and stream bodies; and the
regions really are reused (``/metrics``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest

from plateau.protocol import ARROW_FILE, ARROW_STREAM
from testkit.arrowhttp import ipc_file, ipc_stream, read_all
from testkit.nodeproc import NodeProcess, metric_values

ROWS = 9000  # about 1.3 MB a body


def batch(tag: int) -> pa.Table:
    rng = random.Random(tag)
    return pa.table(
        {
            "tag": pa.array([tag] * ROWS, pa.int64()),
            "blob": pa.array([rng.randbytes(120) for _ in range(ROWS)], pa.binary()),
            "n": pa.array(range(tag * ROWS, (tag + 1) * ROWS), pa.int64()),
        }
    )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    proc = NodeProcess(tmp_path / "data").start()
    yield proc
    proc.stop()


def rows_read(c: httpx.Client, topic: str) -> pa.Table:
    return pa.concat_tables(read_all(c, topic, "0")).select(["tag", "blob", "n"])


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
def test_bodies_in_recycled_memory_read_back_as_sent(node: NodeProcess, fmt: str) -> None:
    appends = 24
    with node.client(timeout=60) as c:
        segment = {"format": fmt, "max_bytes": 4 << 20}
        assert c.put("/admin/topics/t", json={"segment": segment}).status_code == 201
        sent = []
        for tag in range(appends):
            table = batch(tag)
            body, media = (
                (ipc_stream(table), ARROW_STREAM) if tag % 2 else (ipc_file(table), ARROW_FILE)
            )
            assert len(body) > 1 << 20
            r = c.post("/topic/t/partition/0", content=body, headers={"content-type": media})
            assert r.status_code == 200, r.text
            sent.append(table)
            if tag % 5 == 4:  # read while later bodies reuse the regions of sealed ones
                assert rows_read(c, "t").equals(pa.concat_tables(sent))
        assert rows_read(c, "t").equals(pa.concat_tables(sent))
    regions = metric_values(node.url, "plateau_body_pool_regions_total")
    assert regions[(("outcome", "reused"),)] > 0, regions
    assert regions[(("outcome", "mapped"),)] < appends, regions

    node.restart()
    with node.client(timeout=60) as c:
        assert rows_read(c, "t").equals(pa.concat_tables(sent)), "sealed files after restart"


def test_a_deleted_topic_leaves_no_body_memory_behind(node: NodeProcess) -> None:
    """What the pool lent to a topic's bodies comes back once the topic is gone: nothing
    keeps an open segment's batches alive after it."""
    with node.client(timeout=60) as c:
        assert c.put("/admin/topics/d", json={"segment": {"max_bytes": 4 << 20}}).status_code == 201
        for tag in range(8):
            body = ipc_file(batch(tag))
            r = c.post("/topic/d/partition/0", content=body, headers={"content-type": ARROW_FILE})
            assert r.status_code == 200, r.text
        leased = metric_values(node.url, "plateau_body_pool_leased_bytes")[()]
        assert leased >= len(body), "the open segment's bodies are leased"
        assert c.delete("/admin/topics/d").status_code in (200, 204)
        deadline = time.monotonic() + 10
        while (leased := metric_values(node.url, "plateau_body_pool_leased_bytes")[()]) > 0:
            assert time.monotonic() < deadline, f"{leased} bytes still leased after the delete"
            time.sleep(0.05)
