"""Stored reads against real nodes: a page sent as the segment stores it is the page a
reader got before, and a compressed one only reaches a reader that decodes its codec.

Two nodes take the same appends (10-row batches into topics sealing every 30 rows: sealed
segments of 3 batches, the last rows maybe still open), one with ``storage.stored_reads``
on (the default) and one with it off (every page decoded and encoded, as before). Every
page of a grid of starts and sizes, in both Arrow formats, with and without
``x-accept-arrow-compression``, gets the same status, span and rows from both; the
stored node's metric shows its pages did go out as stored.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from plateau.client import PlateauClient
from plateau.protocol import (
    ACCEPT_ARROW_COMPRESSION_HEADER,
    ARROW_FILE,
    ARROW_STREAM,
    ITERATION_STATUS_HEADER,
    SPAN_END_HEADER,
    SPAN_START_HEADER,
)
from testkit.arrowhttp import append_retrying
from testkit.nodeproc import NodeProcess, metric_values

BATCH = 10
APPENDS = 12
SEGMENT_ROWS = 30
TOPICS = ("plain", "packed")  # random values (stored as sent) and repetitive ones (lz4)
STORED = "plateau_read_batches_stored_total"


def batch(topic: str, i: int) -> pa.Table:
    rows = range(i * BATCH, (i + 1) * BATCH)
    if topic == "plain":
        return pa.table(
            {
                "time": pa.array(rows, pa.int64()),
                "value": pa.array([os.urandom(24) for _ in rows], pa.binary()),
            }
        )
    return pa.table(
        {
            "time": pa.array(rows, pa.int64()),
            "model": pa.array(["model-a" if r % 3 else "model-b" for r in rows]),
            "status": pa.array(["ok"] * BATCH),
            "text": pa.array(["the same words again and again " * 8] * BATCH),
        }
    )


def _fill(node: NodeProcess, appended: dict[str, list[pa.Table]]) -> None:
    with node.client() as client:
        for topic in TOPICS:
            config = {"partitions": 1, "segment": {"format": "arrow", "max_rows": SEGMENT_ROWS}}
            r = client.put(f"/admin/topics/{topic}", json=config)
            assert r.status_code in (200, 201), r.text
            for table in appended[topic]:
                r = append_retrying(client, topic, "0", table)
                assert r.status_code == 200, r.text
        deadline = time.monotonic() + 30
        for topic in TOPICS:
            while time.monotonic() < deadline:
                usage = client.get(f"/admin/topics/{topic}").json()["usage"]["partitions"]["0"]
                if usage["segments"] >= APPENDS * BATCH // SEGMENT_ROWS:
                    break
                time.sleep(0.05)
            else:
                pytest.fail(f"{topic}: the segments did not seal")


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProcess, NodeProcess]]:
    appended = {t: [batch(t, i) for i in range(APPENDS)] for t in TOPICS}
    root = tmp_path_factory.mktemp("stored")
    started: list[NodeProcess] = []
    try:
        for name, on in (("stored", "true"), ("decoded", "false")):
            env = {"PLATEAU_STORAGE__STORED_READS": on}
            started.append(NodeProcess(Path(root) / name, env=env).start())
            _fill(started[-1], appended)
        yield started[0], started[1]
    finally:
        for node in started:
            node.stop()


def _page(
    node: NodeProcess, topic: str, start: int, size: int, media: str, codecs: str | None
) -> tuple[int, dict[str, str], bytes]:
    headers = {"accept": media}
    if codecs is not None:
        headers[ACCEPT_ARROW_COMPRESSION_HEADER] = codecs
    r = httpx.get(
        f"{node.url}/topic/{topic}/partition/0/records",
        params={"start": start, "page_size": size},
        headers=headers,
    )
    shown = ("content-type", ITERATION_STATUS_HEADER, SPAN_START_HEADER, SPAN_END_HEADER)
    return r.status_code, {h: r.headers.get(h, "") for h in shown}, r.content


def _table(body: bytes, media: str) -> pa.Table:
    if media == ARROW_STREAM:
        return ipc.open_stream(pa.py_buffer(body)).read_all()
    return ipc.open_file(pa.py_buffer(body)).read_all()


def _stored(node: NodeProcess) -> float:
    return sum(metric_values(node.url, STORED).values())


@pytest.mark.parametrize("topic", TOPICS)
@pytest.mark.parametrize("media", [ARROW_FILE, ARROW_STREAM])
@pytest.mark.parametrize("codecs", [None, "lz4_frame, zstd"])
def test_every_page_is_the_decoded_page(
    nodes: tuple[NodeProcess, NodeProcess], topic: str, media: str, codecs: str | None
) -> None:
    stored, decoded = nodes
    before = _stored(stored)
    for start in range(0, APPENDS * BATCH + 5, 5):
        for size in (1, 5, 10, 20, 30, 40, 100):
            a_status, a_headers, a_body = _page(stored, topic, start, size, media, codecs)
            b_status, b_headers, b_body = _page(decoded, topic, start, size, media, codecs)
            where = f"{topic} start={start} page_size={size}"
            assert (a_status, a_headers) == (b_status, b_headers), where
            assert a_status == 200, where
            a, b = _table(a_body, media), _table(b_body, media)
            assert a.schema.equals(b.schema, check_metadata=True), where
            assert a.equals(b), where
    assert _stored(decoded) == 0
    if topic == "plain" or codecs is not None:
        assert _stored(stored) > before, "no page went out as stored"


def test_a_compressed_page_reaches_only_a_reader_of_its_codec(
    nodes: tuple[NodeProcess, NodeProcess],
) -> None:
    stored, _ = nodes
    before = _stored(stored)
    _, plain_headers, plain = _page(stored, "packed", 0, SEGMENT_ROWS, ARROW_FILE, None)
    assert _stored(stored) == before  # stored lz4, and this reader named no codec: decoded
    _, lz4_headers, lz4 = _page(stored, "packed", 0, SEGMENT_ROWS, ARROW_FILE, "LZ4_FRAME")
    assert _stored(stored) == before + SEGMENT_ROWS // BATCH
    assert plain_headers == lz4_headers
    assert len(lz4) < len(plain) / 2  # as stored: compressed
    assert _table(lz4, ARROW_FILE).equals(_table(plain, ARROW_FILE))
    _, _, other = _page(stored, "packed", 0, SEGMENT_ROWS, ARROW_FILE, "zstd, brotli")
    assert _stored(stored) == before + SEGMENT_ROWS // BATCH  # a codec it is not stored in
    assert len(other) == len(plain)


def test_the_python_client_reads_compressed_pages_as_stored(
    nodes: tuple[NodeProcess, NodeProcess],
) -> None:
    stored, decoded = nodes
    before = _stored(stored)
    with PlateauClient(stored.url) as a, PlateauClient(decoded.url) as b:
        page_a = a.read("packed", "0", start=0, page_size=SEGMENT_ROWS)
        page_b = b.read("packed", "0", start=0, page_size=SEGMENT_ROWS)
        everything = pa.concat_tables(page.table for page in a.read_all("packed", "0"))
    assert page_a.table.equals(page_b.table)
    assert (page_a.span, page_a.status) == (page_b.span, page_b.status)
    assert _stored(stored) >= before + SEGMENT_ROWS // BATCH  # it said it decodes lz4
    expected = pa.concat_tables([batch("packed", i) for i in range(APPENDS)])
    assert everything.equals(expected)
