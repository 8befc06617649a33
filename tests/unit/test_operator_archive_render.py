"""The archive's part of the operator, without a cluster: a PlateauNode's spec.archive as
the node's environment (the settings the node really loads, the keys only by reference),
a PlateauTopic's spec.archive as the admin request the node's model accepts, and the
node's archive reply as the Archived condition, status.archive and Events."""

from __future__ import annotations

from typing import Any

import pytest

from plateau.protocol.archive import ArchiveState
from plateau.protocol.replies import PartitionArchive, PartitionUsage, TopicArchive, TopicUsage
from plateau.protocol.topic_config import TopicConfigRequest
from plateau.settings import load_settings
from plateau_operator import resources
from plateau_operator.archive_status import ARCHIVED, archive_event, archive_status
from plateau_operator.nodes import template_hash
from plateau_operator.spec import InvalidSpec, NodeSpec, TopicSpec

ARCHIVE = {
    "endpoint": "http://seaweedfs.storage.svc:8333",
    "bucket": "plateau-archive",
    "prefix": "prod/eu",
    "credentialsSecret": {"name": "s3-keys"},
}


def node(**spec: Any) -> NodeSpec:
    return NodeSpec.parse("ingest", {"storage": {"size": "20Gi"}, **spec}, "img:1")


def env_of(spec: NodeSpec) -> dict[str, dict[str, Any]]:
    sts = resources.statefulset(spec, "ns")
    return {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_node_archive_becomes_settings_the_node_loads_and_keys_by_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = env_of(node(archive=ARCHIVE))
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"] == {
        "secretKeyRef": {"name": "s3-keys", "key": "AWS_ACCESS_KEY_ID"}
    }
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "s3-keys", "key": "AWS_SECRET_ACCESS_KEY"}
    }
    assert "value" not in env["AWS_ACCESS_KEY_ID"] and "value" not in env["AWS_SECRET_ACCESS_KEY"]
    # what the node's own settings loader makes of the plain values
    for name, entry in env.items():
        if name.startswith("PLATEAU_STORAGE__ARCHIVE__"):
            monkeypatch.setenv(name, entry["value"])
    archive = load_settings().storage.archive
    assert archive.url == "s3://plateau-archive/prod/eu"
    assert archive.endpoint == "http://seaweedfs.storage.svc:8333"
    assert (archive.region, archive.path_style) == ("us-east-1", True)


def test_archive_keys_region_and_style_as_given_and_none_without_archive() -> None:
    given = {**ARCHIVE, "prefix": "", "region": "eu-west-1", "pathStyle": False}
    given["credentialsSecret"] = {"name": "k", "accessKeyIdKey": "id", "secretAccessKeyKey": "sk"}
    env = env_of(node(archive=given))
    assert env["PLATEAU_STORAGE__ARCHIVE__URL"]["value"] == "s3://plateau-archive"
    assert env["PLATEAU_STORAGE__ARCHIVE__REGION"]["value"] == "eu-west-1"
    assert env["PLATEAU_STORAGE__ARCHIVE__PATH_STYLE"]["value"] == "false"
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": "k", "key": "id"}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["key"] == "sk"
    plain = env_of(node())
    assert not any(n.startswith(("PLATEAU_STORAGE__ARCHIVE", "AWS_")) for n in plain)
    with pytest.raises(InvalidSpec, match="credentialsSecret"):
        node(archive={"bucket": "abc"})  # stored before the CRD's rule: said, not a crash


def test_a_change_of_the_archive_rolls_the_node() -> None:
    """The pod's template changes, so the StatefulSet replaces the pod (and the operator's
    template hash, which the rollout gate compares, changes with it)."""
    hashes = {
        template_hash(resources.statefulset(node(**spec), "ns"))
        for spec in (
            {},
            {"archive": ARCHIVE},
            {"archive": {**ARCHIVE, "bucket": "other-bucket"}},
            {"archive": {**ARCHIVE, "credentialsSecret": {"name": "rotated-keys"}}},
        )
    }
    assert len(hashes) == 4


def topic(**archive: Any) -> TopicSpec:
    spec: dict[str, Any] = {"nodeRef": {"name": "n"}, "retention": {"maxBytes": "1Gi"}}
    if archive:
        spec["archive"] = archive
    return TopicSpec.parse("events", spec)


def test_topic_archive_is_sent_as_the_nodes_request_model_takes_it() -> None:
    for t, wire in [
        (topic(), {"enabled": False, "required": None}),
        (topic(enabled=True), {"enabled": True, "required": None}),
        (topic(enabled=True, required=False), {"enabled": True, "required": False}),
    ]:
        body = t.admin_request()
        assert body["archive"] == wire  # always sent: removing spec.archive turns it off
        assert TopicConfigRequest.model_validate(body).archive is not None
    with pytest.raises(InvalidSpec, match=r"needs spec\.archive\.enabled"):
        topic(required=True)


def usage(archive: TopicArchive | None, part: PartitionArchive | None = None) -> TopicUsage:
    p = PartitionUsage(start=0, end=10, bytes=1, records=10, segments=1, oldest_time_ms=None,
                       newest_time_ms=None, archive=part)  # fmt: skip
    return TopicUsage(bytes=1, records=10, oldest_time_ms=None, newest_time_ms=None,
                      partitions={"0": p}, archive=archive)  # fmt: skip


def test_archived_is_true_only_when_current_with_the_state_as_reason() -> None:
    ready = [{"type": "Ready", "status": "True", "reason": "Synced", "message": "ok",
              "observedGeneration": 1, "lastTransitionTime": "2026-01-01T00:00:00Z"}]  # fmt: skip
    status: dict[str, Any] = {"conditions": ready}
    states: list[tuple[ArchiveState, str]] = [
        ("Current", "True"), ("Behind", "False"), ("Unauthorized", "False"),
        ("BucketNotFound", "False"), ("Unreachable", "False"),
    ]  # fmt: skip
    for state, expected in states:
        archive = TopicArchive(state=state, message="why", url="s3://b/p/events",
                               lag_segments=2, lag_bytes=2048, lag_seconds=12.2)  # fmt: skip
        part = PartitionArchive(start=0, end=8, lag_segments=2, lag_bytes=2048, lag_seconds=12.2)
        out = archive_status(status, usage(archive, part), 3)
        cond = next(c for c in out["conditions"] if c["type"] == ARCHIVED)
        assert (cond["status"], cond["reason"]) == (expected, state)
        assert "why" in cond["message"] and "s3://b/p/events" in cond["message"]
        assert any(c["type"] == "Ready" for c in out["conditions"])  # Ready kept
        summary = out["archive"]
        assert (summary["lagSegments"], summary["lagBytes"], summary["lagSeconds"]) == (2, 2048, 13)
        assert summary["partitions"]["0"] == {"start": 0, "end": 8, "lagSegments": 2,
                                              "lagBytes": 2048, "lagSeconds": 13}  # fmt: skip
        # the same reply again changes no condition: nothing to write but the figures
        again = archive_status({**status, **out}, usage(archive, part), 3)
        assert "conditions" not in again and again["archive"] == summary


def test_a_topic_not_archived_has_no_condition_and_no_archive_status() -> None:
    current = archive_status({}, usage(TopicArchive(state="Current")), 1)
    out = archive_status(current, usage(None), 1)
    assert out["archive"] is None  # a null in the merge patch: removed
    assert out["conditions"] == []
    assert archive_status({}, usage(None), 1) == {"archive": None}  # nothing to remove


def test_events_follow_transitions_of_archived_not_its_figures() -> None:
    behind = archive_status({}, usage(TopicArchive(state="Behind", lag_seconds=5)), 1)
    later = archive_status(behind, usage(TopicArchive(state="Behind", lag_seconds=50)), 1)
    current = archive_status(behind, usage(TopicArchive(state="Current")), 1)
    event = archive_event({}, behind)
    assert event is not None and event[:2] == ("Warning", "ArchiveBehind")
    assert archive_event(behind, {**behind, **later}) is None
    event = archive_event(behind, {**behind, **current})
    assert event is not None and event[:2] == ("Normal", "ArchiveCurrent")
    assert archive_event({}, {}) is None
