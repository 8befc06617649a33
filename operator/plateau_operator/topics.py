"""A PlateauTopic, reconciled: its desired state pushed to the node, its status read back.

Level-based and idempotent: every call sends the whole desired state (the
node's ``PUT /admin/topics`` is idempotent), so a timer calling it again puts
back a topic the node lost (a node restarted on an empty volume).

One owner per node topic: every PUT names this PlateauTopic (namespace, name,
UID) as the owner, and the node refuses (409 ``OwnerConflict``) a topic that
another resource owns or that nobody owns (made by hand, or kept by an older
operator). The refused claimant changes nothing and its deletion never
touches the node. A PlateauTopic re-created under the same namespace and name
(GitOps recreating it) takes its retained topic back; anything else needs the
``plateau.dev/adopt: "true"`` annotation, and even then never over a
PlateauTopic that still exists.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from plateau.client import PlateauClient
from plateau.client.errors import (
    AuthError,
    BadRequestError,
    ConflictError,
    NotFoundError,
    PlateauClientError,
)
from plateau.client.units import format_bytes
from plateau.protocol.replies import Claim, TopicStatus
from plateau.protocol.topic_config import TopicConfig, TopicOwner
from plateau_operator.archive_status import archive_status
from plateau_operator.crd import ADOPT_ANNOTATION, API_VERSION, NODE_KIND, TOPIC_KIND, annotation
from plateau_operator.kube import Kube
from plateau_operator.nodeaccess import NoAccess, client_for, target
from plateau_operator.settings import OperatorSettings
from plateau_operator.spec import InvalidSpec, TopicSpec
from plateau_operator.status import Outcome, TopicReason, set_condition, topic_usage

SLOW_RETRY = 300.0  # a refusal that only a person can fix: checked again, not hammered


def owner_of(body: dict[str, Any]) -> dict[str, str]:
    meta = body["metadata"]
    return {
        "kind": TOPIC_KIND,
        "namespace": meta["namespace"],
        "name": meta["name"],
        "uid": meta["uid"],
    }


def describe(owner: TopicOwner | dict[str, Any] | None) -> str:
    """Who owns a topic, for a message (a reply's owner, or a ``ConflictError``'s)."""
    if not owner:
        return "nobody (a topic made outside the operator, or kept by an older version)"
    if isinstance(owner, TopicOwner):
        owner = owner.model_dump()
    kind, uid = owner.get("kind", TOPIC_KIND), owner.get("uid")
    return f"{kind} {owner.get('namespace')}/{owner.get('name')} (uid {uid})"


def backoff(attempt: int) -> float:
    return min(300.0, 5.0 * 2.0 ** min(attempt, 6))


def reconcile(kube: Kube, body: dict[str, Any], cfg: OperatorSettings, attempt: int = 0) -> Outcome:
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    generation = int(meta.get("generation", 0))
    conditions = (body.get("status") or {}).get("conditions")

    def outcome(ok: bool, reason: TopicReason, message: str, **extra: Any) -> Outcome:
        new = {
            "observedGeneration": generation,
            "conditions": set_condition(conditions, "Ready", ok, reason, message, generation),
        }
        return Outcome({**new, **extra.pop("status", {})}, **extra)

    def failed(reason: TopicReason, message: str, retry: float) -> Outcome:
        return outcome(False, reason, message, warning=message, retry_after=retry)

    def unarchivable(detail: str | None) -> Outcome:
        """A permanent configuration error: tried again at the resync interval only."""
        message = (
            f"spec.archive.enabled, but PlateauNode {topic.node!r} has no spec.archive: give "
            "the node an archive (bucket, credentials Secret) or set archive.enabled false"
        )
        message += f" (the node: {detail})" if detail else ""
        return outcome(False, TopicReason.ARCHIVE_NOT_CONFIGURED, message, warning=message,
                       permanent=True)  # fmt: skip

    try:
        topic = TopicSpec.parse(name, body["spec"])
    except InvalidSpec as exc:
        return outcome(False, TopicReason.INVALID, str(exc), warning=str(exc), permanent=True)
    try:
        node = kube.get(API_VERSION, NODE_KIND, topic.node, namespace)
    except ApiException as exc:
        return failed(TopicReason.NODE_UNREACHABLE, f"API server: {exc.reason}", backoff(attempt))
    if node is None:
        message = f"PlateauNode {topic.node!r} does not exist in namespace {namespace!r}"
        return outcome(False, TopicReason.NODE_NOT_FOUND, message, retry_after=30.0)
    if topic.archive and not (node.get("spec") or {}).get("archive"):
        return unarchivable(None)
    owner = owner_of(body)
    request = {**topic.admin_request(), "owner": owner}
    try:
        with client_for(target(kube, node, cfg.node_image, cfg.allow_endpoint_override)) as client:
            before = _current(client, topic.topic)  # to tell what the PUT changed
            try:
                reply = client.put_topic(topic.topic, body=request)
            except ConflictError as exc:
                if exc.reason != "OwnerConflict" or not _may_adopt(kube, body, exc.owner):
                    raise
                reply = client.put_topic(topic.topic, body={**request, "adopt": True})
            changed = before is None or config_of(before) != config_of(reply)
            # the usage before an unchanged PUT is the usage after it: no second call
            info = client.get_topic(topic.topic) if changed or before is None else before
    except ConflictError as exc:
        if exc.reason == "OwnerConflict":
            hint = "" if exc.owner else f"; annotate {ADOPT_ANNOTATION}=true to take it over"
            message = (
                f"topic {topic.topic!r} on node {topic.node!r} belongs to {describe(exc.owner)}: "
                f"this PlateauTopic changes nothing there{hint}"
            )
            return failed(TopicReason.RESOURCE_CONFLICT, message, SLOW_RETRY)
        if exc.reason == "ArchiveNotConfigured":  # the node runs without an archive yet
            return unarchivable(exc.message)
        if exc.reason == "OverBudget":
            message = f"the budget does not fit node {topic.node!r}: {exc.message}"
            return failed(TopicReason.OVER_BUDGET, message, 60.0)
        return failed(
            TopicReason.INVALID, f"node {topic.node!r} refused: {exc.message}", SLOW_RETRY
        )
    except BadRequestError as exc:
        return failed(
            TopicReason.INVALID, f"node {topic.node!r} refused: {exc.message}", SLOW_RETRY
        )
    except AuthError as exc:
        message = f"node {topic.node!r} refused the operator's token: {exc.message}"
        return failed(TopicReason.UNAUTHORIZED, message, 60.0)
    except (PlateauClientError, NoAccess, InvalidSpec) as exc:
        delay = backoff(attempt)
        message = f"node {topic.node!r} unreachable: {exc}; retrying in {delay:.0f} s"
        return failed(TopicReason.NODE_UNREACHABLE, message, delay)
    claim = reply.claim
    notes = []
    message = f"topic {topic.topic!r} on node {topic.node!r} holds its configuration"
    if claim == Claim.RECLAIMED:
        old = reply.previous_owner.uid if reply.previous_owner else None
        message = (
            f"took back its retained topic {topic.topic!r} (it belonged to uid {old}); {message}"
        )
        notes.append(("Reclaimed", message))
    elif claim == Claim.ADOPTED:
        message = f"adopted topic {topic.topic!r} from {describe(reply.previous_owner)}; {message}"
        notes.append(("Adopted", message))
    elif claim == Claim.CREATED:
        notes.append(("Created", f"created topic {topic.topic!r} on node {topic.node!r}: "
                      f"{describe_config(reply)}"))  # fmt: skip
    if before is not None and changed:
        notes.extend(change_notes(topic.topic, topic.node, before, reply))
    if claim not in (Claim.RECLAIMED, Claim.ADOPTED, Claim.CREATED):
        # a later resync keeps the message of the transition (it says how the topic came
        # to be this resource's: taken back, adopted) instead of rewriting it every time
        was: dict[str, Any] = next((c for c in conditions or [] if c.get("type") == "Ready"), {})
        if was.get("status") == "True" and was.get("reason") == TopicReason.SYNCED:
            message = str(was.get("message") or message)
    archived = archive_status({"conditions": conditions}, info.usage, generation)
    conditions = archived.pop("conditions", conditions)
    synced = {
        "topicName": topic.topic,
        "owner": {k: owner[k] for k in ("namespace", "name", "uid")},
        "usage": topic_usage(info.usage),
        **archived,
    }
    return outcome(True, TopicReason.SYNCED, message, status=synced, notes=notes,
                   node_changed=changed)  # fmt: skip


def _current(client: PlateauClient, name: str) -> TopicStatus | None:
    try:
        return client.get_topic(name)
    except NotFoundError:
        return None


CONFIG_KEYS = set(TopicConfig.model_fields)  # a reply's fields that are its configuration


def config_of(reply: TopicConfig) -> dict[str, Any]:
    """A node topic's configuration out of a GET or PUT reply (which carry more)."""
    return reply.model_dump(mode="json", include=CONFIG_KEYS)


def _flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def _shown(key: str, value: Any) -> str:
    if value is None:
        return "unset"
    if key.endswith("max_bytes") and isinstance(value, int):
        return format_bytes(value)
    return str(value)


def describe_config(reply: TopicConfig) -> str:
    flat = _flat(config_of(reply))
    n = flat.get("partitions")
    return f"{n} partition{'' if n == 1 else 's'}, budget " + _shown(
        "retention.max_bytes", flat.get("retention.max_bytes")
    )


def change_notes(
    name: str, node: str, before: TopicConfig, after: TopicConfig
) -> list[tuple[str, str]]:
    """Events for what a PUT changed: ``BudgetChanged`` (old → new), ``Configured`` (the rest)."""
    old, new = _flat(config_of(before)), _flat(config_of(after))
    notes = []
    budget = "retention.max_bytes"
    if old.get(budget) != new.get(budget):
        was, now = _shown(budget, old.get(budget)), _shown(budget, new.get(budget))
        notes.append(("BudgetChanged", f"budget of topic {name!r} on node {node!r}: {was} → {now}"))
    rest = [
        f"{key} {_shown(key, old.get(key))} → {_shown(key, new.get(key))}"
        for key in sorted(old.keys() | new.keys())
        if key != budget and old.get(key) != new.get(key)
    ]
    if rest:
        notes.append(("Configured", f"topic {name!r} on node {node!r}: " + "; ".join(rest)))
    return notes


def _may_adopt(kube: Kube, body: dict[str, Any], current: dict[str, Any] | None) -> bool:
    """Adoption needs the annotation, and never takes a topic from a PlateauTopic that exists."""
    if not annotation(body["metadata"], ADOPT_ANNOTATION):
        return False
    if not current:
        return True
    found = kube.get(
        API_VERSION, TOPIC_KIND, str(current.get("name")), str(current.get("namespace"))
    )
    return found is None or found["metadata"].get("uid") != current.get("uid")


Deletion = tuple[bool, str | None, tuple[str, str] | None]  # done, warning, Normal Event


def delete(kube: Kube, body: dict[str, Any], cfg: OperatorSettings) -> Deletion:
    """Delete the topic's data when its policy says so: (done, warning, note for an Event).

    Never blocks forever: a node that is gone or being deleted keeps the data
    and lets the PlateauTopic go; one that cannot be reached for
    ``delete_wait_seconds`` after the deletion began does the same, with a
    Warning. Only this PlateauTopic's own topic is deleted (the node checks
    the owner's UID).
    """
    meta = body["metadata"]
    try:
        topic = TopicSpec.parse(meta["name"], body["spec"])
    except InvalidSpec as exc:
        return True, f"spec unreadable ({exc}): the node's data, if any, is kept", None
    owned = ((body.get("status") or {}).get("owner") or {}).get("uid") == meta["uid"]
    if not topic.delete_data:
        kept = (
            "Retained",
            f"kept topic {topic.topic!r} and its data on node {topic.node!r} (deletionPolicy "
            "Retain): a PlateauTopic created again with this namespace and name takes it back",
        )
        return True, None, kept if owned else None
    try:
        node = kube.get(API_VERSION, NODE_KIND, topic.node, meta["namespace"])
        if node is None or node["metadata"].get("deletionTimestamp"):
            gone = (
                "Retained",
                f"node {topic.node!r} is gone or being deleted: topic {topic.topic!r} stays "
                "or goes with the node's volume claim",
            )
            return True, None, gone if owned else None
        with client_for(target(kube, node, cfg.node_image, cfg.allow_endpoint_override)) as client:
            client.delete_topic(topic.topic, owner_uid=meta["uid"])
    except NotFoundError:
        return True, None, ("Deleted", f"topic {topic.topic!r} was already gone from node "
                                       f"{topic.node!r}")  # fmt: skip
    except ConflictError as exc:
        return (
            True,
            f"topic {topic.topic!r} is not this PlateauTopic's ({describe(exc.owner)}): left alone",
            None,
        )
    except (PlateauClientError, NoAccess, ApiException, InvalidSpec) as exc:
        waited = _since(meta.get("deletionTimestamp"))
        if waited >= cfg.delete_wait_seconds:
            why = (
                f"node {topic.node!r} not reached for {waited:.0f} s ({exc}): the PlateauTopic "
                f"is released and topic {topic.topic!r} is kept on the node"
            )
            return True, why, None
        return False, None, None
    return True, None, ("Deleted", f"deleted topic {topic.topic!r} and its data on node "
                                   f"{topic.node!r}")  # fmt: skip


def _since(stamp: Any) -> float:
    if not stamp:
        return 0.0
    when = (
        stamp
        if isinstance(stamp, datetime)
        else datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    )
    return float((datetime.now(UTC) - when).total_seconds())
