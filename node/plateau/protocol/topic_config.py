"""Per-topic configuration: partitions, retention budget and segment limits.

It lives in the protocol layer because it is wire contract: what ``PUT
/admin/topics/{t}`` takes and returns, read alike by the node, the client and
the operator; storage imports it from here, never the other way round.

The admin API (``PUT /admin/topics/{t}``) takes this model as JSON with every
field optional; missing fields take the node's topic defaults. The resolved
config is stored in the manifest, so it survives restarts.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SegmentFormat = Literal["parquet", "arrow"]

MiB = 1024 * 1024
GiB = 1024 * MiB


class RetentionConfig(BaseModel):
    """How much of a topic is kept: oldest sealed segments are deleted first."""

    model_config = ConfigDict(extra="forbid")

    max_bytes: int = Field(
        default=1 * GiB, ge=0, description="Byte budget over all partitions of the topic."
    )
    max_age_seconds: int | None = Field(
        default=None, gt=0, description="Delete sealed segments whose newest record is older."
    )


class SegmentConfig(BaseModel):
    """When the open segment of a partition is sealed, and in which format."""

    model_config = ConfigDict(extra="forbid")

    format: SegmentFormat = Field(
        default="parquet",
        description="parquet: Spark-native, rows also go to a write-ahead file; "
        "arrow: write-once Arrow IPC file.",
    )
    compression: Literal["zstd", "lz4", "none"] | None = Field(
        default=None,
        description="Codec of every column of sealed segments (Parquet pages or Arrow IPC "
        "buffers); none: no column. Unset: chosen per column, each segment compressing only the "
        "columns a sample shows shrink (random values stay raw): parquet with zstd, columns "
        "that shrink by 20% (its write-ahead file with lz4, judged as an arrow segment is); "
        "arrow with lz4 on the append path, columns that shrink by 40%, "
        "and a batch is written as sent unless they save 20% of it. "
        "GET /admin/topics/{t} shows each column's codec and ratio.",
    )

    def codec(self) -> str:
        """The codec in force: the explicit one, else the format's default."""
        if self.compression is not None:
            return self.compression
        return "zstd" if self.format == "parquet" else "lz4"

    max_rows: int = Field(default=1_000_000, gt=0, description="Seal after this many rows.")
    max_bytes: int = Field(
        default=64 * MiB, gt=0, description="Seal after this many bytes of Arrow data."
    )
    max_age_seconds: float = Field(
        default=60.0, gt=0, description="Seal an open segment this old even if it is small."
    )


class ArchiveConfig(BaseModel):
    """Whether the topic's sealed segments are archived to the node's object storage.

    ``required`` (default: the same as ``enabled``) makes the archive part of
    durability: a segment leaves the local disk only once it is archived, and
    when the archive falls behind with the budget full, appends are refused
    (429, reason ``ArchiveBehind``) rather than data deleted unarchived.
    Without it retention goes on and counts the segments it deleted unarchived.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=False,
        description="Upload every sealed segment to the node's archive (archive.url).",
    )
    required: bool | None = Field(
        default=None,
        description="Keep a segment on disk until it is archived, shedding appends "
        "(429 ArchiveBehind) when the budget is full; unset: true when enabled.",
    )

    def is_required(self) -> bool:
        """Whether retention waits for the archive: ``required`` if set, else ``enabled``."""
        return self.enabled and (self.required if self.required is not None else True)


class TopicConfig(BaseModel):
    """The full, resolved configuration of a topic."""

    model_config = ConfigDict(extra="forbid")

    partitions: int = Field(
        default=1,
        ge=1,
        le=4096,
        description="Partitions named 0..N-1 exist from creation; appends may also name others.",
    )
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    segment: SegmentConfig = Field(default_factory=SegmentConfig)
    archive: ArchiveConfig = Field(default_factory=ArchiveConfig)


OWNER_FIELD_MAX = 256  # above Kubernetes' own limits (names 253, UIDs 36)


class TopicOwner(BaseModel):
    """The object that owns a topic, as the node records it (a ``PlateauTopic``).

    The node keeps one owner per topic so that two custom resources naming the
    same topic cannot both change or delete it (DESIGN.md 5.1). ``uid`` tells a
    re-created resource (same kind, namespace and name) from the one before it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str = Field(min_length=1, max_length=OWNER_FIELD_MAX, examples=["PlateauTopic"])
    namespace: str = Field(min_length=1, max_length=OWNER_FIELD_MAX, examples=["team-a"])
    name: str = Field(min_length=1, max_length=OWNER_FIELD_MAX, examples=["events"])
    uid: str = Field(min_length=1, max_length=OWNER_FIELD_MAX)

    def same_object(self, other: TopicOwner) -> bool:
        """Same kind, namespace and name: the same resource, or one re-created under its name."""
        return (self.kind, self.namespace, self.name) == (other.kind, other.namespace, other.name)


class RetentionPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_bytes: int | None = Field(default=None, ge=0)
    max_age_seconds: int | None = Field(default=None, gt=0)


class SegmentPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: SegmentFormat | None = None
    compression: Literal["zstd", "lz4", "none"] | None = None
    max_rows: int | None = Field(default=None, gt=0)
    max_bytes: int | None = Field(default=None, gt=0)
    max_age_seconds: float | None = Field(default=None, gt=0)


class ArchivePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None
    required: bool | None = None


class TopicConfigRequest(BaseModel):
    """Body of ``PUT /admin/topics/{t}``: every field optional, merged like a JSON merge patch.

    * A field left out keeps its current value (a new topic: the node's
      default), so the call is idempotent and a GitOps tool can send only what
      it manages.
    * A field set to ``null`` takes the node's default (``storage.topic_defaults``),
      as in RFC 7386: ``"max_age_seconds": null`` clears the age limit (the
      default has none), ``"segment": null`` resets every segment setting.
    * ``partitions`` never decreases: ``null`` keeps the current count, a
      smaller number is refused (409).
    * ``owner`` claims the topic for a resource (see ``plateau.storage.catalog.ownership``);
      left out, the request is an admin's and the stored owner is kept.
      ``adopt`` lets a claim take over an ownerless topic or another owner's.
    """

    model_config = ConfigDict(extra="forbid")

    partitions: int | None = Field(default=None, ge=1, le=4096)
    retention: RetentionPatch | None = None
    segment: SegmentPatch | None = None
    archive: ArchivePatch | None = None
    owner: TopicOwner | None = Field(
        default=None,
        description="The resource claiming the topic. Left out (or null): an admin's request, "
        "the stored owner is kept. A claim by another owner is refused (409 OwnerConflict) "
        "unless adopt is true; the same kind, namespace and name with a new uid reclaims it.",
    )
    adopt: bool = Field(
        default=False,
        description="With owner: take the topic over from an ownerless topic or another owner.",
    )

    def apply_to(self, base: TopicConfig, defaults: TopicConfig) -> TopicConfig:
        """Merge this request onto ``base``; ``null`` means the value in ``defaults``."""
        data = base.model_dump()
        default = defaults.model_dump()
        given = self.model_dump(exclude_unset=True)
        if self.partitions is not None:
            data["partitions"] = self.partitions
        for section in ("retention", "segment", "archive"):
            if section not in given:
                continue
            if given[section] is None:
                data[section] = default[section]
                continue
            for key, value in given[section].items():
                data[section][key] = default[section][key] if value is None else value
        return TopicConfig.model_validate(data)
