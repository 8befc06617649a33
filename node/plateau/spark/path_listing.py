"""Path mode (and ``read_topic``'s parquet path): a data directory's topic, via ``snapshot.json``.

The volume is typically mounted read-only into Spark's pods while the node
writes to it. The live SQLite manifest is never opened (a WAL reader must
write ``-shm``); the node replaces ``snapshot.json`` atomically after every
seal and before it deletes a segment, so a snapshot names only complete,
immutable files, and a file it names can only disappear through retention.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from plateau.protocol.values import Span
from plateau.spark.merge import merge_schemas
from plateau.spark.options import OptionError, SourceOptions, data_dir
from plateau.spark.plan import Slice

SNAPSHOT = "snapshot.json"
SUPPORTED_VERSION = 1


def load_snapshot(root: Path) -> dict[str, Any]:
    """The node's latest published listing; errors name the ``path`` option."""
    if not root.is_dir():
        raise OptionError(f"option 'path': {str(root)!r} is not a directory")
    try:
        doc = json.loads((root / SNAPSHOT).read_bytes())
    except FileNotFoundError:
        raise OptionError(
            f"option 'path': {str(root)!r} is not a plateau data directory (no {SNAPSHOT}; "
            f"give the node's data directory, the one holding manifest.sqlite and topics/)"
        ) from None
    except (OSError, ValueError) as e:
        raise OptionError(f"option 'path': cannot read {root / SNAPSHOT}: {e}") from None
    if not isinstance(doc, dict) or doc.get("version") != SUPPORTED_VERSION:
        raise OptionError(
            f"option 'path': {root / SNAPSHOT} has version {doc.get('version')!r}; "
            f"this reader knows version {SUPPORTED_VERSION} (upgrade plateau-k8s)"
        )
    return doc


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
        doc = load_snapshot(self.root)
        topics = doc.get("topics") or {}
        if options.topic not in topics:
            known = ", ".join(sorted(topics)) or "none"
            raise OptionError(
                f"option 'topic': {options.topic!r} is not on the node at {str(self.root)!r} "
                f"(topics with sealed data there: {known})"
            )
        self.generation = int(doc.get("generation", 0))
        topic = topics[options.topic]
        self._partitions: dict[str, dict[str, Any]] = topic.get("partitions") or {}
        segment_config = (topic.get("config") or {}).get("segment") or {}
        self.format = str(segment_config.get("format", "parquet"))

    def spans(self) -> dict[str, Span]:
        return {
            p: Span(int(d["start"]), int(d["end"]))
            for p, d in self._partitions.items()
            if d.get("segments")
        }

    def segments(self, partition: str) -> list[dict[str, Any]]:
        return list(self._partitions.get(partition, {}).get("segments") or [])

    def schema(self, partitions: Sequence[str]) -> pa.Schema:
        files = [
            (str(self.root / seg["path"]), str(seg["format"]))
            for p in partitions
            for seg in self.segments(p)
        ]
        return files_schema(files)

    def slices(self, partition: str, span: Span, options: SourceOptions) -> list[Slice]:
        out: list[Slice] = []
        for seg in self.segments(partition):
            first, end = int(seg["first_index"]), int(seg["end_index"])
            if end <= span.start or first >= span.end:
                continue
            if options.starting_ms is not None and int(seg["max_time_ms"]) < options.starting_ms:
                continue
            if options.ending_ms is not None and int(seg["min_time_ms"]) >= options.ending_ms:
                continue
            start, stop = max(first, span.start), min(end, span.end)
            out.append(
                Slice(
                    partition=partition,
                    start=start,
                    end=stop,
                    file=str(self.root / seg["path"]),
                    format=str(seg["format"]),
                    first_index=first,
                    file_end=end,
                    bytes=max(1, int(seg["bytes"]) * (stop - start) // max(1, end - first)),
                    min_time_ms=_int_or_none(seg.get("min_time_ms")),
                    max_time_ms=_int_or_none(seg.get("max_time_ms")),
                )
            )
        return out


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)
