"""``snapshot.json``: the on-volume contract between the node and path-mode readers.

The node (``plateau.storage.snapshot_writer``) replaces this file atomically
after every seal and before every deletion; Spark's path listing
(``plateau.spark.path_listing``) reads it instead of the SQLite manifest, which
a read-only mount cannot open. Both sides go through ``encode`` and ``decode``
here, so the document's shape and its version are written down once.

Compatibility: the bytes are the JSON of version 1 as the node has always
written it (same keys, same nesting), so data directories written before keep
working. A field added later must be optional, so that a version-1 reader
ignores it and a version-1 document still decodes; anything else is a new
``SNAPSHOT_VERSION``, which older readers refuse with ``SnapshotVersionError``
rather than misread.

Why pydantic: ``model_validate_json`` parses and checks in one native pass,
faster than ``json.loads`` followed by building dataclasses by hand (a
listing of 12,800 segments: about 25 ms against 45 ms), and Spark may list
often (every micro-batch of a stream).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, StrictInt, ValidationError

from plateau.protocol.topic_config import TopicConfig

SNAPSHOT_FILE = "snapshot.json"
"""The file's name, directly in the node's data directory."""
SNAPSHOT_VERSION = 1
"""The version this code writes, and the only one it reads."""


class SnapshotError(ValueError):
    """A ``snapshot.json`` that is not a snapshot this reader understands."""


class SnapshotVersionError(SnapshotError):
    """A well-formed document of another version: its shape may differ, so it is not read."""

    def __init__(self, version: int) -> None:
        self.version = version
        advice = "upgrade plateau-k8s" if version > SNAPSHOT_VERSION else "not written by plateau"
        super().__init__(
            f"snapshot version {version!r}; this reader knows version {SNAPSHOT_VERSION} ({advice})"
        )


_FROZEN = ConfigDict(frozen=True)


class SnapshotSegment(BaseModel):
    """One sealed segment file; ``path`` is relative to the data directory."""

    model_config = _FROZEN

    id: int
    path: str
    format: str
    first_index: int
    end_index: int
    rows: int
    bytes: int
    min_time_ms: int | None = None  # the file's time bounds; absent: not known, no pruning
    max_time_ms: int | None = None


class SnapshotPartition(BaseModel):
    """A partition's sealed segments, oldest first, and the span they cover together.

    ``start`` and ``end`` are 0 when no segment is sealed (yet, or any more).
    """

    model_config = _FROZEN

    start: int
    end: int
    segments: tuple[SnapshotSegment, ...]


class SnapshotTopic(BaseModel):
    model_config = _FROZEN

    config: TopicConfig
    partitions: dict[str, SnapshotPartition]


class Snapshot(BaseModel):
    """The whole document: every topic's sealed segments at one moment.

    ``generation`` grows by one with every write (also across node restarts),
    so a reader can tell two listings apart; ``written_at`` is Unix seconds.
    """

    model_config = _FROZEN

    version: StrictInt = SNAPSHOT_VERSION
    generation: int
    written_at: float
    topics: dict[str, SnapshotTopic]


class _Versioned(BaseModel):
    """Just the version: to name it when a document of another one does not fit ``Snapshot``."""

    version: StrictInt


def encode(snapshot: Snapshot) -> bytes:
    """The file's bytes (compact JSON, UTF-8)."""
    return snapshot.model_dump_json().encode()


def decode(data: bytes) -> Snapshot:
    """The document in ``data``; ``SnapshotError`` if it is not a version this code reads.

    Unknown fields are ignored (also inside ``config``), so a node that adds an
    optional field does not break readers of the same version.
    """
    try:
        snapshot = Snapshot.model_validate_json(data, extra="ignore")
    except ValidationError as e:
        version = _version(data)
        if version is not None and version != SNAPSHOT_VERSION:
            raise SnapshotVersionError(version) from None
        raise SnapshotError(f"not a plateau snapshot: {_first(e)}") from None
    if snapshot.version != SNAPSHOT_VERSION:
        raise SnapshotVersionError(snapshot.version)
    return snapshot


def _version(data: bytes) -> int | None:
    try:
        return _Versioned.model_validate_json(data, extra="ignore").version
    except ValidationError:
        return None


def _first(e: ValidationError) -> str:
    """The first problem, located (``topics.t.partitions.0.end: Field required``)."""
    error = e.errors(include_url=False)[0]
    where = ".".join(str(part) for part in error["loc"])
    more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
    return f"{where}: {error['msg']}{more}" if where else f"{error['msg']}{more}"
