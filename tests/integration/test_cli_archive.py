"""``plateau topic set --archive`` against real nodes: one archiving to a real S3 server
(SeaweedFS) takes the topic's archive settings and reports them back, one without an
archive refuses with the node's reason; either way one ``error:`` line and exit code 2
for what cannot be done, and nothing changed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from plateau.cli import app
from testkit.nodeproc import NodeProcess
from testkit.s3server import ADMIN, REGION, S3Server

TOKEN = "test-token"


def run(node: NodeProcess, *args: str) -> Result:
    return CliRunner().invoke(app, list(args), env={"PLATEAU_URL": node.url,
                                                    "PLATEAU_TOKEN": TOKEN})  # fmt: skip


@pytest.fixture
def archiving(tmp_path: Path, s3server: S3Server, s3bucket: str) -> Iterator[NodeProcess]:
    env = {
        "PLATEAU_STORAGE__ARCHIVE__URL": f"s3://{s3bucket}/cli",
        "PLATEAU_STORAGE__ARCHIVE__ENDPOINT": s3server.endpoint,
        "PLATEAU_STORAGE__ARCHIVE__REGION": REGION,
        **ADMIN.env(),
    }
    proc = NodeProcess(tmp_path / "data", token=TOKEN, env=env).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[NodeProcess]:
    proc = NodeProcess(tmp_path / "bare", token=TOKEN).start()
    try:
        yield proc
    finally:
        proc.stop()


def archive_of(node: NodeProcess, topic: str) -> dict[str, object]:
    got = run(node, "topic", "get", topic)
    assert got.exit_code == 0, got.stderr
    return dict(json.loads(got.stdout)["archive"])


def test_archive_flags_set_and_clear_the_topics_archive(archiving: NodeProcess) -> None:
    put = run(archiving, "topic", "set", "events", "--archive")
    assert put.exit_code == 0, put.stderr
    assert json.loads(put.stdout)["archive"] == {"enabled": True, "required": None}
    assert archive_of(archiving, "events") == {"enabled": True, "required": None}
    put = run(archiving, "topic", "set", "events", "--no-archive-required")
    assert put.exit_code == 0, put.stderr
    assert archive_of(archiving, "events") == {"enabled": True, "required": False}
    put = run(archiving, "topic", "set", "events", "--max-bytes", "1Gi")  # archive untouched
    assert put.exit_code == 0 and archive_of(archiving, "events")["enabled"] is True
    put = run(archiving, "topic", "set", "events", "--no-archive")
    assert put.exit_code == 0, put.stderr
    assert archive_of(archiving, "events")["enabled"] is False
    bad = run(archiving, "topic", "set", "events", "--no-archive", "--archive-required")
    assert bad.exit_code == 2 and bad.stderr.startswith("error: ")
    assert archive_of(archiving, "events")["enabled"] is False  # nothing sent


def test_a_node_without_an_archive_refuses_with_its_reason(bare: NodeProcess) -> None:
    r = run(bare, "topic", "set", "events", "--archive")
    assert r.exit_code == 2, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "archive" in lines[0].lower()
    missing = run(bare, "topic", "get", "events")
    assert missing.exit_code == 2  # refused: no topic made
