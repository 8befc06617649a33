"""A topic's whole history, archive then node, as one ``Listing`` (option ``archive``).

The archive (``plateau.protocol.archive``) holds sealed segments the node uploaded,
listed by the topic's archive manifest; the node holds the recent ones (and may
hold archived ones it has not deleted yet). ``ArchiveListing`` plans every read
path over both: a partition's span runs from the archive's first index to the
node's end, and a range ``[start, end)`` is cut once, so that each index is read
from exactly one side:

* from ``start``, the archived segments in order (clipped to the range, pruned by
  the time bounds) as long as they are contiguous;
* the rest, from the first index the archive does not hold, from the node: an
  index archived and still local is therefore read from the archive only;
* a hole neither side holds (retention deleted segments the archive never got,
  ``archive.required`` off) is data loss, reported as retention's is
  (``failOnDataLoss``).

No PySpark here: both the JVM read (``archive_frames``) and the Python data
source (``archive_reading``) plan with it. How the manifest and the files'
schemas are fetched is theirs (S3A through Spark's JVM, or pyarrow).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import pyarrow as pa
from pydantic import ValidationError

from plateau.protocol.archive import ArchivedSegment, ArchiveManifest
from plateau.protocol.values import Span
from plateau.spark.merge import SchemaConflict, merge_schemas
from plateau.spark.options import OptionError, SourceOptions
from plateau.spark.plan import Listing, Slice, report_loss

log = logging.getLogger(__name__)

ARCHIVED = "archived"  # Slice.format of an archived segment: a Parquet object in the archive
MANIFEST_ATTEMPTS = 5  # reads of the manifest before a bad one is an error (1 s of waits)


def read_manifest(fetch: Callable[[], bytes | None], where: str, topic: str) -> ArchiveManifest:
    """The manifest ``fetch`` reads, read again when it fails; none yet (``fetch`` gives
    ``None``: nothing uploaded) is an empty one.

    The node replaces the manifest object in place while readers read it. S3 itself
    serves a GET racing a PUT one whole version; some S3-compatible stores do not:
    SeaweedFS serves one version's length with the other's bytes (bytes missing,
    extra or zeroed), and S3A refuses a read whose object changed after its HEAD
    (412). Either way the next read sees the new object whole, so a read or a decode
    that fails is tried again; only one that still fails after ``MANIFEST_ATTEMPTS``
    is an error (``fetch``'s ``OptionError`` or the decode's).
    """
    for attempt in range(MANIFEST_ATTEMPTS - 1):
        try:
            return _fetched_manifest(fetch, where, topic)
        except OptionError:
            time.sleep(0.1 * (attempt + 1))
    return _fetched_manifest(fetch, where, topic)  # the last attempt: its error is the reader's


def _fetched_manifest(fetch: Callable[[], bytes | None], where: str, topic: str) -> ArchiveManifest:
    data = fetch()
    if data is None:
        log.warning("no archive manifest at %s: nothing archived yet, reading the node only", where)
        return ArchiveManifest(topic=topic, updated_at=0.0)
    return decode_manifest(data, where, topic)


def decode_manifest(data: bytes, where: str, topic: str) -> ArchiveManifest:
    """The manifest object's bytes; a bad one is an error naming the ``archive`` option."""
    try:
        manifest = ArchiveManifest.model_validate_json(data)
    except ValidationError as e:
        raise OptionError(
            f"option 'archive': {where} is not a plateau archive manifest: {e}"
        ) from None
    if manifest.topic != topic:
        raise OptionError(
            f"option 'archive': {where} is the manifest of topic {manifest.topic!r}, not {topic!r}"
        )
    return manifest


class ArchiveListing:
    """The archive's segments (``root`` + each key is a file) and the node's listing.

    ``node`` is ``None`` when only the archive is read (the node unknown or gone).
    ``file_schema`` reads one archived file's Arrow schema (its footer); it is
    asked once per distinct schema the manifest records, not once per file.
    """

    def __init__(
        self,
        manifest: ArchiveManifest,
        node: Listing | None,
        root: str,
        file_schema: Callable[[str, int], pa.Schema],
    ) -> None:
        self.root = root.rstrip("/")
        self.archived = manifest.by_partition()
        self.node = node
        self._node_spans = node.spans() if node is not None else {}
        self._file_schema = file_schema

    def file(self, seg: ArchivedSegment) -> str:
        return f"{self.root}/{seg.key}"

    def spans(self) -> dict[str, Span]:
        out: dict[str, Span] = {}
        for p in set(self.archived) | set(self._node_spans):
            segs = self.archived.get(p, [])
            bounds = [Span(segs[0].start, segs[-1].end)] if segs else []
            if p in self._node_spans:
                bounds.append(self._node_spans[p])
            out[p] = Span(min(b.start for b in bounds), max(b.end for b in bounds))
        return out

    def node_spans(self) -> dict[str, Span]:
        return dict(self._node_spans)

    def archived_schema(self, segments: Sequence[ArchivedSegment]) -> list[pa.Schema]:
        """The schemas of ``segments``: one footer read per distinct recorded schema."""
        seen: dict[str, pa.Schema] = {}
        for seg in segments:
            fields = [(f.name, f.type, f.nullable) for f in seg.schema_fields]
            key = repr(fields) if fields else seg.key  # none recorded: each file its own
            if key not in seen:
                seen[key] = self._file_schema(self.file(seg), seg.bytes)
        return list(seen.values())

    def schema(self, partitions: Sequence[str]) -> pa.Schema:
        segs = [s for p in partitions for s in self.archived.get(p, [])]
        schemas = self.archived_schema(segs)
        local = [p for p in partitions if p in self._node_spans]
        if self.node is not None and local:
            try:
                schemas.append(self.node.schema(local))
            except OptionError:
                if not schemas:  # neither side has a record: the node's message says so
                    raise
        if not schemas:
            raise OptionError(
                "the topic has no records in the archive or on the node yet, so its "
                "columns are unknown; give them with .schema(...)"
            )
        try:
            return merge_schemas(schemas)
        except SchemaConflict as e:
            raise OptionError(str(e)) from None

    def slices(self, partition: str, span: Span, options: SourceOptions) -> list[Slice]:
        out: list[Slice] = []
        node = self._node_spans.get(partition)
        position = span.start
        for seg in self.archived.get(partition, []):
            if seg.end <= position:
                continue
            if seg.start >= span.end:
                break
            if seg.start > position:
                if node is not None and node.start <= position:
                    break  # the node has the hole: it reads from here on
                report_loss(options, partition, Span(position, seg.start))
                position = seg.start
            stop = min(seg.end, span.end)
            if _in_time(seg, options):
                out.append(self._slice(partition, seg, position, stop))
            position = stop
        if position < span.end:
            held = node.start if node is not None else span.end
            if held > position:
                report_loss(options, partition, Span(position, min(held, span.end)))
                position = min(held, span.end)
        if position < span.end and self.node is not None:
            out.extend(self.node.slices(partition, Span(position, span.end), options))
        return out

    def _slice(self, partition: str, seg: ArchivedSegment, start: int, stop: int) -> Slice:
        return Slice(
            partition=partition,
            start=start,
            end=stop,
            file=self.file(seg),
            format=ARCHIVED,
            first_index=seg.start,
            file_end=seg.end,
            bytes=max(1, seg.bytes * (stop - start) // max(1, seg.end - seg.start)),
            min_time_ms=seg.min_time_ms,
            max_time_ms=seg.max_time_ms,
        )


def _in_time(seg: ArchivedSegment, options: SourceOptions) -> bool:
    """False only when the manifest's time span proves no row is inside the bounds."""
    if options.starting_ms is not None and seg.max_time_ms < options.starting_ms:
        return False
    return not (options.ending_ms is not None and seg.min_time_ms >= options.ending_ms)


def archived(pieces: Sequence[Slice]) -> list[Slice]:
    return [s for s in pieces if s.format == ARCHIVED]


def on_node(pieces: Sequence[Slice]) -> list[Slice]:
    return [s for s in pieces if s.format != ARCHIVED]


def footer_schema(tail: bytes, where: str) -> pa.Schema:
    """A Parquet file's Arrow schema from its last bytes (footer, length, ``PAR1``)."""
    import pyarrow.parquet as pq

    if len(tail) < 8 or tail[-4:] != b"PAR1":
        raise OptionError(f"option 'archive': {where} is not a Parquet file")
    length = int.from_bytes(tail[-8:-4], "little")
    if length + 8 > len(tail):
        raise ValueError(length + 8)  # the caller reads that many bytes and asks again
    footer = b"PAR1" + tail[-(length + 8) :]
    return pq.read_schema(pa.BufferReader(footer))
