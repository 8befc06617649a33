"""Path mode (and ``read_topic``'s parquet path): a data directory's topic, via ``snapshot.json``.

The volume is typically mounted read-only into Spark's pods while the node
writes to it. The live SQLite manifest is never opened (a WAL reader must
write ``-shm``); the node replaces ``snapshot.json`` atomically after every
seal and before it deletes a segment, so a snapshot names only complete,
immutable files, and a file it names can only disappear through retention.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from plateau.protocol.snapshot import (
    SNAPSHOT_FILE,
    SNAPSHOT_VERSION,
    Snapshot,
    SnapshotError,
    SnapshotPartition,
    SnapshotSegment,
    SnapshotVersionError,
    decode,
)
from plateau.protocol.values import Span
from plateau.spark.merge import merge_schemas
from plateau.spark.options import OptionError, SourceOptions, data_dir
from plateau.spark.plan import Slice


def load_snapshot(root: Path) -> Snapshot:
    """The node's latest published listing; errors name the ``path`` option."""
    if not root.is_dir():
        raise OptionError(f"option 'path': {str(root)!r} is not a directory")
    path = root / SNAPSHOT_FILE
    try:
        return decode(path.read_bytes())
    except FileNotFoundError:
        raise OptionError(
            f"option 'path': {str(root)!r} is not a plateau data directory (no {SNAPSHOT_FILE}; "
            f"give the node's data directory, the one holding manifest.sqlite and topics/)"
        ) from None
    except SnapshotVersionError as e:
        raise OptionError(
            f"option 'path': {path} has version {e.version!r}; "
            f"this reader knows version {SNAPSHOT_VERSION} (upgrade plateau-k8s)"
        ) from None
    except (OSError, SnapshotError) as e:
        raise OptionError(f"option 'path': cannot read {path}: {e}") from None


def file_schema(path: str, fmt: str) -> pa.Schema:
    if fmt == "parquet":
        return pq.read_schema(path)
    with pa.memory_map(path) as source:
        return pa.ipc.open_file(source).schema


def files_schema(files: Sequence[tuple[str, str]]) -> pa.Schema:
    """The merged schema of segment files (path, format), each distinct schema once."""
    schemas: list[pa.Schema] = []
    seen: set[str] = set()
    for path, fmt in files:
        try:
            schema = file_schema(path, fmt)
        except FileNotFoundError:
            continue  # deleted by retention since the snapshot: the others tell
        key = schema.to_string(show_schema_metadata=False)
        if key not in seen:
            seen.add(key)
            schemas.append(schema)
    if not schemas:
        raise OptionError(
            "the topic has no sealed segments on this volume yet, so its columns are "
            "unknown; give them with .schema(...) or read through option 'url'"
        )
    return merge_schemas(schemas)


class VolumeListing:
    """The topic as the snapshot read at construction describes it (one consistent view)."""

    def __init__(self, options: SourceOptions) -> None:
        self.root = data_dir(options)
        snapshot = load_snapshot(self.root)
        topic = snapshot.topics.get(options.topic)
        if topic is None:
            known = ", ".join(sorted(snapshot.topics)) or "none"
            raise OptionError(
                f"option 'topic': {options.topic!r} is not on the node at {str(self.root)!r} "
                f"(topics with sealed data there: {known})"
            )
        self.generation = snapshot.generation
        self._partitions: dict[str, SnapshotPartition] = topic.partitions
        self.format: str = topic.config.segment.format

    def spans(self) -> dict[str, Span]:
        return {p: Span(d.start, d.end) for p, d in self._partitions.items() if d.segments}

    def segments(self, partition: str) -> tuple[SnapshotSegment, ...]:
        listed = self._partitions.get(partition)
        return listed.segments if listed is not None else ()

    def schema(self, partitions: Sequence[str]) -> pa.Schema:
        files = [
            (str(self.root / seg.path), seg.format) for p in partitions for seg in self.segments(p)
        ]
        return files_schema(files)

    def slices(self, partition: str, span: Span, options: SourceOptions) -> list[Slice]:
        out: list[Slice] = []
        for seg in self.segments(partition):
            first, end = seg.first_index, seg.end_index
            if end <= span.start or first >= span.end:
                continue
            if _before(seg.max_time_ms, options.starting_ms):
                continue
            if _before(options.ending_ms, seg.min_time_ms, inclusive=True):
                continue
            start, stop = max(first, span.start), min(end, span.end)
            out.append(
                Slice(
                    partition=partition,
                    start=start,
                    end=stop,
                    file=str(self.root / seg.path),
                    format=seg.format,
                    first_index=first,
                    file_end=end,
                    bytes=max(1, seg.bytes * (stop - start) // max(1, end - first)),
                    min_time_ms=seg.min_time_ms,
                    max_time_ms=seg.max_time_ms,
                )
            )
        return out


def _before(a: int | None, b: int | None, *, inclusive: bool = False) -> bool:
    """``a < b`` (``<=`` with ``inclusive``), false when either is unknown: no pruning."""
    if a is None or b is None:
        return False
    return a <= b if inclusive else a < b
