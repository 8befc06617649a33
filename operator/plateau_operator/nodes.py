"""A PlateauNode, reconciled in three steps: read what runs, decide, act.

``read`` gathers the node's children, claim, pod, tokens and the node's own
admin API answer; ``decide`` is a pure function from that to the children to
apply and the status to write (unit-tested without a cluster); ``act`` applies
them, and only them, as children of this PlateauNode (the token Secret as its
kept claim's: claims.py), never over an object it does not own, and says in
Events what it created or changed. Level-based: every call applies the whole desired set, and
server-side apply changes nothing when nothing changed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any

from kubernetes.client.exceptions import ApiException

from plateau.client.errors import AuthError, PlateauClientError
from plateau.client.units import format_bytes, parse_quantity
from plateau.protocol.replies import NodeInfo
from plateau_operator import resources
from plateau_operator.claims import (
    claim_is_ours,
    controller_uid,
    secret_is_ours,
    token_keeper,
    uid_of,
)
from plateau_operator.crd import FOLLOW_IMAGE_ANNOTATION, annotation
from plateau_operator.kube import Kube, NotOwned, new_token
from plateau_operator.nodeaccess import NoAccess, Target, client_for, override, pod_url
from plateau_operator.rollout import RolloutGate
from plateau_operator.serial import Key
from plateau_operator.settings import OperatorSettings, RolloutMode
from plateau_operator.spec import InvalidSpec, NodeSpec
from plateau_operator.status import NodeReason, Outcome, node_usage, set_condition

TEMPLATE_ANNOTATION = "plateau.dev/template-hash"
NOT_READY_RETRY = 15.0


@dataclass(frozen=True)
class Observed:
    """What runs now, read from the API server and the node."""

    body: dict[str, Any]
    spec: NodeSpec
    sts: dict[str, Any] | None
    pvc: dict[str, Any] | None
    pod: dict[str, Any] | None
    tokens: dict[str, str]  # the operator's Secret's values, missing keys freshly made
    write_token: str | None  # None: auth.secretRef names no such Secret or key
    secret: dict[str, Any] | None = None  # the node's token Secret as read, if any
    info: NodeInfo | None = None  # GET /admin/node, when the node answered
    info_error: PlateauClientError | NoAccess | None = None
    conflict: str | None = None  # a child's name taken by an object not ours
    archive_problem: str | None = None  # spec.archive's Secret or one of its keys is missing


@dataclass
class Plan:
    children: list[dict[str, Any]]
    remove: list[tuple[str, str, str]]  # (apiVersion, kind, name) of ours no longer wanted
    grow_claim_to: int | None
    outcome: Outcome
    claim: dict[str, Any] | None = None  # the claim as read (for messages)
    token_keeper: dict[str, Any] | None = None  # the claim that owns the token Secret
    secret_controller: str | None = None  # the UID that controls the token Secret now


def _ready_replicas(sts: dict[str, Any] | None) -> int:
    st = (sts or {}).get("status") or {}
    return int(st.get("readyReplicas") or st.get("ready_replicas") or 0)


def settled(sts: dict[str, Any] | None, template_hash: str) -> bool:
    """The StatefulSet runs ``template_hash``'s pod, and it is ready."""
    if not sts:
        return False
    meta, st = sts.get("metadata") or {}, sts.get("status") or {}
    return (
        (meta.get("annotations") or {}).get(TEMPLATE_ANNOTATION) == template_hash
        and int(st.get("observedGeneration") or 0) >= int(meta.get("generation") or 0)
        and st.get("currentRevision") == st.get("updateRevision")
        and int(st.get("updatedReplicas") or 0) >= 1
        and _ready_replicas(sts) >= 1
    )


def template_hash(sts: dict[str, Any]) -> str:
    text = json.dumps(sts["spec"]["template"], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def bound_bytes(pvc: dict[str, Any] | None) -> int | None:
    """The size of the volume a claim is bound to (``status.capacity``), None before."""
    capacity = (((pvc or {}).get("status") or {}).get("capacity") or {}).get("storage")
    return parse_quantity(str(capacity)) if capacity else None


def image_for(spec: NodeSpec, meta: dict[str, Any], sts: dict[str, Any] | None,
              cfg: OperatorSettings) -> str:  # fmt: skip
    """``spec.image``, else the operator's image, except that in ``opt-in`` rollout mode
    a running node that did not opt in keeps the image it runs."""
    if spec.image_pinned or sts is None:
        return spec.image
    if cfg.rollout is RolloutMode.OPT_IN and not annotation(meta, FOLLOW_IMAGE_ANNOTATION):
        containers = sts["spec"]["template"]["spec"]["containers"]
        return str(next(c["image"] for c in containers if c["name"] == "node"))
    return spec.image


# --------------------------------------------------------------------------- read


def read(kube: Kube, body: dict[str, Any], cfg: OperatorSettings) -> Observed:
    """Everything ``decide`` needs; raises ``InvalidSpec`` for a spec that cannot work."""
    meta = body["metadata"]
    namespace, uid = meta["namespace"], meta["uid"]
    spec = NodeSpec.parse(meta["name"], body["spec"], cfg.node_image)
    n = resources.names(spec.name)
    sts = kube.get("apps/v1", "StatefulSet", n["statefulset"], namespace)
    pvc = kube.get("v1", "PersistentVolumeClaim", n["pvc"], namespace)
    pod = kube.get("v1", "Pod", n["pod"], namespace)
    own = kube.get("v1", "Secret", n["secret"], namespace)
    conflict = None
    if own is not None and not secret_is_ours(own, uid, pvc, spec.name):
        conflict, own_data = f"Secret {n['secret']!r} exists and is not this node's", {}
    else:
        own_data = Kube.decode_secret(own) if own else {}
    if sts is None and pvc is not None and not claim_is_ours(pvc, spec.name):
        conflict = f"PersistentVolumeClaim {n['pvc']!r} exists and was not made for this node"
    tokens = {
        resources.READ_TOKEN_KEY: own_data.get(resources.READ_TOKEN_KEY) or new_token(),
    }
    if spec.token_secret is None:
        tokens[resources.TOKEN_KEY] = own_data.get(resources.TOKEN_KEY) or new_token()
        write: str | None = tokens[resources.TOKEN_KEY]
    else:
        name, key = spec.token_secret
        write = (kube.secret_data(namespace, name) or {}).get(key)
    obs = Observed(body, spec, sts, pvc, pod, tokens, write, secret=own, conflict=conflict,
                   archive_problem=_archive_problem(kube, namespace, spec))  # fmt: skip
    if conflict or _ready_replicas(sts) < 1 or write is None:
        return obs
    try:
        url = override(body, cfg.allow_endpoint_override) or pod_url(sts, pod)
        with client_for(Target(url, write)) as client:
            return replace(obs, info=client.node_info())
    except (PlateauClientError, NoAccess) as exc:
        return replace(obs, info_error=exc)


def _archive_problem(kube: Kube, namespace: str, spec: NodeSpec) -> str | None:
    """Which of spec.archive's Secret and keys is missing: only key names are looked at."""
    a = spec.archive
    if a is None:
        return None
    data = (kube.get("v1", "Secret", a.secret, namespace) or {}).get("data") or {}
    missing = [k for k in (a.access_key_id_key, a.secret_access_key_key) if k not in data]
    return (f"archive.credentialsSecret: Secret {a.secret!r} with key(s) {', '.join(missing)} "
            f"not found in the node's namespace") if missing else None  # fmt: skip


# --------------------------------------------------------------------------- decide


def desired_children(obs: Observed, cfg: OperatorSettings) -> list[dict[str, Any]]:
    """The children, StatefulSet last (it starts the pod that needs the others)."""
    spec, namespace = obs.spec, obs.body["metadata"]["namespace"]
    # the node's capacity is the volume it has, not the size asked for: a claim that
    # cannot grow (or has not yet) must not let the node promise budgets past its disk
    size = min(spec.size_bytes, bound_bytes(obs.pvc) or spec.size_bytes)
    running = replace(spec, size_bytes=size, image=image_for(spec, obs.body["metadata"],
                                                             obs.sts, cfg))  # fmt: skip
    digest = resources.token_digest(obs.write_token or "", obs.tokens[resources.READ_TOKEN_KEY])
    sts = resources.statefulset(running, namespace, digest)
    keep_claim_template(sts, obs.sts)
    sts["metadata"]["annotations"] = {TEMPLATE_ANNOTATION: template_hash(sts)}
    out = [
        resources.token_secret(running, namespace, obs.tokens),
        resources.config_map(running, namespace),
        resources.service(running, namespace),
        resources.service(running, namespace, headless=True),
    ]
    if cfg.network_policy:
        allowed = sorted({*cfg.allowed_namespaces, *spec.allowed_namespaces})
        out.append(resources.network_policy(running, namespace, cfg.pod_namespace, allowed))
    return [*out, sts]


def needs_slot(obs: Observed, sts: dict[str, Any]) -> bool:
    """True when applying ``sts`` would replace a ready pod (see rollout.py)."""
    if obs.sts is None or _ready_replicas(obs.sts) < 1:
        return False
    running = ((obs.sts.get("metadata") or {}).get("annotations") or {}).get(TEMPLATE_ANNOTATION)
    return bool(running != sts["metadata"]["annotations"][TEMPLATE_ANNOTATION])


def decide(obs: Observed, cfg: OperatorSettings, slot: bool) -> Plan:
    """The children to apply and the status to write; ``slot``: this node may roll now."""
    meta = obs.body["metadata"]
    generation = int(meta.get("generation", 0))
    conds = (obs.body.get("status") or {}).get("conditions")
    n = resources.names(obs.spec.name)
    children = desired_children(obs, cfg)
    sts = children[-1]
    wants_roll = needs_slot(obs, sts)
    if wants_roll and not slot:
        children = children[:-1]  # everything but the pod's template, until its turn
    pod_spec = (obs.pod or {}).get("spec") or {}
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "endpoint": resources.endpoint(obs.spec, meta["namespace"]),
        "pvcName": n["pvc"],
        "tokenSecret": n["secret"],
        "hostNode": pod_spec.get("nodeName") or pod_spec.get("node_name"),
        "image": next((c["image"] for c in pod_spec.get("containers") or []), None),
    }
    if obs.info is not None:
        status |= node_usage(obs.info)
    ready, reason, message = _readiness(obs)
    conds = set_condition(conds, "Ready", ready, reason, message, generation)
    if wants_roll and not slot:
        progress = (NodeReason.WAITING_FOR_ROLLOUT, "another node is rolling: one at a time")
    elif (wants_roll and slot) or (obs.sts and not settled(obs.sts, template_hash(sts))
                                   and _ready_replicas(obs.sts) >= 1):  # fmt: skip
        progress = (
            NodeReason.ROLLING_UPDATE,
            f"the node's pod is being replaced ({status['image']})",
        )
    elif not ready:
        progress = (NodeReason.STARTING, message)
    else:
        progress = (NodeReason.STABLE, "the node runs its desired pod")
    moving = progress[0] is not NodeReason.STABLE
    conds = set_condition(conds, "Progressing", moving, progress[0], progress[1], generation)
    grow = obs.spec.size_bytes if _claim_request(obs.pvc) < obs.spec.size_bytes else None
    phase = ((obs.pvc or {}).get("status") or {}).get("phase")
    if phase not in (None, "Bound", "Pending"):
        degraded = (NodeReason.VOLUME_NOT_BOUND, f"volume claim {n['pvc']} is {phase}")
    else:
        degraded = (NodeReason.HEALTHY, "no problem observed")
    bad = degraded[0] is not NodeReason.HEALTHY
    conds = set_condition(conds, "Degraded", bad, degraded[0], degraded[1], generation)
    status["conditions"] = conds
    warning = None if ready or reason is NodeReason.NOT_READY else message
    retry = None if ready else NOT_READY_RETRY
    if wants_roll and not slot:
        retry = NOT_READY_RETRY
    outcome = Outcome(status, retry_after=retry, warning=warning)
    grow = grow if phase == "Bound" else None
    keeper = token_keeper(obs.spec, obs.pvc)
    if obs.sts is None and keeper is not None and uid_of(keeper) == controller_uid(obs.secret):
        outcome.notes.append(("TokensKept", (
            f"kept the tokens of Secret {n['secret']}, retained with volume claim "
            f"{n['pvc']}: producers and consumers using them keep working"
        )))  # fmt: skip
    remove = [] if cfg.network_policy else [
        ("networking.k8s.io/v1", "NetworkPolicy", n["networkpolicy"])
    ]  # fmt: skip
    return Plan(children, remove, grow, outcome, obs.pvc, keeper, controller_uid(obs.secret))


def _readiness(obs: Observed) -> tuple[bool, NodeReason, str]:
    if obs.write_token is None and obs.spec.token_secret is not None:
        name, key = obs.spec.token_secret
        why = f"auth.secretRef: Secret {name!r} with key {key!r} not found in the node's namespace"
        return False, NodeReason.TOKEN_SECRET_MISSING, why
    if obs.archive_problem and obs.info is None:  # the pod cannot start without its keys
        return False, NodeReason.ARCHIVE_SECRET_MISSING, obs.archive_problem
    if obs.info is not None:
        return True, NodeReason.READY, "the node is ready and answers its admin API"
    if isinstance(obs.info_error, AuthError):
        return (
            False,
            NodeReason.UNAUTHORIZED,
            f"the node refused the operator's token: {obs.info_error}",
        )
    if obs.info_error is not None:
        return (
            False,
            NodeReason.NOT_READY,
            f"the node's pod is ready but its admin API did not answer: {obs.info_error}",
        )
    return False, NodeReason.NOT_READY, "waiting for the node's pod to be ready"


def _claim_request(pvc: dict[str, Any] | None) -> int:
    requests = (((pvc or {}).get("spec") or {}).get("resources") or {}).get("requests") or {}
    return parse_quantity(str(requests.get("storage", "0")))


def keep_claim_template(sts: dict[str, Any], existing: dict[str, Any] | None) -> None:
    """Send the claim template the StatefulSet was created with: the API server forbids
    changing it (found on the real cluster: growing ``storage.size`` made every later
    apply fail). A larger size reaches the claim itself (``grow_claim``)."""
    old = ((existing or {}).get("spec") or {}).get("volumeClaimTemplates") or []
    if not old:
        return
    template = sts["spec"]["volumeClaimTemplates"][0]
    template["metadata"] = {
        "name": template["metadata"]["name"],
        "labels": (old[0].get("metadata") or {}).get("labels") or {},
    }
    was = old[0].get("spec") or {}
    now = template["spec"]
    for key in ("accessModes", "storageClassName"):
        if key in was:
            now[key] = was[key]
        else:
            now.pop(key, None)
    now["resources"] = {"requests": {"storage": was["resources"]["requests"]["storage"]}}


# --------------------------------------------------------------------------- act


def act(kube: Kube, body: dict[str, Any], plan: Plan) -> Outcome:
    """Applies the plan's children as ``body``'s (the token Secret as its claim's, when
    the claim is kept); the outcome, amended by what the API said and what changed."""
    namespace, uid = body["metadata"]["namespace"], body["metadata"]["uid"]
    done: dict[str, list[str]] = {"created": [], "changed": []}
    for obj in plan.children:
        owner, also = body, ()
        if obj["kind"] == "Secret":
            keeper_uid = uid_of(plan.token_keeper) or uid_of(plan.claim)
            owner, also = plan.token_keeper or body, (uid, *([keeper_uid] if keeper_uid else []))
        change = kube.apply_owned(obj, owner, also)
        if change is not None:
            what = f"{obj['kind']} {obj['metadata']['name']}"
            keeper = plan.token_keeper
            if obj["kind"] == "Secret" and keeper and plan.secret_controller != uid_of(keeper):
                what += f" (now kept with volume claim {keeper['metadata']['name']}, as the data)"
            done[change].append(what)
    for api_version, kind, name in plan.remove:
        found = kube.get(api_version, kind, name, namespace)
        if found is not None and controller_uid(found) == uid:  # only what it made
            kube.delete(api_version, kind, name, namespace)
            done["changed"].append(f"{kind} {name} deleted")
    outcome = plan.outcome
    if done["created"]:
        outcome.notes.append(("Created", "created " + ", ".join(done["created"])))
    if done["changed"]:
        rolls = any(c.startswith("StatefulSet ") for c in done["changed"])
        tail = ": the node's pod is replaced" if rolls else ""
        outcome.notes.append(("Configured", "changed " + ", ".join(done["changed"]) + tail))
    if plan.grow_claim_to is not None:
        refusal = grow_claim(kube, body, plan.grow_claim_to, plan.claim)
        gen = int(body["metadata"].get("generation", 0))
        if refusal is not None:
            outcome.status["conditions"] = set_condition(
                outcome.status["conditions"], "Degraded", True,
                NodeReason.EXPANSION_UNSUPPORTED, refusal, gen,
            )  # fmt: skip
        else:
            claim = resources.names(body["metadata"]["name"])["pvc"]
            size = format_bytes(plan.grow_claim_to)
            outcome.notes.append(("Resized", f"asked volume claim {claim} to grow to {size}"))
    return outcome


def grow_claim(
    kube: Kube, body: dict[str, Any], size: int, pvc: dict[str, Any] | None = None
) -> str | None:
    """Grow the bound claim to ``size``; the API server's refusal as a sentence, or None.

    A StatefulSet's claim template cannot change, so the claim itself is
    patched. Whether its StorageClass allows expansion is the API server's
    call (its PersistentVolumeClaimResize admission); the node runs on at
    the old size.
    """
    namespace = body["metadata"]["namespace"]
    name = resources.names(body["metadata"]["name"])["pvc"]
    patch = {"spec": {"resources": {"requests": {"storage": str(size)}}}}
    try:
        kube.patch("v1", "PersistentVolumeClaim", name, namespace, patch)
    except ApiException as exc:
        try:
            detail = str(json.loads(exc.body or "")["message"])
        except (TypeError, ValueError, KeyError):
            detail = str(exc.reason)
        cls = (pvc or {}).get("spec", {}).get("storageClassName") or "(default)"
        return f"cannot grow volume claim {name} of StorageClass {cls}: {detail}"[:1000]
    return None


# --------------------------------------------------------------------------- all three


def reconcile(
    kube: Kube, body: dict[str, Any], cfg: OperatorSettings, gate: RolloutGate
) -> Outcome:
    meta = body["metadata"]
    key: Key = ("PlateauNode", meta["namespace"], meta["name"])
    generation = int(meta.get("generation", 0))
    conds = (body.get("status") or {}).get("conditions")
    try:
        obs = read(kube, body, cfg)
    except InvalidSpec as exc:
        conds = set_condition(conds, "Ready", False, NodeReason.INVALID, str(exc), generation)
        return Outcome({"conditions": conds, "observedGeneration": generation},
                       warning=str(exc), permanent=True)  # fmt: skip
    if obs.conflict:
        return _conflict(conds, obs.conflict, generation)
    sts = desired_children(obs, cfg)[-1]
    wants = needs_slot(obs, sts)
    slot = gate.request(key) if wants else False
    plan = decide(obs, cfg, slot)
    try:
        outcome = act(kube, body, plan)
    except NotOwned as exc:
        if slot:
            gate.done(key)
        return _conflict(conds, str(exc), generation)
    if not wants:
        # keep the slot while the pod this node was given is still on its way
        rolling = obs.sts is not None and not settled(obs.sts, template_hash(sts))
        gate.observe(key, rolling and key in gate.holders())
    return outcome


def _conflict(conds: Any, message: str, generation: int) -> Outcome:
    conds = set_condition(conds, "Ready", False, NodeReason.RESOURCE_CONFLICT, message, generation)
    return Outcome({"conditions": conds, "observedGeneration": generation},
                   retry_after=60.0, warning=message)  # fmt: skip
