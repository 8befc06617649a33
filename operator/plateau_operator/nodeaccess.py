"""How the operator reaches a node's admin API: its endpoint and token, from the cluster.

Always through ``plateau.client``: the operator has no HTTP client of its own.
The endpoint is the node's Service; the annotation ``plateau.dev/endpoint`` on
a PlateauNode overrides it (an operator running outside the cluster, or a
node outside Kubernetes).
"""

from __future__ import annotations

from typing import Any

from plateau.client import PlateauClient, RetryPolicy
from plateau_operator import resources
from plateau_operator.kube import Kube
from plateau_operator.spec import NodeSpec

API_VERSION = "plateau.dev/v1alpha1"
ENDPOINT_ANNOTATION = f"{resources.GROUP}/endpoint"
PAUSED_ANNOTATION = f"{resources.GROUP}/paused"
TIMEOUT_SECONDS = 10.0


def paused(meta: dict[str, Any]) -> bool:
    value = (meta.get("annotations") or {}).get(PAUSED_ANNOTATION, "")
    return str(value).lower() in ("true", "1", "yes")


def endpoint(node: dict[str, Any], namespace: str) -> str:
    override = (node["metadata"].get("annotations") or {}).get(ENDPOINT_ANNOTATION)
    if override:
        return str(override)
    return f"http://{resources.names(node['metadata']['name'])['service']}.{namespace}.svc:3030"


def node_client(kube: Kube, node: dict[str, Any], namespace: str, image: str) -> PlateauClient:
    """A client for the node's admin API, with its token (None until the Secret exists)."""
    spec = NodeSpec.parse(node["metadata"]["name"], node["spec"], image)
    secret, key = resources.token_ref(spec)
    token = kube.secret_value(namespace, secret, key)
    # one attempt per call: the reconcile loop does the retrying, with its own backoff
    retry = RetryPolicy(max_attempts=1, connection_attempts=1, max_elapsed=TIMEOUT_SECONDS)
    url = endpoint(node, namespace)
    return PlateauClient(url, token=token, timeout=TIMEOUT_SECONDS, retry=retry)
