"""A PlateauTopic, reconciled: its desired state pushed to the node, its status read back.

Level-based and idempotent: every call sends the whole desired state (the
node's ``PUT /admin/topics`` is idempotent), so a timer calling it again puts
back a topic the node lost (a node restarted on an empty volume). The outcome
says what the status becomes and whether and when to try again.
"""

from __future__ import annotations

from typing import Any

from plateau.client.errors import ConflictError, NotFoundError, PlateauClientError
from plateau_operator.kube import Kube
from plateau_operator.nodeaccess import API_VERSION, node_client
from plateau_operator.spec import InvalidSpec, TopicSpec
from plateau_operator.status import (
    Outcome,
    TopicReason,
    now_iso,
    set_condition,
    topic_usage,
)

DELETE_ATTEMPTS = 5  # then a deleted PlateauTopic lets go, keeping the data


def reconcile(
    kube: Kube,
    name: str,
    namespace: str,
    spec: dict[str, Any],
    status: dict[str, Any],
    generation: int,
    image: str,
    attempt: int = 0,
) -> Outcome:
    conditions = status.get("conditions")

    def outcome(ok: bool, reason: TopicReason, message: str, **extra: Any) -> Outcome:
        new = {
            "observedGeneration": generation,
            "conditions": set_condition(conditions, "Ready", ok, reason, message, generation),
        }
        return Outcome({**new, **extra.pop("status", {})}, **extra)

    try:
        topic = TopicSpec.parse(name, spec)
    except InvalidSpec as exc:
        return outcome(False, TopicReason.INVALID, str(exc), warning=str(exc), permanent=True)
    node = kube.get(API_VERSION, "PlateauNode", topic.node, namespace)
    if node is None:
        message = f"PlateauNode {topic.node!r} does not exist in namespace {namespace!r}"
        return outcome(False, TopicReason.NODE_NOT_FOUND, message, retry_after=30.0)
    try:
        with node_client(kube, node, namespace, image) as client:
            client.put_topic(topic.topic, body=topic.admin_request())
            info = client.get_topic(topic.topic) or {}
    except ConflictError as exc:
        message = f"the budget does not fit node {topic.node!r}: {exc}"
        return outcome(False, TopicReason.OVER_BUDGET, message, warning=message, retry_after=60.0)
    except PlateauClientError as exc:
        delay = min(300.0, 5.0 * 2 ** min(attempt, 6))  # capped exponential backoff
        message = f"node {topic.node!r} unreachable: {exc}; retrying in {delay:.0f} s"
        return outcome(False, TopicReason.NODE_UNREACHABLE, message, retry_after=delay)
    synced = {"topicName": topic.topic, "lastSyncTime": now_iso(), "usage": topic_usage(info)}
    message = f"topic {topic.topic!r} on node {topic.node!r} holds its configuration"
    return outcome(True, TopicReason.SYNCED, message, status=synced)


def delete(
    kube: Kube, name: str, namespace: str, spec: dict[str, Any], image: str, attempt: int
) -> bool:
    """Delete the topic's data when its policy says so. True when done (or given up).

    Never blocks forever: a node that is gone (or unreachable for several
    tries, as when its namespace is being deleted too) keeps the data and lets
    the PlateauTopic go.
    """
    try:
        topic = TopicSpec.parse(name, spec)
    except InvalidSpec:
        return True
    if not topic.delete_data:
        return True
    node = kube.get(API_VERSION, "PlateauNode", topic.node, namespace)
    if node is None or node["metadata"].get("deletionTimestamp"):
        return True
    try:
        with node_client(kube, node, namespace, image) as client:
            client.delete_topic(topic.topic)
    except NotFoundError:
        return True  # already gone
    except PlateauClientError:
        return attempt >= DELETE_ATTEMPTS
    return True
