"""The two ways to a topic: a data directory (``path``) or a node (``url``)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from plateau.spark.files import read_file_slice
from plateau.spark.options import SourceOptions
from plateau.spark.plan import Listing, Slice
from plateau.spark.remote import RemoteListing, read_remote_slice
from plateau.spark.volume import VolumeListing


def open_listing(options: SourceOptions) -> Listing:
    return VolumeListing(options) if options.path else RemoteListing(options)


def read_slice(piece: Slice, options: SourceOptions, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    if piece.file is not None:
        return read_file_slice(piece, options, target)
    return read_remote_slice(piece, options, target)
