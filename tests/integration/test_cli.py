"""The ``plateau`` command against a real node: data in and out, admin, and errors.

Every failure must be exactly one ``error: ...`` line on stderr and exit code 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner, Result

from plateau.cli import app
from testkit.nodeproc import NodeProcess


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One node for the tests that use topics of their own (starting a node takes seconds)."""
    proc = NodeProcess(tmp_path_factory.mktemp("shared") / "data", token="test-token").start()
    yield proc
    proc.stop()


ROWS = [{"id": i, "name": f"row {i}", "score": i * 0.5} for i in range(2500)]


def run(node: NodeProcess | None, *args: str, input: str | None = None) -> Result:
    env = {"PLATEAU_URL": node.url if node else "http://127.0.0.1:9"}
    env["PLATEAU_TOKEN"] = (node.token or "") if node else ""
    return CliRunner().invoke(app, list(args), env=env, input=input)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def one_error_line(result: Result, *fragments: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def write(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"rows.{kind}"
    if kind == "parquet":
        pq.write_table(pa.Table.from_pylist(ROWS), path, row_group_size=1000)
    elif kind == "csv":
        lines = ["id,name,score"] + [f"{r['id']},{r['name']},{r['score']}" for r in ROWS]
        path.write_text("\n".join(lines) + "\n")
    elif kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    elif kind == "arrow":
        with pa.ipc.new_file(str(path), pa.Table.from_pylist(ROWS).schema) as writer:
            writer.write_table(pa.Table.from_pylist(ROWS))
    return path


def jsonl(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def without_time(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{k: v for k, v in row.items() if k != "time"} for row in rows]


@pytest.mark.parametrize("kind", ["parquet", "csv", "jsonl", "arrow"])
def test_append_file_then_read(shared: NodeProcess, tmp_path: Path, kind: str) -> None:
    path = write(tmp_path, kind)
    out = ok(run(shared, "append", f"files-{kind}", "0", str(path), "--batch-rows", "1000"))
    assert json.loads(out) == {"span": {"start": 0, "end": 2500}, "rows": 2500}
    topic = f"files-{kind}"
    out = ok(
        run(shared, "read", topic, "0", "--start", "10", "--limit", "1200", "--format", "jsonl")
    )
    assert without_time(jsonl(out)) == ROWS[10:1210]
    table_out = ok(run(shared, "read", topic, "0", "--start", "2498"))
    assert "row 2499" in table_out and "score" in table_out


def test_append_several_files_in_order(shared: NodeProcess, tmp_path: Path) -> None:
    first = write(tmp_path, "csv")
    second = write(tmp_path, "jsonl")
    out = ok(run(shared, "append", "two", "p", str(first), str(second)))
    assert json.loads(out)["span"] == {"start": 0, "end": 5000}
    output = tmp_path / "out.arrow"
    ok(run(shared, "read", "two", "p", "--format", "arrow", "--output", str(output)))
    got = pa.ipc.open_file(str(output)).read_all()
    assert got.num_rows == 5000
    assert got.column("id").to_pylist() == [r["id"] for r in ROWS] * 2


def test_tail_prints_the_topic_as_json_lines(shared: NodeProcess, tmp_path: Path) -> None:
    ok(run(shared, "append", "tl", "a", str(write(tmp_path, "parquet"))))
    ok(run(shared, "append", "tl", "b", str(write(tmp_path, "jsonl"))))
    rows = jsonl(ok(run(shared, "tail", "tl", "--page-size", "700")))
    assert len(rows) == 5000
    assert sorted(int(str(r["id"])) for r in rows) == sorted(i for i in range(2500) for _ in "ab")
    only_a = jsonl(ok(run(shared, "tail", "tl", "-p", "a", "--limit", "3")))
    assert without_time(only_a) == ROWS[:3]
    assert ok(run(shared, "tail", "tl", "--from-end")) == ""


def test_tail_follow_prints_rows_appended_later(shared: NodeProcess) -> None:
    from plateau.client import PlateauClient

    with PlateauClient(shared.url, token=shared.token) as client:
        client.append("fl", "0", [{"v": 1}])

        def later() -> None:
            time.sleep(0.5)
            client.append("fl", "0", [{"v": 2}, {"v": 3}])

        writer = threading.Thread(target=later)
        writer.start()
        args = ("tail", "fl", "--follow", "--limit", "3", "--interval", "0.05")
        rows = jsonl(ok(run(shared, *args)))
        writer.join()
    assert [r["v"] for r in rows] == [1, 2, 3]


def test_topic_admin_commands(node: NodeProcess) -> None:
    out = ok(
        run(
            node,
            "topic", "set", "cfg",
            "--partitions", "3",
            "--max-bytes", "512Mi",
            "--max-age", "7d",
            "--format", "arrow",
            "--segment-max-rows", "5000",
            "--segment-max-bytes", "8Mi",
            "--segment-max-age", "1m30s",
        )
    )  # fmt: skip
    config = json.loads(out)
    assert config["partitions"] == 3
    assert config["retention"] == {"max_bytes": 512 * 2**20, "max_age_seconds": 7 * 86400}
    assert config["segment"]["format"] == "arrow"
    assert config["segment"]["max_bytes"] == 8 * 2**20
    assert config["segment"]["max_age_seconds"] == 90
    ok(run(node, "topic", "set", "cfg", "--max-age", "none"))
    got = json.loads(ok(run(node, "topic", "get", "cfg")))
    assert got["retention"]["max_age_seconds"] is None and got["partitions"] == 3
    assert ok(run(node, "topics")).split() == ["cfg"]
    info = json.loads(ok(run(node, "node-info")))
    assert info["allocated_bytes"] >= 512 * 2**20
    refused = run(node, "topic", "delete", "cfg", input="n\n")
    assert refused.exit_code == 2 and ok(run(node, "topics")).split() == ["cfg"]
    ok(run(node, "topic", "delete", "cfg", "--yes"))
    assert ok(run(node, "topics")) == ""


def test_errors_are_one_line_and_exit_2(shared: NodeProcess, tmp_path: Path) -> None:
    one_error_line(run(shared, "read", "missing", "0"), "404", "missing")
    one_error_line(run(shared, "topic", "get", "missing"), "404")
    one_error_line(run(shared, "topic", "set", "t", "--max-bytes", "10X"), "--max-bytes", "10X")
    one_error_line(run(shared, "topic", "set", "t", "--max-age", "soon"), "--max-age")
    one_error_line(run(shared, "topic", "set", "t", "--max-bytes", "2Ei"), "409")
    one_error_line(run(shared, "append", "t", "0", str(tmp_path / "nope.csv")), "no such file")
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"garbage")
    one_error_line(run(shared, "append", "t", "0", str(bad)), "bad.parquet")
    one_error_line(run(shared, "append", "t", "0", str(tmp_path / "x.xml")), "--format")
    one_error_line(run(shared, "append", "Bad/Name", "0", str(write(tmp_path, "csv"))), "400")
    one_error_line(run(None, "topics"), "cannot reach the node")
    one_error_line(run(shared, "read", "t", "0", "--format", "arrow"), "--output")
    anonymous = CliRunner().invoke(
        app,
        ["append", "t", "0", str(write(tmp_path, "csv"))],
        env={"PLATEAU_URL": shared.url, "PLATEAU_TOKEN": ""},
    )
    one_error_line(anonymous, "401")


def test_failure_midway_says_what_was_appended(shared: NodeProcess, tmp_path: Path) -> None:
    good = write(tmp_path, "csv")
    other = tmp_path / "other.jsonl"
    other.write_text('{"id": null}\n')  # a null-typed column: the node refuses it (400)
    line = one_error_line(run(shared, "append", "mix", "0", str(good), str(other)), "400")
    assert "2500 rows were appended at 0..2500" in line


def test_usage_errors_through_the_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from plateau.cli import main; main()", "read", "--start", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
