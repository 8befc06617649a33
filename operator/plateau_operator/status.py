"""Conditions and status, computed as pure functions from what was observed.

Conditions have the ``metav1.Condition`` shape. ``lastTransitionTime``
changes only when a condition's status changes, so a level-based reconcile
that writes the same state every time leaves it alone (and GitOps tools and
``kubectl wait`` see a stable object).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from plateau.client.units import format_bytes
from plateau.protocol.replies import NodeInfo, TopicUsage


class TopicReason(StrEnum):
    """``Ready``'s reason on a PlateauTopic; each names who has to act."""

    SYNCED = "Synced"
    OVER_BUDGET = "OverBudget"  # the node refused the budget: lower it or grow the node
    NODE_NOT_FOUND = "NodeNotFound"
    NODE_UNREACHABLE = "NodeUnreachable"  # connection failures and 5xx: retried with backoff
    INVALID = "Invalid"  # 400/422, partitions decreasing, a spec the operator cannot read
    UNAUTHORIZED = "Unauthorized"  # 401/403: the operator's token is not the node's
    RESOURCE_CONFLICT = "ResourceConflict"  # another PlateauTopic owns the node's topic
    # archive.enabled on a node without spec.archive: the node's spec or the topic's must change
    ARCHIVE_NOT_CONFIGURED = "ArchiveNotConfigured"


class NodeReason(StrEnum):
    """Reasons of a PlateauNode's ``Ready``, ``Progressing`` and ``Degraded`` conditions."""

    READY = "NodeReady"
    NOT_READY = "NotReady"
    INVALID = "Invalid"
    RESOURCE_CONFLICT = "ResourceConflict"  # a child's name is taken by an object not ours
    TOKEN_SECRET_MISSING = "TokenSecretMissing"  # auth.secretRef names no such Secret/key
    ARCHIVE_SECRET_MISSING = "ArchiveSecretMissing"  # archive.credentialsSecret: no such Secret/key
    UNAUTHORIZED = "Unauthorized"
    ROLLING_UPDATE = "RollingUpdate"
    WAITING_FOR_ROLLOUT = "WaitingForRollout"  # another node is rolling: one at a time
    STARTING = "Starting"
    STABLE = "Stable"
    HEALTHY = "Healthy"
    EXPANSION_UNSUPPORTED = "ExpansionUnsupported"
    VOLUME_NOT_BOUND = "VolumeNotBound"


@dataclass
class Outcome:
    """What a reconcile decided: the status to write, and whether and when to try again."""

    status: dict[str, Any]
    retry_after: float | None = None  # None: done until the next change or timer
    warning: str | None = None  # the failure's sentence (a Warning Event on a transition)
    permanent: bool = False  # retrying cannot help (Invalid)
    notes: list[tuple[str, str]] = field(default_factory=list)  # Normal Events: (reason, msg)
    node_changed: bool = False  # a topic's reconcile changed its node's figures (budgets, count)


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``: a key ``new`` no
    longer has is sent as null (a merge patch would otherwise keep it: a usage's
    ``oldestTime`` gone with its last record would stay in status for good)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    out = {k: merge_patch(old.get(k), v) for k, v in new.items() if old.get(k) != v}
    return out | {k: None for k in old if k not in new}


def status_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The patch that writes ``new``'s fields over ``old``; empty when nothing changed.
    Fields ``new`` leaves out are kept (a failed reconcile keeps the last usage)."""
    return {k: merge_patch(old.get(k), v) for k, v in new.items() if old.get(k) != v}


def ready_of(status: dict[str, Any]) -> tuple[str, str]:
    """(status, reason) of the ``Ready`` condition in ``status``, ("", "") when none."""
    conds: list[dict[str, Any]] = status.get("conditions") or []
    cond: dict[str, Any] = next((c for c in conds if c.get("type") == "Ready"), {})
    return str(cond.get("status", "")), str(cond.get("reason", ""))


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[dict[str, Any]] | None,
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int,
    now: str | None = None,
) -> list[dict[str, Any]]:
    """A new list with ``type_`` set; its transition time kept unless its status changed."""
    value = "Unknown" if status is None else ("True" if status else "False")
    old = next((c for c in conditions or [] if c.get("type") == type_), None)
    changed = old is None or old.get("status") != value
    condition = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": (now or now_iso())
        if old is None or changed
        else old["lastTransitionTime"],
    }
    others = [c for c in conditions or [] if c.get("type") != type_]
    return sorted([*others, condition], key=lambda c: str(c["type"]))


def topic_usage(usage: TopicUsage) -> dict[str, Any]:
    """A topic's usage (``GET /admin/topics/{t}``'s ``usage``) as its PlateauTopic's
    ``status.usage``."""
    out: dict[str, Any] = {
        "bytes": usage.bytes,
        "used": format_bytes(usage.bytes),
        "records": usage.records,
        "partitions": {
            name: {"start": p.start, "end": p.end, "bytes": p.bytes}
            for name, p in usage.partitions.items()
        },
    }
    for ms, name in ((usage.oldest_time_ms, "oldestTime"), (usage.newest_time_ms, "newestTime")):
        if ms is not None:
            out[name] = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return out


def node_usage(info: NodeInfo) -> dict[str, Any]:
    """The node's ``GET /admin/node`` reply as PlateauNode status fields."""
    return {
        "capacityBytes": info.capacity_bytes,
        "allocatedBytes": info.allocated_bytes,
        "usedBytes": info.used_bytes,
        "allocated": format_bytes(info.allocated_bytes),
        "used": format_bytes(info.used_bytes),
        "topics": info.topics,
    }
