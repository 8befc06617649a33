"""The server's own config: the ``server`` and ``auth`` sections of the node's settings.

Declared beside the server that reads them; ``plateau.settings`` composes them
with storage's section into the node's one settings tree. The server takes
that tree through ``NodeConfig``, the sections it reads, so it never imports
``plateau.settings`` (which sits above it).
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from plateau.protocol import MAX_REQUEST_SIZE_HEADER
from plateau.protocol.topic_config import MiB
from plateau.storage.config import StorageSettings


class ServerSettings(BaseModel):
    """The ``server`` section: how the HTTP front listens and bounds its requests."""

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
        "would pass it waits (see inflight_wait_seconds), then gets 429 with Retry-After (a "
        "lone append is always taken).",
    )
    inflight_wait_seconds: float = Field(
        default=0.5,
        ge=0,
        le=60,
        description="How long an append whose body does not fit in max_inflight_bytes waits, "
        "in arrival order, for other bodies to be stored before it gets 429; its body is not "
        "read meanwhile. 0: refuse at once.",
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
    threaded_appends: bool = Field(
        default=True,
        description="Serve plain appends (POST /topic/{t}/partition/{p} with a Content-Length) "
        "and partition reads (GET /topic/{t}/partition/{p}/records) on a thread per "
        "connection, an append's body received straight into memory, instead of through the "
        "event loop: large Arrow appends go 1.5-1.9x as fast, parallel partition reads up to "
        "1.4x (docs/ingest.md). Every other request is served by the event loop, on the same "
        "port. false: every request through the event loop.",
    )
    append_connections: int = Field(
        default=256,
        gt=0,
        description="Connections served by a thread each (threaded_appends); further "
        "connections go through the event loop.",
    )
    append_concurrency: int = Field(
        default=4,
        gt=0,
        le=1024,
        description="Appends the connection threads (threaded_appends) decode and write at "
        "once, after their bodies arrived; the others wait in arrival order. More threads in "
        "the engine at once only contend for the GIL: with 48 writers and no bound the p99 "
        "was 2.5x the event loop's (docs/ingest.md).",
    )
    append_queue_timeout_ms: float = Field(
        default=0,
        ge=0,
        le=600_000,
        description="How long an append whose body has arrived may wait for one of the "
        "append_concurrency slots; past it the append gets 429 with Retry-After and nothing of "
        "it is stored. A node that keeps up never queues an append that long; one that "
        "cannot (more writers than its disk serves) sheds instead of letting every "
        "acknowledgement wait longer. Appends through the event loop (threaded_appends "
        "false) are not bounded by it. 0: wait as long as it takes. With 48 writers on a slow disk "
        "50-100 cut the p99 from 862 to 207-279 ms for 10-40% fewer rows (docs/ingest.md).",
    )
    gil_switch_interval_ms: float = Field(
        default=1.0,
        gt=0,
        le=100,
        description="How long a busy Python thread keeps the GIL while others wait for it "
        "(sys.setswitchinterval; Python's own default is 5). A thread back from the disk or "
        "the network waits about this long for each busy thread before it runs again: with "
        "nine busy threads in one engine a topic deletion waited over 3 s at 5 ms. Over HTTP "
        "at 4 or 48 writers rates, append p99 and admin-call latency were the same at 1 and "
        "5 ms within this machine's drift (docs/ingest.md).",
    )
    gc_freeze: bool = Field(
        default=True,
        description="Before serving, move what the node made while starting (about 120,000 "
        "objects: modules, settings, the app) out of Python's cyclic garbage collector's "
        "scans (gc.freeze). A full collection scanned all of them every few seconds under "
        "load, 60-75 ms each with the GIL held, and every request in flight waited that "
        "long: under a 1.5 GiB memory limit 48 writers' append p99 was 216-249 ms, 184 ms "
        "frozen (docs/ingest.md). The pauses are counted in plateau_gc_pause_seconds "
        "either way.",
    )
    read_pool_purge_delay_ms: int = Field(
        default=10_000,
        ge=-1,
        description="How long memory freed in the read pool (mimalloc's: direct reads of sealed "
        "segments and the row groups decoded from them) stays with the node before it goes "
        "back to the kernel (mimalloc's MIMALLOC_PURGE_DELAY; -1: never, mimalloc's own "
        "default is 10). At 10 ms a history scan gave back each decoded row group's memory "
        "and faulted it in again for the next (15,000-20,000 faults a 12M-row read of four "
        "partitions, 300 at 10 s), 15% of the node's CPU on a fresh node's first read. The "
        "read pool never holds more than read_cache_bytes and the pages in flight, so an "
        "idle node's RSS drops back this long after its last read. MIMALLOC_PURGE_DELAY in "
        "the environment wins.",
    )
    arrow_memory_pool: Literal["jemalloc", "mimalloc", "system"] = Field(
        default="jemalloc",
        description="The allocator behind every Arrow buffer the node makes (decoded "
        "segments, read replies, compressed batches). Under pyarrow's default, mimalloc, a "
        "fresh node's first read of 8M rows faulted in 2-3 thousand fresh 2 MiB pages (4-6 "
        "GiB zeroed by the kernel), under jemalloc about 200 MiB of 4 KiB ones: that read "
        "went 1.18x faster (median of 13 pairs, 0.97-1.38) with a third lower page p99, at "
        "the same ingest rate and memory under a limit (docs/ingest.md). The node sets "
        "Arrow's ARROW_DEFAULT_MEMORY_POOL from this before pyarrow loads; where pyarrow "
        "was built without the one named, the node logs a warning and Arrow keeps its own.",
    )


class AuthSettings(BaseModel):
    """The ``auth`` section: the bearer tokens the server checks (secrets, never logged)."""

    model_config = ConfigDict(extra="forbid")

    token: SecretStr | None = Field(
        default=None, description="Bearer token required for writes and admin calls."
    )
    read_token: SecretStr | None = Field(
        default=None, description="Bearer token required for reads (the write token works too)."
    )


class NodeConfig(Protocol):
    """The sections a node's server reads; ``plateau.settings.NodeSettings`` has them all.

    A protocol rather than the settings class, so the arrow points from the
    settings tree down to the server and never back.
    """

    @property
    def storage(self) -> StorageSettings: ...

    @property
    def server(self) -> ServerSettings: ...

    @property
    def auth(self) -> AuthSettings: ...
