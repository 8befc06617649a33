"""The node's settings: one tree of config structs, each field with an explicit default.

Sources, lowest to highest precedence: defaults, a YAML file (``--config`` or
``PLATEAU_CONFIG``), environment variables ``PLATEAU_<SECTION>__<FIELD>``
(for example ``PLATEAU_STORAGE__DATA_DIR``), then command-line flags. Every
field is documented in the README's configuration table.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from plateau.protocol import MAX_REQUEST_SIZE_HEADER
from plateau.protocol.topic_config import MiB, TopicConfig

_config_file: ContextVar[str | None] = ContextVar("plateau_config_file", default=None)


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


class StorageSettings(BaseModel):
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
    drop_read_pages: bool = Field(
        default=True,
        description="After decoding part of a sealed segment for a reader, advise the "
        "kernel to drop those pages (the decoded copy is cached in read_cache_bytes). Set false "
        "when several readers re-read the same history and the host has memory to spare.",
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
        description="Read sealed arrow segments with O_DIRECT, straight from the disk into the "
        "decoded cache, instead of through the page cache (where a history scan costs the "
        "node more CPU than the read itself). Filesystems without O_DIRECT (tmpfs) are read "
        "through the page cache either way.",
    )
    decode_ahead: bool = Field(
        default=True,
        description="Decode the next row groups or batches of a sealed segment (and the first "
        "of the next segment) on a background thread while a reader goes forward through "
        "history, so that its pages do not wait for decoding. Needs read_cache_bytes.",
    )
    memory_budget_bytes: int | None = Field(
        default=None,
        gt=0,
        description="One budget for the node's data in memory: open segments, the decoded "
        "read cache and append bodies in flight (see the README: sizing memory). Unset: the "
        "container's memory limit (cgroup v2 or v1) minus memory_overhead_bytes, or without a "
        "limit a quarter of the machine's memory.",
    )
    memory_overhead_bytes: int = Field(
        default=512 * MiB,
        ge=0,
        description="What the process needs beside the budget (Python, libraries, seal and "
        "reply buffers); subtracted from the container's memory limit for the default budget.",
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


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bind: str = Field(default="127.0.0.1:3030", description="HOST:PORT to listen on.")
    max_request_bytes: int = Field(
        default=32 * MiB,
        gt=0,
        description=f"Larger append bodies get 413 with {MAX_REQUEST_SIZE_HEADER}.",
    )
    max_inflight_bytes: int = Field(
        default=128 * MiB,
        gt=0,
        description="Append bodies held in memory at once, over all clients; an append that "
        "would pass it gets 429 with Retry-After (a lone append is always taken).",
    )
    iterate_ahead: bool = Field(
        default=True,
        description="After a topic page that has more to read, prepare the page for its next "
        "cursor in the background; it is used if asked for within 2 s (it may lag the topic by "
        "that much, never at the end of the iteration).",
    )
    max_page_bytes: int = Field(
        default=16 * MiB, gt=0, description="A read reply stops (ByteLimited) past this size."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Log verbosity."
    )


class AuthSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: SecretStr | None = Field(
        default=None, description="Bearer token required for writes and admin calls."
    )
    read_token: SecretStr | None = Field(
        default=None, description="Bearer token required for reads (the write token works too)."
    )


class NodeSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="PLATEAU_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    storage: StorageSettings = Field(default_factory=StorageSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config_file = _config_file.get() or os.environ.get("PLATEAU_CONFIG")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        return tuple(sources)


def load_settings(config_file: Path | None = None, **overrides: Any) -> NodeSettings:
    """Build settings from all sources; ``overrides`` are command-line values (nested dicts)."""
    if config_file is None:
        env_file = os.environ.get("PLATEAU_CONFIG")
        config_file = Path(env_file) if env_file else None
    if config_file is not None and not config_file.is_file():
        raise FileNotFoundError(f"config file {config_file} does not exist")
    token = _config_file.set(str(config_file) if config_file else None)
    try:
        return NodeSettings(**overrides)
    finally:
        _config_file.reset(token)
