"""Topic owners on disk: they survive restarts and crashes, and a node upgraded in place
on a manifest from before owners keeps its topics, ownerless."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow as pa

from plateau.client import PlateauClient
from plateau.protocol.replies import Claim
from plateau.protocol.topic_config import TopicOwner
from testkit.nodeproc import NodeProcess

TOKEN = "durable-token"
A = {"kind": "PlateauTopic", "namespace": "team-a", "name": "events", "uid": "uid-a"}
B = {"kind": "PlateauTopic", "namespace": "team-b", "name": "events", "uid": "uid-b"}
OWNER_A = TopicOwner.model_validate(A)

# The topics table as nodes wrote it before owners were recorded (manifest.py's SCHEMA then).
OLD_TOPICS_TABLE = """
CREATE TABLE topics (
    name TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    created_at REAL NOT NULL
);
"""


def client(proc: NodeProcess) -> PlateauClient:
    return PlateauClient(proc.url, token=TOKEN)


def test_owners_survive_a_restart_and_a_crash(tmp_path: Path) -> None:
    proc = NodeProcess(tmp_path / "data", token=TOKEN).start()
    try:
        with client(proc) as c:
            c.put_topic("owned", owner=A, max_bytes=10**6)
            c.put_topic("free", max_bytes=10**6)
        proc.restart()
        with client(proc) as c:
            assert c.get_topic("owned").owner == OWNER_A
            assert c.get_topic("free").owner is None
            reply = c.put_topic("owned", owner={**A, "uid": "uid-a2"})  # re-created resource
            assert reply.claim == Claim.RECLAIMED
        proc.kill()  # no shutdown: what was acknowledged must be in the manifest
        proc.start()
        with client(proc) as c:
            assert c.get_topic("owned").owner == OWNER_A.model_copy(update={"uid": "uid-a2"})
            reply = c.put_topic("owned", owner=B, adopt=True)
            assert reply.previous_owner is not None and reply.previous_owner.uid == "uid-a2"
    finally:
        proc.stop()


def downgrade_manifest(path: Path) -> None:
    """Rewrite the topics table in its old shape, keeping each topic's row (name, config,
    created_at), as a node from before owners would have left it."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("BEGIN")
        db.execute("ALTER TABLE topics RENAME TO topics_new")
        db.execute(OLD_TOPICS_TABLE)
        db.execute("INSERT INTO topics SELECT name, config, created_at FROM topics_new")
        db.execute("DROP TABLE topics_new")
        db.execute("PRAGMA user_version = 0")
        db.execute("COMMIT")
        columns = [row[1] for row in db.execute("PRAGMA table_info(topics)")]
        assert columns == ["name", "config", "created_at"]
    finally:
        db.close()


def test_manifest_from_before_owners_keeps_its_topics_ownerless(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = NodeProcess(data, token=TOKEN).start()
    try:
        with client(proc) as c:
            c.put_topic("legacy", partitions=2, max_bytes=5 * 10**6, segment_format="arrow")
            c.append("legacy", "1", pa.table({"x": [1, 2, 3]}))
            before = c.get_topic("legacy")
        proc.stop()
        downgrade_manifest(data / "manifest.sqlite")

        proc.start()  # the node of this tree, on the old manifest
        with client(proc) as c:
            got = c.get_topic("legacy")
            assert got.owner is None
            for key in ("partitions", "retention", "segment"):
                assert getattr(got, key) == getattr(before, key), key
            spans = {p: (u.start, u.end) for p, u in got.usage.partitions.items()}
            assert spans == {"0": (0, 0), "1": (0, 3)}
            assert c.read("legacy", "1").table.column("x").to_pylist() == [1, 2, 3]
            reply = c.put_topic("legacy", owner=A, adopt=True)
            assert reply.claim == Claim.ADOPTED
            c.append("legacy", "1", pa.table({"x": [4]}))
        proc.restart()  # the migrated manifest opens again, owner kept
        with client(proc) as c:
            assert c.get_topic("legacy").owner == OWNER_A
            assert c.read("legacy", "1").table.column("x").to_pylist() == [1, 2, 3, 4]
    finally:
        proc.stop()
