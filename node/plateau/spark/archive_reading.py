"""``format("plateau")`` with ``archive`` (batch and streaming): the archive read in Python.

A Python data source plans and reads in Python workers, which have no JVM and so
no S3A: they reach the archive with pyarrow's S3 client, configured by the
``archive.*`` options. ``plateau.spark.read_stream`` and ``read_topic``'s fallback
fill those from the session's ``fs.s3a.*`` settings on the driver
(``archive_frames.python_settings``), so a user still gives the S3A settings
only; options left unset fall back to the standard AWS environment
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``), as in the Spark pods ``plateau spark-conf`` sets up.

An archived slice is read like a volume's Parquet segment (``path_reading``): a
row group at a time, only the declared columns, row groups outside the time
bounds skipped. An object the manifest lists and the bucket no longer has
(expired by a lifecycle rule) is data loss (``failOnDataLoss``).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Iterator, Sequence
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from plateau.protocol.archive import ArchiveManifest, manifest_key
from plateau.protocol.values import Span
from plateau.spark.archive_plan import ArchiveListing, read_manifest
from plateau.spark.options import ArchiveS3, OptionError, SourceOptions
from plateau.spark.path_reading import parquet_slice
from plateau.spark.plan import Listing, Slice, report_loss

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=8)
def filesystem(s3: ArchiveS3) -> pafs.S3FileSystem:
    """pyarrow's S3 client for these settings (one per settings: a task reuses it)."""
    endpoint = (
        s3.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    )
    kwargs: dict[str, object] = {
        "region": s3.region or os.environ.get("AWS_REGION") or "us-east-1",
    }
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs["endpoint_override"] = parsed.netloc
        kwargs["scheme"] = parsed.scheme
        kwargs["force_virtual_addressing"] = not s3.path_style
    if s3.access_key and s3.secret_key:
        kwargs["access_key"] = s3.access_key
        kwargs["secret_key"] = s3.secret_key
        if s3.session_token:
            kwargs["session_token"] = s3.session_token
    return pafs.S3FileSystem(**kwargs)


def load_manifest(options: SourceOptions) -> ArchiveManifest:
    """The topic's archive manifest; none yet (nothing uploaded) is an empty one."""
    assert options.archive is not None
    where = f"{options.archive}/{manifest_key(options.topic)}"

    def fetch() -> bytes | None:
        try:
            with filesystem(options.archive_s3).open_input_stream(where) as f:
                data: bytes = f.read()
                return data
        except FileNotFoundError:
            return None
        except OSError as e:
            raise OptionError(f"option 'archive': cannot read s3://{where}: {e}") from None

    return read_manifest(fetch, f"s3://{where}", options.topic)


def archive_listing(options: SourceOptions, node: Listing) -> ArchiveListing:
    """``node`` listed before the manifest is read (see ``archive_frames``: no hole)."""
    fs = filesystem(options.archive_s3)

    def schema(path: str, size: int) -> pa.Schema:
        with fs.open_input_file(path) as f:
            return pq.read_schema(f)

    assert options.archive is not None
    return ArchiveListing(load_manifest(options), node, options.archive, schema)


def read_archived_slices(
    pieces: Sequence[Slice], options: SourceOptions, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    fs = filesystem(options.archive_s3)
    for piece in pieces:
        try:
            source = fs.open_input_file(piece.file or "")
        except FileNotFoundError:
            report_loss(options, piece.partition, Span(piece.start, piece.end))
            continue
        with source:
            yield from parquet_slice(pq.ParquetFile(source), piece, options, target)
