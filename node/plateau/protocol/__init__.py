"""The HTTP wire contract between the node and its readers, written once.

Server, Python client, benchmarks and tests import these names rather than spelling the
strings again, so a change to the contract is one edit here (and one in the JVM reader,
which ``tests/unit/test_protocol_jvm.py`` checks against this module). Import-light on
purpose: no pyarrow, no web framework, no storage, so that every layer may depend on it.
"""

from __future__ import annotations

# --- media types -----------------------------------------------------------------------
ARROW_FILE = "application/vnd.apache.arrow.file"
"""Arrow IPC file format: the binary read reply, and an append body."""
ARROW_STREAM = "application/vnd.apache.arrow.stream"
"""Arrow IPC stream format: an append body."""
JSON = "application/json"
"""JSON: an append body (records), admin replies, errors; plateau's read reply."""
JSON_RECORDS = f"{JSON}; format=pandas-records"
"""Content-Type of a JSON read reply: a bare array of records, as plateau sends it."""
JSON_ENVELOPE = f"{JSON}; format=envelope"
"""Content-Type of the opt-in JSON reply: ``{"records": [...], "status": ..., ...}``."""

# --- headers (lower case: HTTP header names are case-insensitive) ------------------------
ITERATION_STATUS_HEADER = "x-iteration-status"
"""A read reply's status: a JSON string on partition reads, ``{status, next}`` on iteration."""
SPAN_START_HEADER = "x-span-start"
"""First record index a partition read returned (absent when it returned none)."""
SPAN_END_HEADER = "x-span-end"
"""One past the last record index a partition read returned: the next ``start``."""
MAX_REQUEST_SIZE_HEADER = "x-max-request-size"
"""On a 413: the largest append body the node takes, in bytes."""
ARCHIVED_RECORDS_HEADER = "x-archived-records"
"""On a read reply: how many of its records were read from the object-storage archive
(absent when none were)."""
ACCEPT_ARROW_COMPRESSION_HEADER = "x-accept-arrow-compression"
"""On an Arrow partition read: the IPC buffer codecs the reader decodes, comma-separated
(``lz4_frame`` or ``lz4``, ``zstd``; unknown names are ignored). Batches stored compressed
with one of them may then be sent as stored. Without it no reply is compressed."""
RETRY_AFTER_HEADER = "retry-after"
"""On a 429: whole seconds to wait before retrying."""

# --- page sizes ----------------------------------------------------------------------------
DEFAULT_PAGE_SIZE = 1000
"""Rows per read reply when a request names no ``page_size``."""
MAX_PAGE_SIZE = 10_000
"""The largest ``page_size`` the node accepts; larger is a 400."""

# --- paths (OpenAPI form: ``{topic}`` and ``{partition}`` are percent-encoded names) --------
TOPICS_PATH = "/topics"
TOPIC_PATH = "/topic/{topic}"
APPEND_PATH = f"{TOPIC_PATH}/partition/{{partition}}"
READ_PARTITION_PATH = f"{APPEND_PATH}/records"
ITERATE_PATH = f"{TOPIC_PATH}/records"
ADMIN_PREFIX = "/admin"
"""The admin routes' common prefix: they need a write token."""
ADMIN_TOPIC_PATH = f"{ADMIN_PREFIX}/topics/{{topic}}"
ADMIN_NODE_PATH = f"{ADMIN_PREFIX}/node"
OK_PATH = "/ok"
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"


def server_route(path: str) -> str:
    """A path above as the server routes it: a name may hold ``/`` (sent as ``%2F``)."""
    return path.replace("{topic}", "{topic:path}").replace("{partition}", "{partition:path}")


__all__ = [
    "ADMIN_NODE_PATH",
    "ADMIN_PREFIX",
    "ADMIN_TOPIC_PATH",
    "APPEND_PATH",
    "ARCHIVED_RECORDS_HEADER",
    "ARROW_FILE",
    "ARROW_STREAM",
    "DEFAULT_PAGE_SIZE",
    "HEALTH_PATH",
    "ITERATE_PATH",
    "ITERATION_STATUS_HEADER",
    "JSON",
    "JSON_ENVELOPE",
    "JSON_RECORDS",
    "MAX_PAGE_SIZE",
    "MAX_REQUEST_SIZE_HEADER",
    "METRICS_PATH",
    "OK_PATH",
    "READY_PATH",
    "READ_PARTITION_PATH",
    "RETRY_AFTER_HEADER",
    "SPAN_END_HEADER",
    "SPAN_START_HEADER",
    "TOPICS_PATH",
    "TOPIC_PATH",
    "server_route",
]
