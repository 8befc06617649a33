"""Tiny Arrow-over-HTTP helpers for tests that exercise the wire contract directly."""

from __future__ import annotations

import json
import time

import httpx
import pyarrow as pa

from plateau.protocol import ARROW_FILE, ITERATION_STATUS_HEADER, MAX_PAGE_SIZE


def ipc_file(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def ipc_stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def append(client: httpx.Client, topic: str, partition: str, table: pa.Table) -> httpx.Response:
    return client.post(
        f"/topic/{topic}/partition/{partition}",
        content=ipc_file(table),
        headers={"content-type": ARROW_FILE},
    )


def append_retrying(
    client: httpx.Client, topic: str, partition: str, table: pa.Table, attempts: int = 500
) -> httpx.Response:
    """Append as a client does: a 429 (the sealer is behind) is retried after a short pause."""
    for _ in range(attempts):
        r = append(client, topic, partition, table)
        if r.status_code != 429:
            return r
        time.sleep(0.01)
    return r


def read(
    client: httpx.Client, topic: str, partition: str, start: int, page_size: int = MAX_PAGE_SIZE
) -> tuple[pa.Table, str]:
    r = client.get(
        f"/topic/{topic}/partition/{partition}/records",
        params={"start": start, "page_size": page_size},
        headers={"accept": ARROW_FILE},
    )
    r.raise_for_status()
    return pa.ipc.open_file(pa.py_buffer(r.content)).read_all(), r.headers[ITERATION_STATUS_HEADER]


def read_all(client: httpx.Client, topic: str, partition: str, start: int = 0) -> list[pa.Table]:
    """Every record from ``start`` on, following pages until the partition's end."""
    span = client.get(f"/topic/{topic}").json()["partitions"][partition]
    end = span["end"]
    out = []
    pos = max(start, span["start"])  # retention may have removed the oldest records
    while pos < end:
        table, _ = read(client, topic, partition, pos)
        if table.num_rows == 0:
            break
        out.append(table)
        pos += table.num_rows
    return out


def iterate(
    client: httpx.Client, topic: str, cursor: dict[str, int], page_size: int = MAX_PAGE_SIZE
) -> tuple[pa.Table, dict[str, object]]:
    r = client.post(
        f"/topic/{topic}/records",
        params={"page_size": page_size},
        json=cursor,
        headers={"accept": ARROW_FILE},
    )
    r.raise_for_status()
    status = json.loads(r.headers[ITERATION_STATUS_HEADER])
    body = r.content
    table = pa.ipc.open_file(pa.py_buffer(body)).read_all() if body else pa.table({})
    return table, status
