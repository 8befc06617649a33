"""How the operator reaches a node's admin API: the node's own pod, with its write token.

Always through ``plateau.client``: the operator has no HTTP client of its own.
Nothing a PlateauNode's author writes can send the token elsewhere: the
operator calls the IP of the pod that the node's own StatefulSet runs
(checked through the owner references: a look-alike pod carrying the node's
labels, which the Service would also route to, is never called), in the
node's namespace. The ``plateau.dev/endpoint`` annotation (an operator run
outside the cluster, as the tests do) counts only when the operator runs
with ``allowEndpointOverride``, off by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from plateau.client import PlateauClient, RetryPolicy
from plateau_operator import resources
from plateau_operator.crd import ENDPOINT_ANNOTATION, PAUSED_ANNOTATION, annotation
from plateau_operator.kube import Kube, controller_of
from plateau_operator.spec import PORT, NodeSpec

TIMEOUT_SECONDS = 10.0


def paused(meta: dict[str, Any]) -> bool:
    return annotation(meta, PAUSED_ANNOTATION)


class NoAccess(Exception):
    """The node cannot be called now (no running pod of its own, no token): why, for status."""


@dataclass(frozen=True)
class Target:
    url: str
    token: str | None


def override(node: dict[str, Any], allow_override: bool) -> str | None:
    if not allow_override:
        return None
    value = (node["metadata"].get("annotations") or {}).get(ENDPOINT_ANNOTATION)
    return str(value) if value else None


def pod_url(sts: dict[str, Any] | None, pod: dict[str, Any] | None) -> str:
    """The node pod's own address, if that pod is the StatefulSet's; else ``NoAccess``."""
    if not sts or not pod:
        raise NoAccess("the node has no pod")
    ref = controller_of(pod)
    if ref is None or ref.get("uid") != (sts.get("metadata") or {}).get("uid"):
        raise NoAccess("the node's pod is not its StatefulSet's: not called")
    ip = (pod.get("status") or {}).get("pod_ip") or (pod.get("status") or {}).get("podIP")
    if not ip:
        raise NoAccess("the node's pod has no IP yet")
    return f"http://{ip}:{PORT}"


def write_token(kube: Kube, spec: NodeSpec, namespace: str) -> str | None:
    secret, key = resources.token_ref(spec)
    return (kube.secret_data(namespace, secret) or {}).get(key)


def target(kube: Kube, node: dict[str, Any], image: str, allow_override: bool) -> Target:
    """Where and with which token to call the node (reads the cluster); ``NoAccess`` if not."""
    namespace = node["metadata"]["namespace"]
    spec = NodeSpec.parse(node["metadata"]["name"], node["spec"], image)
    url = override(node, allow_override)
    if url is None:
        n = resources.names(spec.name)
        sts = kube.get("apps/v1", "StatefulSet", n["statefulset"], namespace)
        pod = kube.get("v1", "Pod", n["pod"], namespace)
        url = pod_url(sts, pod)
    return Target(url, write_token(kube, spec, namespace))


def client_for(t: Target) -> PlateauClient:
    # one attempt per call: the reconcile loop does the retrying, with its own backoff
    retry = RetryPolicy(max_attempts=1, connection_attempts=1, max_elapsed=TIMEOUT_SECONDS)
    return PlateauClient(t.url, token=t.token, timeout=TIMEOUT_SECONDS, retry=retry)
