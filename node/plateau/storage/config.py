"""Storage's own config: the ``storage`` section of the node's settings.

Each layer declares the config it reads (as plateau's Rust crates do) and
``plateau.settings`` only composes the sections and loads their sources, so
the engine is built from this model without importing anything above storage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from plateau.protocol.topic_config import MiB, TopicConfig


class DurabilitySettings(BaseModel):
    """When an append is acknowledged relative to fsync.

    ``fsync`` (default): the reply is sent only after the data is fsynced;
    concurrent appends to a partition share one fsync (group commit).
    ``relaxed``: the reply is sent after the write reaches the page cache and a
    background fsync runs every ``relaxed_interval_ms``; a power loss or kernel
    crash can lose up to that window of acknowledged records (a killed node
    process loses nothing, the page cache survives it).
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["fsync", "relaxed"] = Field(
        default="fsync",
        description="fsync: acknowledge after fsync (group commit); relaxed: acknowledge "
        "after the page cache, fsync on a timer (a power cut can lose that window).",
    )
    relaxed_interval_ms: int = Field(
        default=200, gt=0, description="With relaxed durability: how often data is fsynced."
    )


class ArchiveSettings(BaseModel):
    """Where and how the node archives sealed segments (``plateau.protocol.archive``).

    Credentials: the standard AWS variables (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``) or, with
    ``credentials_file``, an AWS shared-credentials file (its ``[default]``
    profile, or ``profile``); without either, the S3 client's own chain
    (instance or pod identity). Topics opt in with ``archive.enabled``.
    """

    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(
        default=None,
        description="s3://bucket/prefix where archived topics' segments go; unset: no archive "
        "(a topic with archive.enabled is refused).",
    )
    endpoint: str | None = Field(
        default=None,
        description="S3 endpoint, e.g. http://seaweedfs:8333 or https://s3.eu-west-1."
        "amazonaws.com; unset: AWS for the region. http:// or https:// picks the scheme.",
    )
    region: str = Field(default="us-east-1", description="The bucket's region.")
    path_style: bool = Field(
        default=True,
        description="Path-style requests (endpoint/bucket/key), which S3-compatible servers "
        "(SeaweedFS, MinIO, Ceph) need; false: virtual-hosted style (bucket.endpoint/key).",
    )
    credentials_file: Path | None = Field(
        default=None,
        description="An AWS shared-credentials file (ini) to read keys from instead of the "
        "environment; re-read when uploads are refused, so a rotated Secret takes effect.",
    )
    profile: str = Field(default="default", description="The profile in credentials_file.")
    upload_concurrency: int = Field(
        default=4, ge=1, le=64, description="Segments uploaded at once (oldest first)."
    )
    retry_max_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Longest wait between attempts after a failed upload (backoff doubles "
        "from 1 s up to this).",
    )
    read_cache_bytes: int = Field(
        default=64 * MiB,
        ge=0,
        description="Memory for archived row groups read back for reads below the local disk, "
        "so consecutive pages of one archived segment fetch it once.",
    )


class StorageSettings(BaseModel):
    """The ``storage`` section: what the engine needs, and nothing of the server's.

    The engine takes this model alone, so storage never imports the node's
    whole settings tree (that tree sits above it and composes this one).
    """

    model_config = ConfigDict(extra="forbid")

    data_dir: Path = Field(
        default=Path("./data"), description="Where the manifest and segments live."
    )
    capacity_bytes: int | None = Field(
        default=None,
        gt=0,
        description="Bytes the node may allocate to topic budgets; default: the volume's size.",
    )
    reserve_fraction: float = Field(
        default=0.1,
        ge=0,
        lt=1,
        description="Part of capacity kept free of budgets for open segments and write-ahead data.",
    )
    min_free_bytes: int = Field(
        default=64 * MiB,
        ge=0,
        description="Writes are refused (503) when the volume has less free space than this.",
    )
    ballast_bytes: int = Field(
        default=1 * MiB,
        ge=0,
        description="Space held in <data>/ballast and released so that a node can recover "
        "and start on a full volume.",
    )
    retention_interval_seconds: float = Field(
        default=5.0, gt=0, description="How often retention and segment age limits are checked."
    )
    drop_written_pages: bool = Field(
        default=True,
        description="After each fsync, advise the kernel to drop the pages just written "
        "(open segments are served from memory, write-ahead files are read only by recovery). "
        "Set false on hosts with memory to spare when readers often read freshly sealed segments.",
    )
    direct_writes: bool = Field(
        default=True,
        description="Write open segments with O_DIRECT, straight to the disk, instead of "
        "through the page cache: every appended byte is fsynced before it is acknowledged, "
        "and the page cache's copy cost more CPU than the disk write (docs/ingest.md). Not "
        "with relaxed durability (acknowledged from the page cache) nor for archived topics "
        "(their uploader reads the sealed file from the cache). Filesystems without O_DIRECT "
        "(tmpfs before Linux 6.6) are written through the page cache either way.",
    )
    recycled_write_ahead_files: int = Field(
        default=4,
        ge=0,
        description="Write-ahead files of parquet topics kept (zeroed, in <data>/recycle) for "
        "the next open segments instead of deleted once their Parquet file is sealed: "
        "freeing (and, on a discard mount, discarding) 64 MiB a segment held the appends' "
        "fsyncs back "
        "(docs/ingest.md). Each kept file holds a segment's size on the volume. 0: delete "
        "them at once. Only O_DIRECT open segments reuse them.",
    )
    drop_read_pages: bool = Field(
        default=True,
        description="After decoding part of a sealed segment read through the page cache "
        "(direct_reads off, or a filesystem without O_DIRECT), advise the kernel to drop those "
        "pages (the decoded copy is cached in read_cache_bytes). Set false when several "
        "readers re-read the same history and the host has memory to spare.",
    )
    read_cache_bytes: int = Field(
        default=128 * MiB,
        ge=0,
        description="Memory for decoded row groups and batches of sealed segments, so a page "
        "that takes part of one does not decode it again; it also holds what is decoded "
        "ahead. Give it at least 3 parquet row groups (about 8 MiB each for 128-byte rows) "
        "per partition read at once.",
    )
    direct_reads: bool = Field(
        default=True,
        description="Read sealed segments (arrow batches, parquet row groups) with O_DIRECT, "
        "straight from the disk into the decoded cache, instead of through the page cache "
        "(where a history scan costs the node more CPU than the read itself: a third of it "
        "on parquet topics). Filesystems without O_DIRECT (tmpfs) are read through the page "
        "cache either way.",
    )
    decode_ahead: bool = Field(
        default=True,
        description="Decode the next row groups or batches of a sealed segment (and the first "
        "of the next segment) on a background thread while a reader goes forward through "
        "history, so that its pages do not wait for decoding. Needs read_cache_bytes.",
    )
    stored_reads: bool = Field(
        default=True,
        description="Send a partition page of an arrow topic as its segment stores it (whole "
        "record batches, neither decoded nor encoded again) when the page is whole batches of "
        "one sealed segment and the reader asks for Arrow with no time range or focus; the "
        "next page's bytes are read ahead (with decode_ahead). Batches stored compressed go "
        "out so only to readers that list their codec in x-accept-arrow-compression. Off: "
        "every page is decoded and encoded again (the same rows, span and status).",
    )
    sealer_nice: int = Field(
        default=0,
        ge=0,
        le=19,
        description="Run the sealer threads this many nice levels below the node (Linux, per "
        "thread), so that Parquet seals take the CPU that appends leave idle: lower append "
        "latency on a busy node, but on saturated cores seals fall behind and appends get "
        "more 429s (see docs/ingest.md). 0: the node's own priority.",
    )
    memory_budget_bytes: int | None = Field(
        default=None,
        gt=0,
        description="One budget for the node's data in memory: open segments, the decoded "
        "read cache and append bodies in flight (see the README: sizing memory). Unset: the "
        "container's memory limit (cgroup v2 or v1) minus memory_overhead_bytes, or without a "
        "limit a quarter of the machine's memory.",
    )
    memory_wait_seconds: float = Field(
        default=0.5,
        ge=0,
        le=60,
        description="How long an append waits for room when open segments fill their part of "
        "memory_budget_bytes (segments being sealed free it) before it gets 429. 0: refuse at "
        "once.",
    )
    memory_overhead_bytes: int = Field(
        default=640 * MiB,
        ge=0,
        description="What the process needs beside the budget (Python, libraries, allocator "
        "slack, seal and reply buffers); subtracted from the container's memory limit for the "
        "default budget. Measured at 550-600 MiB with 48 writers and 2 readers on 64 "
        "partitions (README: sizing memory).",
    )
    stall_seconds: float = Field(
        default=30.0,
        gt=0,
        description="/healthz and /readyz answer 503 when engine work (appends, reads, topic "
        "changes, seals, background ticks) is in progress and none of it finished for this "
        "long, or one operation has waited twice this long: a wedged node fails its liveness "
        "probe and is restarted.",
    )
    auto_create_topics: bool = Field(
        default=True, description="Create a topic with the defaults on its first append."
    )
    topic_defaults: TopicConfig = Field(default_factory=TopicConfig)
    durability: DurabilitySettings = Field(default_factory=DurabilitySettings)
    archive: ArchiveSettings = Field(default_factory=ArchiveSettings)
