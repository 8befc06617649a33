"""The SQLite manifest: the source of truth for which topics and segments exist.

Durability ordering (kept by the callers, checked by recovery):

* A segment row is inserted with ``state='open'`` before its ``.open`` file is
  created, so every open file has a row (recovery also adopts orphans).
* A sealed file is written to a temporary name, fsynced, renamed and the
  directory fsynced *before* the row becomes ``state='sealed'``; a sealed row
  therefore always names a complete file.
* Retention deletes the row first and the file second; a crash in between
  leaves a file without a row, which recovery removes.
* ``partitions.next_index`` only grows (``MAX`` on update), so an index is
  never handed out twice, also after retention deleted every segment.
* Deleting a topic moves its partitions' next indexes to ``index_floors`` in
  the same transaction, and a partition created again under the same names
  starts from there: ``(topic, partition, index)`` names one record forever,
  also across deletion and re-creation.

Each topic row carries its owner (``owner_*`` columns, all null for an
ownerless topic), written in the transaction that writes its config. A
manifest from before owners existed gets the columns added at open
(``_migrate``): its topics stay, ownerless.

Archived segments (schema version 2) are rows of ``archived``, keyed by
(topic, partition, first index) like their object keys: a row is written only
after its object was uploaded and verified (``record_archived``), and it
outlives the local segment (retention deletes ``segments`` rows, never
``archived`` ones), so the node knows its archived history after the disk
copy is gone. Deleting a topic deletes its archived rows; the objects stay in
the bucket (the node never deletes from the archive).

WAL mode with ``synchronous=FULL``: one fsync per commit, and commits happen
per segment (open, seal, delete), never per append.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plateau.protocol.archive import ArchivedSegment, ArchiveField
from plateau.protocol.topic_config import TopicConfig, TopicOwner
from plateau.storage.catalog.locks import Rank, ranked
from plateau.storage.types import Index, SegmentId

SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    created_at REAL NOT NULL,
    owner_kind TEXT,
    owner_namespace TEXT,
    owner_name TEXT,
    owner_uid TEXT
);
CREATE TABLE IF NOT EXISTS partitions (
    topic TEXT NOT NULL,
    name TEXT NOT NULL,
    next_index INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, name)
);
CREATE TABLE IF NOT EXISTS segments (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL,
    partition TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('open', 'sealed')),
    format TEXT NOT NULL,
    first_index INTEGER NOT NULL,
    end_index INTEGER,
    rows INTEGER,
    bytes INTEGER,
    min_time_ms INTEGER,
    max_time_ms INTEGER,
    path TEXT,
    sealed_at REAL
);
CREATE TABLE IF NOT EXISTS index_floors (
    topic TEXT NOT NULL,
    name TEXT NOT NULL,
    next_index INTEGER NOT NULL,
    PRIMARY KEY (topic, name)
);
CREATE INDEX IF NOT EXISTS segments_by_partition ON segments (topic, partition, first_index);
CREATE TABLE IF NOT EXISTS archived (
    topic TEXT NOT NULL,
    partition TEXT NOT NULL,
    first_index INTEGER NOT NULL,
    end_index INTEGER NOT NULL,
    min_time_ms INTEGER NOT NULL,
    max_time_ms INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    key TEXT NOT NULL,
    etag TEXT NOT NULL,
    schema TEXT NOT NULL,
    archived_at REAL NOT NULL,
    PRIMARY KEY (topic, partition, first_index)
);
"""


OWNER_COLUMNS = ("owner_kind", "owner_namespace", "owner_name", "owner_uid")
SCHEMA_VERSION = 3  # user_version: 0 before topic owners, 1 before the archive, 2 sha256 not etag
_ARCHIVED_COLUMNS = (
    "partition, first_index, end_index, min_time_ms, max_time_ms, bytes, key, etag, schema, "
    "archived_at"
)

# Config and owner replaced together; created_at stays the first creation's.
_UPSERT_TOPIC = (
    f"INSERT INTO topics (name, config, created_at, {', '.join(OWNER_COLUMNS)}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET config = excluded.config, "
    + ", ".join(f"{c} = excluded.{c}" for c in OWNER_COLUMNS)
)

# A partition starts at the floor a deleted topic of the same name left, else at 0.
_INSERT_PARTITION = (
    "INSERT OR IGNORE INTO partitions (topic, name, next_index) VALUES (?, ?, COALESCE("
    "(SELECT next_index FROM index_floors WHERE topic = ? AND name = ?), 0))"
)


@dataclass(frozen=True)
class SegmentRow:
    """A sealed segment as the manifest records it; ``path`` is relative to the data dir."""

    id: SegmentId
    topic: str
    partition: str
    format: str
    first_index: Index
    end_index: Index
    bytes: int
    min_time_ms: int
    max_time_ms: int
    path: str
    sealed_at: float

    @property
    def rows(self) -> int:
        return self.end_index - self.first_index


@dataclass(frozen=True)
class OpenRow:
    id: SegmentId
    topic: str
    partition: str
    format: str
    first_index: Index


class Manifest:
    """Serialized access to one SQLite connection shared by all threads."""

    def __init__(self, path: Path) -> None:
        self._lock = ranked(Rank.MANIFEST, "manifest")
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Bring a manifest written by an older node up to ``SCHEMA_VERSION``, in one transaction.

        ``CREATE TABLE IF NOT EXISTS`` leaves an existing table as it was, so
        columns added since are added here; a crash midway leaves the old schema
        (SQLite's ALTER TABLE is transactional) and the next start tries again.
        A current manifest is not written to (a start on a full volume needs no space).
        """
        with self._lock:
            (version,) = self._db.execute("PRAGMA user_version").fetchone()
            if version >= SCHEMA_VERSION:
                return
            with self._db:
                self._db.execute("BEGIN")
                columns = {row[1] for row in self._db.execute("PRAGMA table_info(topics)")}
                for column in OWNER_COLUMNS:
                    if column not in columns:  # a topic made before owners: ownerless (null)
                        self._db.execute(f"ALTER TABLE topics ADD COLUMN {column} TEXT")
                # version 2 only added the ``archived`` table, which SCHEMA creates; 3
                # records the server's ETag where 2 recorded a SHA-256 the node computed
                archived = {row[1] for row in self._db.execute("PRAGMA table_info(archived)")}
                if "sha256" in archived:
                    self._db.execute("ALTER TABLE archived RENAME COLUMN sha256 TO etag")
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- topics ---------------------------------------------------------------
    def topics(self) -> dict[str, TopicConfig]:
        with self._lock:
            rows = self._db.execute("SELECT name, config FROM topics ORDER BY name").fetchall()
        return {name: TopicConfig.model_validate_json(cfg) for name, cfg in rows}

    def owners(self) -> dict[str, TopicOwner]:
        """The owner of every topic that has one."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT name, {', '.join(OWNER_COLUMNS)} FROM topics WHERE owner_uid IS NOT NULL"
            ).fetchall()
        return {
            name: TopicOwner(kind=kind, namespace=namespace, name=owner, uid=uid)
            for name, kind, namespace, owner, uid in rows
        }

    def put_topic(
        self,
        name: str,
        config: TopicConfig,
        owner: TopicOwner | None,
        partitions: list[str],
    ) -> dict[str, Index]:
        """Store the config and owner together, create missing partitions; returns every
        partition's next index."""
        owned = (owner.kind, owner.namespace, owner.name, owner.uid) if owner else (None,) * 4
        with self._lock, self._db:
            self._db.execute("BEGIN")
            self._db.execute(_UPSERT_TOPIC, (name, config.model_dump_json(), time.time(), *owned))
            self._db.executemany(_INSERT_PARTITION, [(name, p, name, p) for p in partitions])
            return self._next_indexes(name)

    def delete_topic(self, name: str, next_indexes: dict[str, Index]) -> None:
        """Delete the topic; keep each partition's next index (the larger of both) as a floor."""
        with self._lock, self._db:
            self._db.execute("BEGIN")
            for partition, next_index in next_indexes.items():
                self._advance(name, partition, next_index)
            self._db.execute(
                "INSERT INTO index_floors (topic, name, next_index) "
                "SELECT topic, name, next_index FROM partitions WHERE topic = ? "
                "ON CONFLICT (topic, name) DO UPDATE SET "
                "next_index = MAX(index_floors.next_index, excluded.next_index)",
                (name,),
            )
            self._db.execute("DELETE FROM segments WHERE topic = ?", (name,))
            self._db.execute("DELETE FROM archived WHERE topic = ?", (name,))
            self._db.execute("DELETE FROM partitions WHERE topic = ?", (name,))
            self._db.execute("DELETE FROM topics WHERE name = ?", (name,))

    # --- partitions -----------------------------------------------------------
    def partitions(self, topic: str) -> dict[str, Index]:
        with self._lock:
            return self._next_indexes(topic)

    def _next_indexes(self, topic: str) -> dict[str, Index]:
        rows = self._db.execute(
            "SELECT name, next_index FROM partitions WHERE topic = ?", (topic,)
        ).fetchall()
        return {name: Index(n) for name, n in rows}

    def add_partition(self, topic: str, name: str) -> Index:
        """Create the partition if missing; returns its next index."""
        with self._lock:
            self._db.execute(_INSERT_PARTITION, (topic, name, topic, name))
            (next_index,) = self._db.execute(
                "SELECT next_index FROM partitions WHERE topic = ? AND name = ?", (topic, name)
            ).fetchone()
        return Index(next_index)

    # --- segments -------------------------------------------------------------
    def open_segment(self, topic: str, partition: str, fmt: str, first: Index) -> SegmentId:
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO segments (topic, partition, state, format, first_index) "
                "VALUES (?, ?, 'open', ?, ?)",
                (topic, partition, fmt, first),
            )
            assert cur.lastrowid is not None
            return SegmentId(cur.lastrowid)

    def adopt_open_segment(self, row: OpenRow) -> None:
        """Record an open file that has no row (its insert was lost with a power cut)."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO segments (id, topic, partition, state, format, first_index) "
                "VALUES (?, ?, ?, 'open', ?, ?)",
                (row.id, row.topic, row.partition, row.format, row.first_index),
            )

    def seal_segment(self, row: SegmentRow) -> None:
        """Mark a segment sealed and advance the partition's next index, atomically."""
        with self._lock, self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                "UPDATE segments SET state='sealed', format=?, end_index=?, rows=?, bytes=?, "
                "min_time_ms=?, max_time_ms=?, path=?, sealed_at=? WHERE id=?",
                (
                    row.format,
                    row.end_index,
                    row.rows,
                    row.bytes,
                    row.min_time_ms,
                    row.max_time_ms,
                    row.path,
                    row.sealed_at,
                    row.id,
                ),
            )
            self._advance(row.topic, row.partition, row.end_index)

    def advance_next_index(self, topic: str, partition: str, next_index: Index) -> None:
        with self._lock:
            self._advance(topic, partition, next_index)

    def _advance(self, topic: str, partition: str, next_index: Index) -> None:
        self._db.execute(
            "INSERT INTO partitions (topic, name, next_index) VALUES (?, ?, ?) "
            "ON CONFLICT (topic, name) DO UPDATE SET "
            "next_index = MAX(next_index, excluded.next_index)",
            (topic, partition, next_index),
        )

    def drop_segment(self, segment_id: SegmentId) -> None:
        with self._lock:
            self._db.execute("DELETE FROM segments WHERE id = ?", (segment_id,))

    def sealed_segments(self) -> list[SegmentRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, topic, partition, format, first_index, end_index, bytes, "
                "min_time_ms, max_time_ms, path, sealed_at FROM segments "
                "WHERE state = 'sealed' ORDER BY topic, partition, first_index"
            ).fetchall()
        return [
            SegmentRow(SegmentId(r[0]), r[1], r[2], r[3], Index(r[4]), Index(r[5]), *r[6:])
            for r in rows
        ]

    def open_segments(self) -> list[OpenRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, topic, partition, format, first_index FROM segments "
                "WHERE state = 'open' ORDER BY id"
            ).fetchall()
        return [OpenRow(SegmentId(r[0]), r[1], r[2], r[3], Index(r[4])) for r in rows]

    # --- archive --------------------------------------------------------------
    def record_archived(self, seg: ArchivedSegment, topic: str) -> None:
        """Record an uploaded and verified segment (one transaction; a repeat replaces it)."""
        schema = "[" + ",".join(f.model_dump_json() for f in seg.schema_fields) + "]"
        with self._lock, self._db:
            self._db.execute("BEGIN")
            self._db.execute(
                f"INSERT OR REPLACE INTO archived (topic, {_ARCHIVED_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    topic,
                    seg.partition,
                    seg.start,
                    seg.end,
                    seg.min_time_ms,
                    seg.max_time_ms,
                    seg.bytes,
                    seg.key,
                    seg.etag,
                    schema,
                    seg.archived_at,
                ),
            )

    def archived_segments(self, topic: str) -> list[ArchivedSegment]:
        """Every archived segment of ``topic``, ordered by partition then start index."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_ARCHIVED_COLUMNS} FROM archived WHERE topic = ? "
                "ORDER BY partition, first_index",
                (topic,),
            ).fetchall()
        return [_archived(r) for r in rows]

    def archived_ends(self) -> dict[tuple[str, str], Index]:
        """Per (topic, partition), the end of its newest archived segment.

        A partition's segments are archived in index order, so a sealed segment
        is archived exactly when its end is at or below this mark.
        """
        with self._lock:
            rows = self._db.execute(
                "SELECT topic, partition, MAX(end_index) FROM archived GROUP BY topic, partition"
            ).fetchall()
        return {(t, p): Index(end) for t, p, end in rows}

    def archived_spans(self, topic: str) -> dict[str, tuple[int, int]]:
        """Per partition of ``topic``, the first archived index and the archived end."""
        with self._lock:
            rows = self._db.execute(
                "SELECT partition, MIN(first_index), MAX(end_index) FROM archived "
                "WHERE topic = ? GROUP BY partition",
                (topic,),
            ).fetchall()
        return {p: (lo, hi) for p, lo, hi in rows}

    def archived_counts(self) -> dict[str, int]:
        """Archived segments per topic."""
        with self._lock:
            rows = self._db.execute(
                "SELECT topic, COUNT(*) FROM archived GROUP BY topic"
            ).fetchall()
        return {t: n for t, n in rows}


def _archived(r: tuple[Any, ...]) -> ArchivedSegment:
    partition, start, end, lo, hi, nbytes, key, etag, schema, archived_at = r
    return ArchivedSegment(
        partition=partition,
        start=start,
        end=end,
        min_time_ms=lo,
        max_time_ms=hi,
        bytes=nbytes,
        key=key,
        etag=etag,
        schema=[ArchiveField.model_validate(f) for f in json.loads(schema)],
        archived_at=archived_at,
    )
