"""A PlateauNode, reconciled: its children applied, its status read from what really runs.

Level-based: every call applies the whole desired set (server-side apply
changes nothing when nothing changed). Status reflects the StatefulSet's,
pod's and claim's observed state and the node's own admin API, never what
was asked for.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from kubernetes.client.exceptions import ApiException

from plateau.client.errors import PlateauClientError
from plateau.client.units import parse_quantity
from plateau_operator import resources
from plateau_operator.kube import Kube, new_token
from plateau_operator.nodeaccess import endpoint, node_client
from plateau_operator.spec import InvalidSpec, NodeSpec
from plateau_operator.status import Outcome, node_usage, set_condition


def desired(spec: NodeSpec, namespace: str) -> list[dict[str, Any]]:
    return [
        resources.config_map(spec, namespace),
        resources.service(spec, namespace),
        resources.service(spec, namespace, headless=True),
        resources.statefulset(spec, namespace),
    ]


def reconcile(
    kube: Kube,
    body: dict[str, Any],
    image: str,
    adopt: Any,
) -> Outcome:
    """``adopt`` sets the owner reference (kopf.adopt), so children go with the node."""
    meta, namespace = body["metadata"], body["metadata"]["namespace"]
    generation = int(meta.get("generation", 0))
    conditions = (body.get("status") or {}).get("conditions")
    try:
        spec = NodeSpec.parse(meta["name"], body["spec"], image)
    except InvalidSpec as exc:
        conds = set_condition(conditions, "Ready", False, "Invalid", str(exc), generation)
        return Outcome({"conditions": conds}, warning=str(exc), permanent=True)
    n = resources.names(spec.name)
    if spec.token_secret is None and kube.secret_value(namespace, n["secret"], "token") is None:
        secret = resources.token_secret(spec, namespace, new_token())
        adopt(secret)
        kube.apply(secret)
    existing = kube.get("apps/v1", "StatefulSet", n["statefulset"], namespace)
    pvc = kube.get("v1", "PersistentVolumeClaim", n["pvc"], namespace) or {}
    # the node's capacity is the volume it has, not the size asked for: a claim that
    # cannot grow (or has not yet) must not let the node promise budgets past its disk
    running = replace(spec, size_bytes=min(spec.size_bytes, bound_bytes(pvc) or spec.size_bytes))
    for obj in desired(running, namespace):
        if obj["kind"] == "StatefulSet":
            keep_claim_template(obj, existing)
        adopt(obj)
        kube.apply(obj)
    sts = kube.get("apps/v1", "StatefulSet", n["statefulset"], namespace) or {}
    sts_status = sts.get("status") or {}
    ready = int(sts_status.get("ready_replicas") or sts_status.get("readyReplicas") or 0) >= 1
    updated = sts_status.get("update_revision") or sts_status.get("updateRevision")
    current = sts_status.get("current_revision") or sts_status.get("currentRevision")
    rolling = bool(updated and current and updated != current)
    pod = kube.get("v1", "Pod", f"{n['statefulset']}-0", namespace) or {}
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "endpoint": endpoint(body, namespace),
        "pvcName": n["pvc"],
        "hostNode": (pod.get("spec") or {}).get("node_name")
        or (pod.get("spec") or {}).get("nodeName"),
    }
    answered = False
    message = "waiting for the node's pod to be ready"
    if ready:
        try:
            with node_client(kube, body, namespace, image) as client:
                status |= node_usage(client.node_info() or {})
            answered = True
            message = "the node is ready and answers its admin API"
        except PlateauClientError as exc:
            message = f"the node's pod is ready but its admin API did not answer: {exc}"
    pvc_phase = (pvc.get("status") or {}).get("phase")
    expansion = expand_volume(kube, spec, namespace, pvc) if pvc_phase == "Bound" else None
    conds = set_condition(
        conditions, "Ready", answered, "NodeReady" if answered else "NotReady", message, generation
    )
    conds = set_condition(
        conds,
        "Progressing",
        rolling or not ready,
        "RollingUpdate" if rolling else ("Starting" if not ready else "Stable"),
        f"StatefulSet revision {current} -> {updated}" if rolling else message,
        generation,
    )
    if expansion is not None:
        reason, message = expansion
    elif pvc_phase not in (None, "Bound", "Pending"):
        reason, message = "VolumeNotBound", f"volume claim {n['pvc']} is {pvc_phase}"
    else:
        reason, message = "Healthy", "no problem observed"
    conds = set_condition(conds, "Degraded", reason != "Healthy", reason, message, generation)
    status["conditions"] = conds
    return Outcome(status, retry_after=None if answered else 15.0)


def bound_bytes(pvc: dict[str, Any]) -> int | None:
    """The size of the volume a claim is bound to (``status.capacity``), None before."""
    capacity = ((pvc.get("status") or {}).get("capacity") or {}).get("storage")
    return parse_quantity(str(capacity)) if capacity else None


def keep_claim_template(sts: dict[str, Any], existing: dict[str, Any] | None) -> None:
    """Send the claim template the StatefulSet was created with: the API server forbids
    changing it (found on the real cluster: growing ``storage.size`` made every later
    apply fail). A larger size reaches the claim itself (``expand_volume``)."""
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


def expand_volume(
    kube: Kube, spec: NodeSpec, namespace: str, pvc: dict[str, Any]
) -> tuple[str, str] | None:
    """Grow the bound claim to ``storage.size``; a (reason, message) when that cannot be done.

    A StatefulSet's claim template cannot change, so the claim itself is
    patched. Whether its StorageClass allows expansion is the API server's
    call (its PersistentVolumeClaimResize admission): a refusal becomes the
    ``Degraded`` condition with the server's reason, and the node runs on
    at the old size.
    """
    requests = ((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}
    current = parse_quantity(str(requests.get("storage", "0")))
    if current >= spec.size_bytes:
        return None
    name = resources.names(spec.name)["pvc"]
    body = {"spec": {"resources": {"requests": {"storage": str(spec.size_bytes)}}}}
    try:
        kube.patch("v1", "PersistentVolumeClaim", name, namespace, body)
    except ApiException as exc:
        try:
            detail = str(json.loads(exc.body or "")["message"])
        except (TypeError, ValueError, KeyError):
            detail = str(exc.reason)
        cls = (pvc.get("spec") or {}).get("storageClassName") or "(default)"
        message = f"cannot grow volume claim {name} of StorageClass {cls}: {detail}"
        return "ExpansionUnsupported", message[:1000]
    return None
