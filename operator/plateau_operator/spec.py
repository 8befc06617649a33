"""The custom resources' specs, read into typed values once, at the edge.

The API server has already checked shapes and CEL rules (``crds/``); what
remains is turning Kubernetes spellings (quantities, durations) into the
node's units, with the same parsers the ``plateau`` command uses
(``plateau.client.units``). A spec that still does not make sense raises
``InvalidSpec`` with a message for the ``Invalid`` condition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from plateau.client.units import parse_duration, parse_quantity
from plateau_operator.crd import NODE_KIND
from plateau_operator.serial import Key

DEFAULT_IMAGE = "localhost/plateau:dev"
DATA_DIR = "/data"
PORT = 3030


class InvalidSpec(ValueError):
    """The resource cannot be reconciled as written; retrying will not help."""


def _bytes(value: Any, field: str) -> int:
    try:
        return value if isinstance(value, int) else parse_quantity(str(value))
    except ValueError as exc:
        raise InvalidSpec(f"{field}: {exc}") from exc


def _seconds(value: Any, field: str) -> float:
    try:
        return parse_duration(str(value))
    except ValueError as exc:
        raise InvalidSpec(f"{field}: {exc}") from exc


def segment_settings(segment: dict[str, Any], field: str) -> dict[str, Any]:
    """A CR's ``segment`` as the node's segment config; what it leaves out is None."""
    return {
        "format": segment.get("format"),
        "compression": segment.get("compression"),
        "max_rows": segment.get("maxRows"),
        "max_bytes": _bytes(segment["maxBytes"], f"{field}.maxBytes")
        if "maxBytes" in segment
        else None,
        "max_age_seconds": _seconds(segment["maxAge"], f"{field}.maxAge")
        if "maxAge" in segment
        else None,
    }


@dataclass(frozen=True)
class TopicSpec:
    node: str
    topic: str
    partitions: int
    max_bytes: int
    max_age_seconds: int | None
    segment: dict[str, Any]
    delete_data: bool
    archive: bool = False  # spec.archive.enabled
    archive_required: bool | None = None  # spec.archive.required; None: the node's default

    @classmethod
    def parse(cls, name: str, spec: dict[str, Any]) -> TopicSpec:
        retention = spec.get("retention") or {}
        if "maxBytes" not in retention:
            raise InvalidSpec("spec.retention.maxBytes is required")
        age = retention.get("maxAge")
        archive = spec.get("archive") or {}
        required = archive.get("required")
        if required is not None and not archive.get("enabled"):
            # the CRD refuses it too; an object stored before that rule gets this
            raise InvalidSpec("spec.archive.required needs spec.archive.enabled: true")
        return cls(
            node=spec["nodeRef"]["name"],
            topic=spec.get("topicName") or name,
            partitions=int(spec.get("partitions", 1)),
            max_bytes=_bytes(retention["maxBytes"], "spec.retention.maxBytes"),
            max_age_seconds=math.ceil(_seconds(age, "spec.retention.maxAge")) if age else None,
            segment=segment_settings(spec.get("segment") or {}, "spec.segment"),
            delete_data=spec.get("deletionPolicy", "Retain") == "Delete",
            archive=bool(archive.get("enabled", False)),
            archive_required=None if required is None else bool(required),
        )

    def admin_request(self) -> dict[str, Any]:
        """The ``PUT /admin/topics/{t}`` body: every field the CR manages, explicitly.

        A field the CR leaves out is sent as null, which the node reads as its
        default: removing a field from the manifest reverts it on the node.
        """
        return {
            "partitions": self.partitions,
            "retention": {"max_bytes": self.max_bytes, "max_age_seconds": self.max_age_seconds},
            "segment": self.segment,
            "archive": {"enabled": self.archive, "required": self.archive_required},
        }


@dataclass(frozen=True)
class ArchiveSpec:
    """``PlateauNode.spec.archive``: the bucket, and the Secret its keys are read from."""

    bucket: str
    prefix: str
    endpoint: str | None
    region: str
    path_style: bool
    secret: str  # the Secret's name, in the node's namespace
    access_key_id_key: str
    secret_access_key_key: str

    @classmethod
    def parse(cls, archive: dict[str, Any]) -> ArchiveSpec:
        creds = archive.get("credentialsSecret") or {}
        if not archive.get("bucket") or not creds.get("name"):
            # the CRD requires both; an object stored before those rules gets this
            raise InvalidSpec("spec.archive needs bucket and credentialsSecret.name")
        return cls(
            bucket=str(archive["bucket"]),
            prefix=str(archive.get("prefix") or "").strip("/"),
            endpoint=archive.get("endpoint") or None,
            region=str(archive.get("region") or "us-east-1"),
            path_style=bool(archive.get("pathStyle", True)),
            secret=str(creds["name"]),
            access_key_id_key=str(creds.get("accessKeyIdKey") or "AWS_ACCESS_KEY_ID"),
            secret_access_key_key=str(creds.get("secretAccessKeyKey") or "AWS_SECRET_ACCESS_KEY"),
        )

    @property
    def url(self) -> str:
        """``s3://bucket/prefix``, the node's ``storage.archive.url``."""
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    size_bytes: int
    storage_class: str | None
    access_modes: list[str]
    image: str
    pull_policy: str | None
    resources: dict[str, Any]
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]
    affinity: dict[str, Any]
    durability: str | None
    reserve_fraction: float | None
    segment: dict[str, Any]
    token_secret: tuple[str, str] | None  # (name, key) of a user's Secret
    retain_volume: bool = True  # the claim outlives the PlateauNode
    allowed_namespaces: tuple[str, ...] = ()  # NetworkPolicy: who else may connect
    image_pinned: bool = False  # spec.image set: the node does not follow the operator's
    archive: ArchiveSpec | None = None  # spec.archive: where sealed segments are archived

    @classmethod
    def parse(cls, name: str, spec: dict[str, Any], default_image: str) -> NodeSpec:
        storage = spec["storage"]
        settings = spec.get("settings") or {}
        ref = (spec.get("auth") or {}).get("secretRef")
        modes = list(storage.get("accessModes") or ["ReadWriteOnce"])
        if "ReadWriteOncePod" in modes:
            # the CRD refuses it too; an object stored before that rule gets this
            raise InvalidSpec(
                "spec.storage.accessModes: ReadWriteOncePod stops Spark's executors from "
                "mounting the node's volume read-only next to it; use ReadWriteOnce"
            )
        return cls(
            name=name,
            size_bytes=_bytes(storage["size"], "spec.storage.size"),
            storage_class=storage.get("storageClassName"),
            access_modes=modes,
            image=spec.get("image") or default_image,
            pull_policy=spec.get("imagePullPolicy"),
            resources=spec.get("resources") or {},
            node_selector=spec.get("nodeSelector") or {},
            tolerations=spec.get("tolerations") or [],
            affinity=spec.get("affinity") or {},
            durability=settings.get("durability"),
            reserve_fraction=settings.get("reserveFraction"),
            segment=segment_settings(settings.get("segment") or {}, "spec.settings.segment"),
            token_secret=(ref["name"], ref.get("key", "token")) if ref else None,
            retain_volume=bool(spec.get("retainVolume", True)),
            allowed_namespaces=tuple((spec.get("network") or {}).get("allowedNamespaces") or ()),
            image_pinned=bool(spec.get("image")),
            archive=ArchiveSpec.parse(spec["archive"]) if spec.get("archive") else None,
        )

    def node_config(self) -> dict[str, Any]:
        """The node's settings file (``plateau node --config``): YAML of this dict."""
        storage: dict[str, Any] = {
            "data_dir": DATA_DIR,
            "capacity_bytes": self.size_bytes,
            "auto_create_topics": False,  # topics come from PlateauTopics only
        }
        if self.reserve_fraction is not None:
            storage["reserve_fraction"] = self.reserve_fraction
        if self.durability is not None:
            storage["durability"] = {"mode": self.durability}
        segment = {k: v for k, v in self.segment.items() if v is not None}
        if segment:
            storage["topic_defaults"] = {"segment": segment}
        return {"storage": storage, "server": {"bind": f"0.0.0.0:{PORT}"}}


def topic_node_key(topic: dict[str, Any]) -> Key | None:
    """The key of the PlateauNode a PlateauTopic body names (None without a ``nodeRef``):
    read leniently, since it also serves bodies that failed validation."""
    meta, spec = topic.get("metadata") or {}, topic.get("spec") or {}
    node = (spec.get("nodeRef") or {}).get("name")
    return (NODE_KIND, str(meta.get("namespace")), str(node)) if node else None
