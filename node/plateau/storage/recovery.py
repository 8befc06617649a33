"""Reading back what a crash left behind.

An open file is magic + schema + batch messages (+ footer if it was sealed).
After ``kill -9`` or a power cut its tail may be torn: a message cut short or
zeros. Everything before the first incomplete message was written (and, if
acknowledged, fsynced) whole, so it is read as an IPC stream up to that point
and the rest is cut off.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa

from plateau.storage.catalog.manifest import Manifest, OpenRow, SegmentRow
from plateau.storage.data.durable_io import rename_durably
from plateau.storage.data.full_validation import validate_batch
from plateau.storage.data.open_segment import time_bounds_ms
from plateau.storage.data.sealed_writer import read_whole, sealed_name, write_sealed
from plateau.storage.types import Index, SegmentId

log = logging.getLogger(__name__)

ARROW_MAGIC = b"ARROW1"
STREAM_START = 8  # 6 magic bytes + 2 padding
ENOSPC = 28


def read_open_file(path: Path) -> tuple[pa.Schema | None, list[pa.RecordBatch], int]:
    """Schema, complete batches and the byte length they occupy, stopping at a torn tail."""
    data = path.read_bytes()
    if len(data) < STREAM_START or not data.startswith(ARROW_MAGIC):
        return None, [], 0
    source = pa.BufferReader(pa.py_buffer(data)[STREAM_START:])
    try:
        reader = pa.ipc.open_stream(source)
    except (pa.ArrowInvalid, OSError):
        return None, [], 0
    batches: list[pa.RecordBatch] = []
    valid_end = STREAM_START + source.tell()
    while True:
        try:
            batch = reader.read_next_batch()
            validate_batch(batch)
        except StopIteration:
            break
        except (pa.ArrowInvalid, OSError) as exc:
            log.warning("%s: torn tail cut after %d batches (%s)", path, len(batches), exc)
            break
        batches.append(batch)
        valid_end = STREAM_START + source.tell()
    return reader.schema, batches, valid_end


def recover(data_dir: Path, manifest: Manifest) -> dict[tuple[str, str], list[SegmentRow]]:
    """Bring the data directory and the manifest back in line; returns sealed rows by partition.

    1. Sealed rows whose file is missing are dropped (logged): the file is the data.
    2. Open rows, and ``.open`` files without a row, are sealed from the
       complete batches of their file (torn tail cut), or dropped if empty.
       A segment renamed to its sealed name whose row was not yet committed is
       adopted as sealed.
    3. Files no row names (``.tmp`` leftovers, files retention had unlinked
       from the manifest) are deleted.
    """
    topics_dir = data_dir / "topics"
    known_topics = set(manifest.topics())
    open_rows = {row.id: row for row in manifest.open_segments()}
    for path in topics_dir.glob("*/*/*.open"):
        topic, partition = path.parent.parent.name, path.parent.name
        parsed = _parse_name(path.name)
        if parsed is None or topic not in known_topics:
            continue
        first, seg_id = parsed
        if seg_id not in open_rows and not _is_sealed(manifest, seg_id):
            fmt = _topic_format(manifest, topic)
            orphan = OpenRow(SegmentId(seg_id), topic, partition, fmt, Index(first))
            manifest.adopt_open_segment(orphan)
            open_rows[orphan.id] = orphan
    for open_row in open_rows.values():
        _recover_open(data_dir, manifest, open_row)
    by_partition: dict[tuple[str, str], list[SegmentRow]] = {}
    keep: set[Path] = set()
    for row in manifest.sealed_segments():
        path = data_dir / row.path
        if not path.exists():
            log.error("sealed segment %s is missing; dropping it from the manifest", path)
            manifest.drop_segment(row.id)
            continue
        keep.add(path)
        by_partition.setdefault((row.topic, row.partition), []).append(row)
        manifest.advance_next_index(row.topic, row.partition, row.end_index)
    for path in topics_dir.glob("*/*/*"):
        if path.is_file() and path not in keep:
            log.warning("removing %s: no manifest row names it", path)
            path.unlink()
    for tdir in topics_dir.iterdir():
        if tdir.is_dir() and tdir.name not in known_topics:
            shutil.rmtree(tdir, ignore_errors=True)
    return by_partition


def _parse_name(name: str) -> tuple[int, int] | None:
    stem = name.split(".", 1)[0]
    first, _, seg = stem.partition("-")
    if not (first.isdigit() and seg.isdigit()):
        return None
    return int(first), int(seg)


def _is_sealed(manifest: Manifest, seg_id: int) -> bool:
    return any(r.id == seg_id for r in manifest.sealed_segments())


def _topic_format(manifest: Manifest, topic: str) -> str:
    return manifest.topics()[topic].segment.format


def _recover_open(data_dir: Path, manifest: Manifest, row: OpenRow) -> None:
    directory = data_dir / "topics" / row.topic / row.partition
    open_path = directory / f"{row.first_index:020d}-{row.id}.open"
    final = directory / sealed_name(row.first_index, row.id, row.format)
    table: pa.Table | None = None
    fmt = row.format
    in_place = directory / sealed_name(row.first_index, row.id, "arrow")
    if not open_path.exists() and not final.exists() and in_place.exists():
        # An earlier start sealed this parquet segment in place on a full volume and
        # then failed (SQLite out of space) before committing the row: adopt the
        # ``.arrow`` file, or step 3 below would delete acknowledged rows as an orphan.
        final, fmt = in_place, "arrow"
    if open_path.exists():
        schema, batches, valid_end = read_open_file(open_path)
        rows = sum(b.num_rows for b in batches)
        if schema is not None and rows > 0:
            table = pa.Table.from_batches(batches, schema=schema)
            compression = manifest.topics()[row.topic].segment.codec()
            try:
                write_sealed(final, table, row.format, compression)
            except OSError as exc:
                if exc.errno != ENOSPC:
                    raise
                final = seal_in_place(open_path, valid_end, row)
                fmt = "arrow"
            log.warning("recovered %d rows of %s", rows, open_path)
    elif final.exists():
        try:
            table = read_whole(final, fmt)
        except (pa.ArrowInvalid, OSError):
            log.exception("%s is unreadable; dropping it", final)
            final.unlink()
            table = None
    if table is None or table.num_rows == 0:
        manifest.drop_segment(row.id)
        open_path.unlink(missing_ok=True)
        return
    lo, hi = time_bounds_ms(table.column("time"))
    manifest.seal_segment(
        SegmentRow(
            id=row.id,
            topic=row.topic,
            partition=row.partition,
            format=fmt,
            first_index=row.first_index,
            end_index=Index(row.first_index + table.num_rows),
            bytes=final.stat().st_size,
            min_time_ms=lo,
            max_time_ms=hi,
            path=str(final.relative_to(data_dir)),
            sealed_at=time.time(),
        )
    )
    open_path.unlink(missing_ok=True)


def seal_in_place(open_path: Path, valid_end: int, row: OpenRow) -> Path:
    """Seal without a second copy, for a full volume: cut the torn tail, rename to ``.arrow``.

    The result has no footer; ``sealed.SegmentReader`` reads such a file as a
    stream. A parquet topic's write-ahead file becomes an ``arrow`` segment this
    way (the manifest row and snapshot say so), rather than losing data.
    """
    with open_path.open("r+b") as f:
        f.truncate(valid_end)
        os.fsync(f.fileno())
    final = open_path.with_name(sealed_name(row.first_index, row.id, "arrow"))
    rename_durably(open_path, final)
    log.warning("volume full: sealed %s in place as %s", open_path, final.name)
    return final
