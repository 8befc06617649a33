"""The node's JSON replies: the one definition of their shapes.

The server documents its routes with these models (``/docs``,
``/openapi.json``) and the admin routes build their replies from them; the
client parses the admin replies into them (``NodeInfo``, ``TopicStatus``,
``TopicPutReply``) and the operator reads their attributes. Hot data routes
build their JSON directly (no per-reply validation cost): ``Records``,
``TopicRecords``, ``Partitions`` and ``Inserted`` document what they send.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from plateau.protocol.archive import ArchiveState
from plateau.protocol.topic_config import TopicConfig, TopicOwner
from plateau.protocol.values import RecordStatus, Span


class ErrorReply(BaseModel):
    message: str = Field(description="What went wrong, for a human.")
    code: int = Field(description="The HTTP status, repeated.")


class ConflictReply(ErrorReply):
    """A 409: the request was valid but refused by a rule; nothing was changed."""

    reason: Literal["OverBudget", "PartitionsDecrease", "OwnerConflict", "ArchiveNotConfigured"] = (
        Field(
            description="OverBudget: a new or raised budget does not fit the node's capacity "
            "minus reserve. PartitionsDecrease: fewer partitions than the topic has. "
            "OwnerConflict: another owner holds the topic (or none, and adopt was not set). "
            "ArchiveNotConfigured: archive.enabled on a node without storage.archive.url."
        )
    )
    owner: TopicOwner | None = Field(
        default=None,
        description="OwnerConflict only: the topic's stored owner (null: ownerless topic).",
    )


class SpanModel(BaseModel):
    start: int = Field(description="First index (inclusive).")
    end: int = Field(description="End index (exclusive).")


class Inserted(BaseModel):
    span: SpanModel


class TopicName(BaseModel):
    name: str


class Topics(BaseModel):
    topics: list[TopicName]


class Partitions(BaseModel):
    partitions: dict[str, SpanModel] = Field(description="Readable span of each partition.")
    bytes: int = Field(description="Bytes the topic occupies on disk.")


class Records(BaseModel):
    span: SpanModel | None = Field(description="Indexes covered; null when nothing was read.")
    status: RecordStatus
    records: list[dict[str, Any]] = Field(
        description="One object per record. Binary values are base64 strings, timestamps "
        "ISO 8601 strings, NaN and infinities null."
    )


class TopicRecords(BaseModel):
    records: list[dict[str, Any]]
    status: RecordStatus
    next: dict[str, int] = Field(description="Cursor to send as the body of the next call.")


class PartitionArchive(BaseModel):
    """A partition's archive: what is uploaded and how far behind the local disk it is."""

    start: int | None = Field(
        default=None, description="First archived index (inclusive); null: nothing archived."
    )
    end: int | None = Field(
        default=None, description="End of the archived span (exclusive); null: nothing archived."
    )
    lag_segments: int = Field(default=0, description="Sealed segments not archived yet.")
    lag_bytes: int = Field(default=0, description="Bytes of sealed segments not archived yet.")
    lag_seconds: float = Field(
        default=0.0, description="Age of the oldest sealed segment not archived yet (0: none)."
    )


class TopicArchive(BaseModel):
    """A topic's archive as a whole; the operator's ``Archived`` condition is built from it."""

    state: ArchiveState = Field(
        description="Current, Behind, Unauthorized, BucketNotFound, "
        "Unreachable or Disabled (see plateau.protocol.archive.ArchiveState)."
    )
    message: str = Field(default="", description="Why, for a human (the last error, if any).")
    required: bool = Field(
        default=True, description="Segments stay on disk until archived (appends shed)."
    )
    url: str | None = Field(default=None, description="s3://bucket/prefix/topic")
    lag_segments: int = 0
    lag_bytes: int = 0
    lag_seconds: float = 0.0
    uploaded_segments: int = Field(default=0, description="Segments archived, in all.")
    deleted_unarchived: int = Field(
        default=0,
        description="Segments retention deleted before they were archived "
        "(only without required), since the node started.",
    )


class PartitionUsage(BaseModel):
    """One partition's readable span and what it keeps."""

    start: int
    end: int
    bytes: int
    records: int
    segments: int
    oldest_time_ms: int | None = Field(
        description="Earliest record time kept (epoch ms; from segment bounds, may be earlier)."
    )
    newest_time_ms: int | None = Field(description="Latest record time kept (epoch ms).")
    archive: PartitionArchive | None = Field(
        default=None, description="The partition's archive; null when the topic is not archived."
    )

    @property
    def span(self) -> Span:
        """The readable indexes, end-exclusive (what the engine and the data routes use)."""
        return Span(self.start, self.end)


class ColumnCompression(BaseModel):
    """How one column is stored: the codec in force and what it achieved."""

    codec: str = Field(
        description="lz4, zstd or none: the codec of the column's latest segment (chosen per "
        "column unless the topic sets segment.compression)."
    )
    raw_bytes: int = Field(
        description="The column's bytes before compression, since the node started."
    )
    stored_bytes: int = Field(description="The same bytes as written to segments.")
    ratio: float = Field(
        description="stored_bytes / raw_bytes: 1.0 uncompressed, lower is smaller."
    )


class TopicUsage(BaseModel):
    """What a topic stores now, in all and per partition."""

    bytes: int
    records: int
    oldest_time_ms: int | None
    newest_time_ms: int | None
    partitions: dict[str, PartitionUsage]
    archive: TopicArchive | None = Field(
        default=None, description="The topic's archive; null when the topic is not archived."
    )
    columns: dict[str, ColumnCompression] = Field(
        default_factory=dict,
        description="Per column, the codec in force and the ratio achieved since the node "
        "started (arrow topics: as appended; parquet topics: as sealed). Empty until data comes.",
    )


class Claim(StrEnum):
    """How a ``PUT /admin/topics/{t}`` stood to the topic's owner (the reply's ``claim``)."""

    CREATED = "created"  # the topic did not exist; the request's owner (or none) recorded
    UNOWNED = "unowned"  # no owner in the request, none stored
    ADMIN = "admin"  # no owner in the request, the stored one kept
    OWNED = "owned"  # the request's owner is the stored one
    RECLAIMED = "reclaimed"  # same kind, namespace and name, new uid: a re-created resource
    ADOPTED = "adopted"  # ``adopt``: an ownerless topic or another owner's taken over


OWNER_DOC = "The resource that owns the topic; null for an ownerless topic."


class TopicPutReply(TopicConfig):
    """The resolved configuration after a PUT, and how the request stood to the owner."""

    owner: TopicOwner | None = Field(description=OWNER_DOC)
    claim: Claim = Field(
        description="created: the topic was new (owner as sent, or none). unowned / admin: no "
        "owner in the request (an admin's), the topic has none / the stored owner is kept. "
        "owned: the request's owner holds the topic. reclaimed: same kind, namespace and name "
        "with a new uid (a re-created resource), uid replaced. adopted: adopt took over an "
        "ownerless topic or another owner's."
    )
    previous_owner: TopicOwner | None = Field(
        description="The owner before this request when it changed, else null."
    )


class TopicStatus(TopicConfig):
    """A topic's resolved configuration plus what it stores now."""

    owner: TopicOwner | None = Field(description=OWNER_DOC)
    usage: TopicUsage


class MemoryPart(BaseModel):
    used: int = Field(description="Bytes held now.")
    limit: int = Field(description="This part's share of the budget.")
    waiting: int | None = Field(
        default=None,
        description="bodies and open_segments: appends waiting for room in this part "
        "(server.inflight_wait_seconds, storage.memory_wait_seconds).",
    )


class Memory(BaseModel):
    budget_bytes: int = Field(description="storage.memory_budget_bytes in force.")
    source: str = Field(description="configured, cgroup (container limit) or machine.")
    parts: dict[str, MemoryPart] = Field(
        description="open_segments, read_cache and bodies: what each holds and may hold."
    )


class NodeInfo(BaseModel):
    """``GET /admin/node``: the node's capacity, budgets, usage and memory."""

    capacity_bytes: int = Field(description="Bytes the node may allocate to topic budgets.")
    reserve_bytes: int = Field(description="Part of capacity kept free of budgets.")
    allocated_bytes: int = Field(description="Sum of all topic budgets.")
    used_bytes: int = Field(description="Bytes stored.")
    free_disk_bytes: int = Field(description="Free space on the data volume.")
    topics: int
    memory: Memory
    topic_usage: dict[str, TopicUsage] | None = Field(
        default=None, description="Every topic's usage, with ?topics=true only."
    )


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorReply, "description": "Bad input; nothing was changed."},
    401: {"model": ErrorReply, "description": "Missing or wrong bearer token."},
    404: {"model": ErrorReply, "description": "Unknown topic."},
}
CONFLICT_RESPONSE: dict[str, Any] = {
    "model": ConflictReply,
    "description": "Refused by a rule (see reason); nothing was changed.",
}
