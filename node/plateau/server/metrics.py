"""Prometheus metrics that only the server counts (refused appends, pages prepared ahead).

Storage's metrics are in ``plateau.storage.metrics``, below this layer; both
register in the default registry that ``/metrics`` exposes.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

APPEND_CONNECTIONS = Gauge(
    "plateau_append_connections",
    "Connections served by a thread each (server.threaded_appends; server/append_front.py)",
)
FRONT_READS = Counter(
    "plateau_front_reads",
    "Partition reads served on a connection's own thread (server.threaded_appends)",
)
APPEND_GATE_WAITING = Gauge(
    "plateau_append_gate_waiting",
    "Received appends waiting for one of server.append_concurrency slots (server/fifo_gate.py)",
)
REJECTED_APPENDS = Counter(
    "plateau_rejected_appends_total",
    "Appends refused, by reason (busy, too_large, invalid, disk_full, unauthorized, not_found)",
    ["reason"],
)

PAGES_AHEAD = Counter(
    "plateau_iterate_pages_ahead_total",
    "Topic pages prepared ahead (prepared: ready), served from that (used), or not (expired)",
    ["outcome"],
)

BODY_POOL_REGIONS = Counter(
    "plateau_body_pool_regions_total",
    "Memory regions for large append bodies: newly mapped, reused, or unmapped past the idle bound",
    ["outcome"],
)

BODY_POOL_IDLE_BYTES = Gauge(
    "plateau_body_pool_idle_bytes", "Memory kept mapped for the next large append bodies"
)

BODY_POOL_LEASED_BYTES = Gauge(
    "plateau_body_pool_leased_bytes",
    "Memory holding large append bodies that something (an open segment, a reader) still uses",
)

GC_PAUSE_SECONDS = Histogram(
    "plateau_gc_pause_seconds",
    "Python's cyclic garbage collections, by generation: each one holds the GIL, so every "
    "thread of the node waits it out (server.gc_freeze keeps the startup heap out of them)",
    ["generation"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)

GC_FROZEN_OBJECTS = Gauge(
    "plateau_gc_frozen_objects",
    "Objects made while the node started, kept out of the garbage collector's scans "
    "(server.gc_freeze)",
)
