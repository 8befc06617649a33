"""A topic's settings as the client and the CLI give them: one typed value, one wire form.

``TopicSettings`` is the keyword arguments of ``put_topic`` (``Unpack``), so
``client.put_topic("t", max_bytes=...)`` and the CLI's ``topic set``, which
builds a ``TopicSettings`` from its options, send the same body. A key left
out keeps the node's current value; it is a ``TypedDict`` with every key
optional because "left out" and ``None`` differ for ``max_age_seconds``
(``None`` clears the age limit). The node validates the values (the client
sends what it is given, so a bad value is the node's 400 with its message).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict


class TopicSettings(TypedDict, total=False):
    """What ``PUT /admin/topics/{t}`` changes; ``None`` (except for ``max_age_seconds``) is
    the same as leaving the key out.

    ``archive`` (``{"enabled": bool, "required": bool}``, either key optional; a
    ``"required": None`` takes the node's default) archives the topic's sealed
    segments to the node's object storage; the node refuses it (409
    ``ArchiveNotConfigured``) when it has no archive.

    ``owner`` (kind, namespace, name, uid) claims the topic for a resource;
    ``adopt`` takes it over from an ownerless topic or another owner; without
    ``owner`` the request is an admin's and leaves the owner as it is.
    """

    partitions: int | None
    max_bytes: int | None
    max_age_seconds: int | None
    segment_format: str | None
    segment_max_rows: int | None
    segment_max_bytes: int | None
    segment_max_age_seconds: float | None
    segment_compression: str | None
    owner: Mapping[str, str] | None
    adopt: bool
    archive: Mapping[str, bool | None] | None


_SEGMENT_KEYS = {
    "segment_format": "format",
    "segment_max_rows": "max_rows",
    "segment_max_bytes": "max_bytes",
    "segment_max_age_seconds": "max_age_seconds",
    "segment_compression": "compression",
}


def topic_request(settings: TopicSettings) -> dict[str, Any]:
    """Body of ``PUT /admin/topics/{t}`` holding only the settings given."""
    unknown = settings.keys() - TopicSettings.__optional_keys__
    if unknown:
        raise TypeError(f"unknown topic settings: {', '.join(sorted(unknown))}")
    body: dict[str, Any] = {}
    owner = settings.get("owner")
    if owner is not None:
        body["owner"] = dict(owner)
    if settings.get("adopt"):
        body["adopt"] = True
    partitions = settings.get("partitions")
    if partitions is not None:
        body["partitions"] = partitions
    retention: dict[str, Any] = {}
    max_bytes = settings.get("max_bytes")
    if max_bytes is not None:
        retention["max_bytes"] = max_bytes
    if "max_age_seconds" in settings:
        retention["max_age_seconds"] = settings["max_age_seconds"]
    if retention:
        body["retention"] = retention
    given: Mapping[str, object] = settings
    segment = {
        wire: given[key] for key, wire in _SEGMENT_KEYS.items() if given.get(key) is not None
    }
    if segment:
        body["segment"] = segment
    archive = settings.get("archive")
    if archive is not None:
        body["archive"] = dict(archive)
    return body
