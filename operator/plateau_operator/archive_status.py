"""A PlateauTopic's archive, as status: the ``Archived`` condition and ``status.archive``.

Both come from the node's own account of the topic's archive (``TopicUsage.archive``,
in ``GET /admin/topics/{t}`` and ``GET /admin/node?topics=true``), so a reconcile
and the usage poller write the same thing and a status that did not change is not
written. ``Archived`` is True only for ``Current``; its reason is the node's state
(``Behind``, ``Unauthorized``, ``BucketNotFound``, ``Unreachable``, ``Disabled``), so
``kubectl wait --for=condition=Archived`` and alerts on the reason work. A topic
that is not archived has neither the condition nor ``status.archive``.

Lag in seconds is whole seconds: the printer column shows it, and a float that
moved by milliseconds would rewrite the status on every poll for nothing.
"""

from __future__ import annotations

import math
from typing import Any

from plateau.client.units import format_bytes
from plateau.protocol.replies import PartitionArchive, TopicArchive, TopicUsage
from plateau_operator.status import set_condition

ARCHIVED = "Archived"  # the condition's type

# what each state means for whoever reads the condition, when the node sent no message
_MEANING = {
    "Current": "every sealed segment is archived",
    "Behind": "sealed segments wait to be archived",
    "Unauthorized": "the archive refused the node's keys (the PlateauNode's "
    "spec.archive.credentialsSecret)",
    "BucketNotFound": "the archive's bucket does not exist (the node never creates it)",
    "Unreachable": "the node cannot reach the archive's endpoint",
    "Disabled": "the node has no archive configured (PlateauNode spec.archive)",
}


def _seconds(value: float) -> int:
    return math.ceil(value) if value > 0 else 0


def _partition(p: PartitionArchive) -> dict[str, Any]:
    out: dict[str, Any] = {
        "lagSegments": p.lag_segments,
        "lagBytes": p.lag_bytes,
        "lagSeconds": _seconds(p.lag_seconds),
    }
    if p.start is not None and p.end is not None:
        out |= {"start": p.start, "end": p.end}
    return out


def archive_summary(archive: TopicArchive, usage: TopicUsage) -> dict[str, Any]:
    """``status.archive``: totals, and each partition's archived span and lag."""
    out: dict[str, Any] = {
        "state": archive.state,
        "required": archive.required,
        "lagSegments": archive.lag_segments,
        "lagBytes": archive.lag_bytes,
        "lag": format_bytes(archive.lag_bytes),
        "lagSeconds": _seconds(archive.lag_seconds),
        "uploadedSegments": archive.uploaded_segments,
        "deletedUnarchived": archive.deleted_unarchived,
        "partitions": {
            name: _partition(p.archive) for name, p in usage.partitions.items() if p.archive
        },
    }
    if archive.url:
        out["url"] = archive.url
    return out


def message_of(archive: TopicArchive) -> str:
    meaning = _MEANING.get(archive.state, archive.state)
    where = f" ({archive.url})" if archive.url else ""
    text = f"{meaning}{where}"
    if archive.state == "Behind":
        text += (
            f": {archive.lag_segments} segments, {format_bytes(archive.lag_bytes)}, "
            f"oldest {_seconds(archive.lag_seconds)} s"
        )
    if archive.message:
        text += f": {archive.message}"
    return text[:4000]


def archive_status(status: dict[str, Any], usage: TopicUsage, generation: int) -> dict[str, Any]:
    """The status fields that show ``usage``'s archive over ``status`` (the current one):
    ``archive`` (null: removed) and, when it changes, ``conditions``."""
    conditions: list[dict[str, Any]] = list(status.get("conditions") or [])
    archive = usage.archive
    if archive is None:
        kept = [c for c in conditions if c.get("type") != ARCHIVED]
        return {"archive": None, **({"conditions": kept} if kept != conditions else {})}
    new = set_condition(
        conditions, ARCHIVED, archive.state == "Current", archive.state, message_of(archive),
        generation,
    )  # fmt: skip
    old = next((c for c in conditions if c.get("type") == ARCHIVED), None)
    mine = next(c for c in new if c["type"] == ARCHIVED)
    same = old is not None and all(
        old.get(k) == mine[k] for k in ("status", "reason", "message", "observedGeneration")
    )
    out: dict[str, Any] = {"archive": archive_summary(archive, usage)}
    return out if same else {**out, "conditions": new}


def archived_of(status: dict[str, Any]) -> tuple[str, str, str]:
    """(status, reason, message) of ``Archived``; empty strings when there is none."""
    conds: list[dict[str, Any]] = status.get("conditions") or []
    c: dict[str, Any] = next((c for c in conds if c.get("type") == ARCHIVED), {})
    return str(c.get("status", "")), str(c.get("reason", "")), str(c.get("message", ""))


def archive_event(old: dict[str, Any], new: dict[str, Any]) -> tuple[str, str, str] | None:
    """The Event for a change of ``Archived`` between two statuses: (type, reason, message);
    None when its status and reason are the same (a new lag figure is no event)."""
    was, now = archived_of(old), archived_of(new)
    if now[:2] == was[:2] or not now[0]:
        return None
    kind = "Normal" if now[0] == "True" else "Warning"
    return kind, f"Archive{now[1]}", now[2]
