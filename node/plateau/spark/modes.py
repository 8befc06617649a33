"""``format("plateau")``'s two modes: path mode (a data directory) or url mode (a node),
either with the topic's archive before it (option ``archive``: ``archive_reading``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa

from plateau.spark.archive_plan import ARCHIVED
from plateau.spark.options import SourceOptions
from plateau.spark.path_listing import VolumeListing
from plateau.spark.path_reading import read_file_slices
from plateau.spark.plan import Listing, Slice
from plateau.spark.url_reading import RemoteListing, read_remote_slice


def open_listing(options: SourceOptions) -> Listing:
    node: Listing = VolumeListing(options) if options.path else RemoteListing(options)
    if options.archive is None:
        return node
    from plateau.spark.archive_reading import archive_listing

    return archive_listing(options, node)


def read_task(
    pieces: Sequence[Slice], options: SourceOptions, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """One Spark task's slices, in order (a task is all files or all url ranges)."""
    archived = [p for p in pieces if p.format == ARCHIVED]
    if archived:
        from plateau.spark.archive_reading import read_archived_slices

        yield from read_archived_slices(archived, options, target)
    files = [p for p in pieces if p.file is not None and p.format != ARCHIVED]
    if files:
        yield from read_file_slices(files, options, target)
    for piece in pieces:
        if piece.file is None:
            yield from read_remote_slice(piece, options, target)
