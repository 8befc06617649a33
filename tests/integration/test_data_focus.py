"""The data focus against a real node: nested, wide inference-log rows in sealed and
open segments of both formats, read back as Arrow and as JSON, by partition and by
topic iteration, with the query forms plateau's clients send."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from plateau.client import DataFocus, PlateauClient
from plateau.protocol import ARROW_FILE, ITERATION_STATUS_HEADER, JSON_RECORDS
from testkit.arrowhttp import append_retrying
from testkit.nodeproc import NodeProcess
from tests.integration.test_cli import one_error_line, run
from tests.unit.test_focus import TENSOR, inference_logs

ROWS = 6  # per append; 4 appends of which the first ones are sealed (max_rows 8)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(Path(tmp_path_factory.mktemp("focus")) / "data").start()
    try:  # a failed setup stops the node too (a fixture's teardown runs only after its yield)
        with proc.client() as client:
            for fmt in ("parquet", "arrow"):
                fill(client, f"logs-{fmt}", fmt)
        yield proc
    finally:
        proc.stop()


def fill(client: httpx.Client, topic: str, fmt: str) -> None:
    """Four appends into a topic sealing every 8 rows: sealed segments and an open one."""
    config = {"partitions": 1, "segment": {"format": fmt, "max_rows": 8}}
    assert client.put(f"/admin/topics/{topic}", json=config).status_code in (200, 201)
    for _ in range(4):
        reply = append_retrying(client, topic, "0", inference_logs())
        assert reply.status_code == 200, reply.text

    def sealed() -> bool:
        usage = client.get(f"/admin/topics/{topic}").json()["usage"]["partitions"]["0"]
        return bool(usage["segments"] >= 2)

    deadline = time.monotonic() + 30
    while not sealed() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sealed(), "two segments sealed, the last rows still in the open one"


def source() -> pa.Table:
    return pa.concat_tables([inference_logs()] * 4)


def path(table: pa.Table, dotted: str) -> list[Any]:
    """A nested column's values, straight from the source table (not through the focus)."""
    first, *rest = dotted.split(".")
    array: Any = table.column(first).combine_chunks()
    for step in rest:
        array = array.field(step)
    return list(array.to_pylist())


# (query, expected columns: name in the reply -> its dotted path in the source)
CASES: list[tuple[list[tuple[str, str]], dict[str, str]]] = [
    ([("dataset[]", "inputs")], {"tensor": "inputs.tensor", "label": "inputs.label"}),
    (
        [("dataset[]", "inputs"), ("dataset[]", "outputs"), ("dataset.separator", ".")],
        {
            "inputs.tensor": "inputs.tensor",
            "inputs.label": "inputs.label",
            "outputs.score": "outputs.score",
            "outputs.classes": "outputs.classes",
        },
    ),
    (
        [("dataset[]", "inputs"), ("dataset[]", "outputs"), ("dataset.exclude[]", "outputs")],
        {"tensor": "inputs.tensor", "label": "inputs.label"},
    ),
    ([("dataset", "time"), ("dataset", "blob")], {"time": "time", "blob": "blob"}),  # repeats
    (
        [("dataset[1]", "time"), ("dataset[0]", "metadata.latency_ms"), ("dataset.separator", ".")],
        {"metadata.latency_ms": "metadata.latency_ms", "time": "time"},  # serde_qs indexes
    ),
    (
        [
            ("dataset[]", "*"),
            ("dataset.separator", "__"),
            ("dataset.exclude[]", "inputs"),
            ("dataset.exclude[]", "outputs"),
            ("dataset.exclude[]", "blob"),
        ],
        {
            "time": "time",
            "metadata__model__name": "metadata.model.name",
            "metadata__model__version": "metadata.model.version",
            "metadata__latency_ms": "metadata.latency_ms",
        },
    ),
]


def _json_value(value: Any) -> Any:
    """How the node writes a value in JSON: binary as base64."""
    return base64.b64encode(value).decode() if isinstance(value, bytes) else value


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
@pytest.mark.parametrize(("query", "expected"), CASES)
def test_partition_reads_return_the_focused_columns(
    node: NodeProcess, fmt: str, query: list[tuple[str, str]], expected: dict[str, str]
) -> None:
    url = f"{node.url}/topic/logs-{fmt}/partition/0/records"
    params = (("start", "0"), ("page_size", "100"), *query)
    src = source()
    arrow = httpx.get(url, params=params, headers={"accept": ARROW_FILE})
    assert arrow.status_code == 200, arrow.text
    table = pa.ipc.open_file(pa.py_buffer(arrow.content)).read_all()
    assert table.column_names == list(expected)
    assert table.num_rows == 4 * ROWS  # sealed and open segments both
    for name, dotted in expected.items():
        assert table.column(name).to_pylist() == path(src, dotted), name

    reply = httpx.get(url, params=params)
    assert reply.headers["content-type"] == JSON_RECORDS
    rows = reply.json()
    assert [list(row) for row in rows] == [list(expected)] * (4 * ROWS)
    for name, dotted in expected.items():
        assert [row[name] for row in rows] == [_json_value(v) for v in path(src, dotted)]


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_topic_iteration_takes_the_same_focus(node: NodeProcess, fmt: str) -> None:
    query = (("dataset[]", "outputs"), ("dataset.separator", "."), ("page_size", "5"))
    url = f"{node.url}/topic/logs-{fmt}/records"
    cursor: dict[str, int] = {}
    scores: list[float] = []
    while True:
        r = httpx.post(url, params=query, json=cursor, headers={"accept": ARROW_FILE})
        assert r.status_code == 200, r.text
        table = pa.ipc.open_file(pa.py_buffer(r.content)).read_all()
        status = json.loads(r.headers[ITERATION_STATUS_HEADER])
        if table.num_rows:
            assert table.column_names == ["outputs.score", "outputs.classes"]
        scores += table.column("outputs.score").to_pylist() if table.num_rows else []
        cursor = status["next"]
        if status["status"] == "All":
            break
    assert scores == path(source(), "outputs.score")


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_max_bytes_nulls_too_large_columns_keeping_their_type(node: NodeProcess, fmt: str) -> None:
    # in a 24-row reply: the tensor is 384 bytes, the label 120, time 192
    query = (("dataset[]", "inputs"), ("dataset[]", "time"), ("dataset.separator", "."),
             ("dataset.max_bytes", "200"), ("start", "0"), ("page_size", "100"))  # fmt: skip
    r = httpx.get(
        f"{node.url}/topic/logs-{fmt}/partition/0/records",
        params=query,
        headers={"accept": ARROW_FILE},
    )
    table = pa.ipc.open_file(pa.py_buffer(r.content)).read_all()
    assert table.schema.field("inputs.tensor").type == TENSOR
    assert table.column("inputs.tensor").null_count == table.num_rows == 4 * ROWS
    assert table.column("inputs.label").null_count == 0
    assert table.column("time").null_count == 0


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ([("dataset[]", "nope")], "'nope'"),
        ([("dataset[]", "inputs.nope"), ("dataset.separator", ".")], "'nope'"),
        ([("dataset[]", "inputs.tensor")], "'inputs.tensor'"),  # no separator: a column name
        ([("dataset[]", "time"), ("dataset.exclude[]", "time")], "no column"),
        ([("dataset.separator", "")], "dataset.separator"),
        ([("dataset.max_bytes", "-1")], "dataset.max_bytes"),
        ([("dataset.max_bytes", "lots")], "dataset.max_bytes"),
        ([("dataset.include[]", "x")], "dataset.include"),
    ],
)
def test_bad_focus_is_a_400_that_names_it_and_changes_nothing(
    node: NodeProcess, query: list[tuple[str, str]], named: str
) -> None:
    url = f"{node.url}/topic/logs-parquet/partition/0/records"
    before = httpx.get(url, params={"start": 0, "page_size": 100}, headers={"accept": ARROW_FILE})
    for reply in (
        httpx.get(url, params=[("start", "0"), *query]),
        httpx.post(f"{node.url}/topic/logs-parquet/records", params=tuple(query), json={}),
    ):
        assert reply.status_code == 400, reply.text
        assert named in reply.json()["message"]
    after = httpx.get(url, params={"start": 0, "page_size": 100}, headers={"accept": ARROW_FILE})
    assert after.content == before.content


def test_client_and_cli_take_the_same_selection(node: NodeProcess, tmp_path: Path) -> None:
    focus = DataFocus(("inputs", "outputs"), ("outputs",))
    with PlateauClient(node.url) as client:
        pages = list(client.read_all("logs-arrow", "0", focus=focus))
        table = pa.concat_tables(page.table for page in pages)
        assert table.column_names == ["tensor", "label"] and table.num_rows == 4 * ROWS
        topic_pages = list(client.iterate("logs-arrow", focus=DataFocus(("time",))))
        assert sum(p.table.num_rows for p in topic_pages) == 4 * ROWS
        assert all(p.table.column_names == ["time"] for p in topic_pages if p.table.num_rows)

    out = run(node, "read", "logs-parquet", "0", "--format", "jsonl", "--dataset", "outputs",
              "--dataset", "time", "--separator", ".", "--exclude", "outputs.classes")  # fmt: skip
    assert out.exit_code == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(rows) == 4 * ROWS and list(rows[0]) == ["outputs.score", "time"]
    out = run(node, "tail", "logs-parquet", "--dataset", "time", "--limit", "3")
    assert out.exit_code == 0, out.stderr
    assert [json.loads(line) for line in out.stdout.splitlines()] == [
        {"time": t} for t in (1000, 1001, 1002)
    ]
    one_error_line(run(node, "read", "logs-parquet", "0", "--dataset", "nope"), "'nope'")
    one_error_line(run(node, "read", "logs-parquet", "0", "--separator", ""), "separator")
