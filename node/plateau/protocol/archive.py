"""The object-storage archive's layout: the contract between the node that writes it and
every engine that reads it (plateau's Spark reader, plain ``spark.read.parquet``, DuckDB).

Layout under the node's ``archive.url`` (``s3://bucket/prefix``)::

    <prefix>/<topic>/partition=<p>/<first>-<last>.parquet   one sealed segment, Parquet
    <prefix>/<topic>/_plateau_archive.json                  the topic's archive manifest

* ``<first>`` and ``<last>`` are the segment's first and last record index
  (inclusive), zero-padded to 20 digits so that a key listing sorts by index.
  A row's index is ``<first>`` plus its position in the file, as in the node's
  own sealed segments. Keys are a pure function of (topic, partition, span), so
  a retried or repeated upload overwrites the same object, never makes a copy.
* ``partition=<p>`` is Hive-style: Spark's partition discovery gives a
  ``partition`` column. Names starting with ``_`` are hidden from Spark's and
  Hive's file listings, so the manifest never reads as data.
* The manifest object is replaced whole after each upload (an S3 PUT is
  atomic: a reader sees the old one or the new one). It lists only objects
  already uploaded and verified, so a reader that plans from it never meets a
  missing file; an object not (yet) in it is a leftover of an interrupted
  upload and is ignored.
* The node never deletes from the archive: expiry is the bucket's lifecycle
  rule. A reader that plans from the manifest and finds an object gone (expired
  meanwhile) reports it rather than skipping indexes silently.
"""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field

from plateau.protocol.errors import InvalidInput

ARCHIVE_VERSION = 1
MANIFEST_NAME = "_plateau_archive.json"
PARTITION_DIR = "partition="
INDEX_DIGITS = 20
_SEGMENT_NAME = re.compile(r"^(\d{20})-(\d{20})\.parquet$")

ArchiveState = Literal[
    "Current", "Behind", "Unauthorized", "BucketNotFound", "Unreachable", "Disabled"
]
"""A topic's archive state, as the node reports it and the operator's ``Archived``
condition carries it as its reason. ``Current``: every sealed segment is uploaded (or
the oldest waiting one was sealed less than a segment's age ago). ``Behind``: uploads
are failing or slower than seals. ``Unauthorized``: the credentials are refused (also a
read-only bucket). ``BucketNotFound``: the bucket does not exist. ``Unreachable``: the
endpoint does not answer. ``Disabled``: the topic is not archived."""


class ArchiveUrl(BaseModel):
    """``s3://bucket/prefix`` split into its parts; the prefix has no leading or
    trailing ``/`` and may be empty."""

    model_config = ConfigDict(frozen=True)

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> ArchiveUrl:
        parsed = urlparse(url)
        if parsed.scheme not in ("s3", "s3a") or not parsed.netloc:
            raise InvalidInput(f"archive url {url!r} is not s3://bucket[/prefix]")
        if parsed.query or parsed.fragment:
            raise InvalidInput(f"archive url {url!r} has a query or fragment")
        return cls(bucket=parsed.netloc, prefix=parsed.path.strip("/"))

    def root(self) -> str:
        """``bucket/prefix`` (or ``bucket``): the path a filesystem API takes."""
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def topic_root(self, topic: str) -> str:
        return f"{self.root()}/{topic}"

    def s3a(self) -> str:
        """The same location as Spark's S3A connector names it."""
        return f"s3a://{self.root()}"


def segment_name(first: int, end: int) -> str:
    """File name of the archived segment holding indexes ``[first, end)``."""
    if end <= first:
        raise ValueError(f"empty span [{first}, {end})")
    return f"{first:0{INDEX_DIGITS}d}-{end - 1:0{INDEX_DIGITS}d}.parquet"


def segment_key(topic: str, partition: str, first: int, end: int) -> str:
    """Key of an archived segment relative to the archive root (``bucket/prefix``)."""
    return f"{topic}/{PARTITION_DIR}{partition}/{segment_name(first, end)}"


def manifest_key(topic: str) -> str:
    """Key of a topic's archive manifest relative to the archive root."""
    return f"{topic}/{MANIFEST_NAME}"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """``(first, end)`` of an archived segment's file name, ``None`` for any other name."""
    match = _SEGMENT_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)) + 1


class ArchiveField(BaseModel):
    """One column of an archived segment, as Arrow names its type."""

    name: str
    type: str = Field(description="The Arrow type, as pyarrow prints it (e.g. int64, string).")
    nullable: bool = True


class ArchivedSegment(BaseModel):
    """One archived segment: ``[start, end)`` of ``partition``, at ``key``."""

    partition: str
    start: int = Field(description="First index (inclusive).")
    end: int = Field(description="End index (exclusive).")
    min_time_ms: int = Field(description="Earliest record time in the segment (epoch ms).")
    max_time_ms: int = Field(description="Latest record time in the segment (epoch ms).")
    bytes: int = Field(description="Size of the Parquet object.")
    key: str = Field(description="Object key relative to the archive root.")
    etag: str = Field(
        description="The object's ETag as the archive reported it after the upload was verified: "
        "what identifies this object's bytes (a re-upload gets a new one)."
    )
    schema_fields: list[ArchiveField] = Field(default_factory=list, alias="schema")
    archived_at: float = Field(description="When the upload was verified (epoch seconds).")

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    @property
    def rows(self) -> int:
        return self.end - self.start


class ArchiveManifest(BaseModel):
    """``<prefix>/<topic>/_plateau_archive.json``: every archived segment of a topic,
    ordered by partition then start index."""

    version: int = ARCHIVE_VERSION
    topic: str
    updated_at: float = Field(description="When this manifest was written (epoch seconds).")
    segments: list[ArchivedSegment] = Field(default_factory=list)

    def by_partition(self) -> dict[str, list[ArchivedSegment]]:
        out: dict[str, list[ArchivedSegment]] = {}
        for seg in self.segments:
            out.setdefault(seg.partition, []).append(seg)
        for segs in out.values():
            segs.sort(key=lambda s: s.start)
        return out
