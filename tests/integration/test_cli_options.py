"""The client options ``--url``, ``--token`` and ``--timeout``, before and after the command.

Against a real node on loopback that requires a token: every client command (nested
``topic set/get/delete`` too) takes them in either place; the one after the command wins
over the one before, which wins over ``PLATEAU_URL``/``PLATEAU_TOKEN``; bad values are one
``error:`` line and exit code 2.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner, Result

from plateau.cli import app
from testkit.nodeproc import NodeProcess

TOKEN = "cli-options-token"
DEAD_URL = "http://127.0.0.1:9"  # nothing listens: reaching it fails at once


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(tmp_path_factory.mktemp("opts") / "data", token=TOKEN).start()
    yield proc
    proc.stop()


def plateau(*args: str, env: dict[str, str] | None = None) -> Result:
    """``plateau ARGS`` with PLATEAU_URL and PLATEAU_TOKEN unset unless given."""
    full: dict[str, str | None] = {"PLATEAU_URL": None, "PLATEAU_TOKEN": None, **(env or {})}
    return CliRunner().invoke(app, list(args), env=full)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def one_error(result: Result, *fragments: str) -> str:
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert all(f in lines[0] for f in fragments), lines[0]
    return lines[0]


@pytest.mark.parametrize("where", ["before", "after"])
def test_every_client_command_takes_them_before_or_after(
    node: NodeProcess, tmp_path: Path, where: str
) -> None:
    conn = ["--url", node.url, "--token", TOKEN, "--timeout", "20"]
    topic = f"opts-{where}"

    def run(*args: str) -> str:
        return ok(plateau(*(conn + list(args) if where == "before" else list(args) + conn)))

    rows = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"id": list(range(5))}), rows)
    assert json.loads(run("topic", "set", topic, "--partitions", "1"))["partitions"] == 1
    assert json.loads(run("append", topic, "0", str(rows)))["rows"] == 5
    read = run("read", topic, "0", "--format", "jsonl").splitlines()
    assert [json.loads(line)["id"] for line in read] == [0, 1, 2, 3, 4]
    assert len(run("tail", topic).splitlines()) == 5
    assert topic in run("topics").splitlines()
    assert "allocated_bytes" in json.loads(run("node-info"))
    assert json.loads(run("topic", "get", topic))["partitions"] == 1
    run("topic", "delete", topic, "--yes")
    assert topic not in run("topics").splitlines()


@pytest.mark.parametrize(
    "before,after,env,allowed",
    [
        (None, None, None, False),  # the node really refuses without its token
        (TOKEN, None, None, True),
        (None, TOKEN, None, True),
        ("wrong", TOKEN, None, True),  # the one after the command wins
        (TOKEN, "wrong", None, False),
        (None, TOKEN, "wrong", True),  # either option beats the environment
        (TOKEN, None, "wrong", True),
        (None, "wrong", TOKEN, False),
        (None, None, TOKEN, True),
    ],
)
def test_the_token_reaches_the_node_from_either_place(
    node: NodeProcess, before: str | None, after: str | None, env: str | None, allowed: bool
) -> None:
    args = ["--url", node.url]
    args += ["--token", before] if before else []
    args += ["topic", "set", "tok", "--partitions", "1"]
    args += ["--token", after] if after else []
    result = plateau(*args, env={"PLATEAU_TOKEN": env} if env else None)
    if allowed:
        assert json.loads(ok(result))["partitions"] == 1
    else:
        one_error(result, "401")


def test_the_url_after_the_command_wins(node: NodeProcess) -> None:
    # "node answered" (401: no token given) shows the node was reached, not DEAD_URL.
    after = plateau("--url", DEAD_URL, "topic", "get", "absent", "--url", node.url)
    one_error(after, "node answered 401")
    dead = plateau("--url", node.url, "topic", "get", "absent", "--url", DEAD_URL)
    one_error(dead, "cannot reach the node at http://127.0.0.1:9")
    over_env = plateau("topic", "get", "absent", "--url", node.url, env={"PLATEAU_URL": DEAD_URL})
    one_error(over_env, "node answered 401")
    from_env = plateau("topic", "get", "absent", env={"PLATEAU_URL": node.url})
    one_error(from_env, "node answered 401")


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def test_the_timeout_after_the_command_wins(silent_url: str) -> None:
    late = plateau("--url", silent_url, "--timeout", "60", "node-info", "--timeout", "0.3")
    one_error(late, "no reply", "within 0.3s")
    early = plateau("--timeout", "0.2", "topic", "get", "t", "--url", silent_url)
    one_error(early, "no reply", "within 0.2s")


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["topic", "get", "t", "--timeout", "soon"], "--timeout"),
        (["topic", "get", "t", "--timeout", "0"], "not a positive number of seconds"),
        (["--timeout", "-1", "topics"], "not a positive number of seconds"),
        (["topic", "delete", "t", "--yes", "--url", "ftp://x"], "is not a node's address"),
        (["--url", "", "node-info"], "is not a node's address"),
        (["topics", "--token"], "--token"),  # the value is missing
    ],
)
def test_bad_values_are_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    """Through the real entry point, which turns usage errors into one line as well."""
    proc = subprocess.run(
        [sys.executable, "-c", "from plateau.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PLATEAU_URL": DEAD_URL, "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], lines
    assert proc.stdout == ""


def test_a_stray_plateau_url_does_not_break_commands_that_do_not_connect() -> None:
    result = plateau("node", "--help", env={"PLATEAU_URL": "ftp://nowhere"})
    assert result.exit_code == 0 and "--data-dir" in result.stdout
