"""The Kubernetes objects a ``PlateauNode`` becomes: pure functions, tested without a cluster.

StatefulSet (one replica, its volume from a claim template), a Service, a
headless Service (the StatefulSet's), a ConfigMap with the node's settings
and a Secret with its token. Every object carries the operator's own labels
only, never the custom resource's: GitOps tools track their objects by labels
(Argo CD by ``app.kubernetes.io/instance``), and copying those would make
them prune what the operator made. A settings change rolls the pod through a
checksum annotation.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import yaml

from plateau.protocol import HEALTH_PATH, READY_PATH
from plateau_operator.crd import CHECKSUM_ANNOTATION, GROUP
from plateau_operator.spec import DATA_DIR, PORT, NodeSpec

CONFIG_FILE = "node.yaml"
CONFIG_DIR = "/etc/plateau"
TOKEN_KEY = "token"  # the write token: producers and the operator
READ_TOKEN_KEY = "readToken"  # the read token: consumers (Spark, plateau read)
UID = 10001  # the image's plateau user
GRACE_SECONDS = 60  # the node seals its open segments on SIGTERM


def labels(node: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "plateau-node",
        "app.kubernetes.io/managed-by": "plateau-operator",
        f"{GROUP}/node": node,
    }


def selector(node: str) -> dict[str, str]:
    return {f"{GROUP}/node": node}


def names(node: str) -> dict[str, str]:
    """Names of the children; the claim is the StatefulSet's (template ``data``, ordinal 0)."""
    base = f"plateau-{node}"
    return {
        "statefulset": base,
        "service": base,
        "headless": f"{base}-headless",
        "configmap": f"{base}-config",
        "secret": f"{base}-token",
        "networkpolicy": base,
        "pod": f"{base}-0",
        "pvc": f"data-{base}-0",
    }


def _meta(name: str, node: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels(node)}


def config_map(spec: NodeSpec, namespace: str) -> dict[str, Any]:
    text = yaml.safe_dump(spec.node_config(), sort_keys=True)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(names(spec.name)["configmap"], spec.name, namespace),
        "data": {CONFIG_FILE: text},
    }


def token_secret(spec: NodeSpec, namespace: str, tokens: dict[str, str]) -> dict[str, Any]:
    """The operator's Secret of the node: the read token, and the write token unless the
    node names a Secret of its own for it (``auth.secretRef``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(names(spec.name)["secret"], spec.name, namespace),
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(tokens.items())},
    }


def network_policy(
    spec: NodeSpec, namespace: str, operator_namespace: str, allowed: list[str]
) -> dict[str, Any]:
    """Ingress to the node's port from its namespace, the operator's, and the allowed ones.

    Namespaces are matched by ``kubernetes.io/metadata.name``, which the API
    server sets on every namespace and nobody can change: a namespace cannot
    claim another's name to get in.
    """
    spaces = sorted({namespace, *([operator_namespace] if operator_namespace else []), *allowed})
    peers = [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}} for ns in spaces
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(names(spec.name)["networkpolicy"], spec.name, namespace),
        "spec": {
            "podSelector": {"matchLabels": selector(spec.name)},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": peers, "ports": [{"port": PORT, "protocol": "TCP"}]}],
        },
    }


def token_ref(spec: NodeSpec) -> tuple[str, str]:
    """(Secret, key) that holds the node's write token."""
    return spec.token_secret or (names(spec.name)["secret"], TOKEN_KEY)


def token_digest(write: str, read: str) -> str:
    """Of the tokens' values: a rotated or re-created Secret rolls the node (the pod reads
    its tokens from the environment at start, so only a new pod sees new ones)."""
    return hashlib.sha256(f"{write}\0{read}".encode()).hexdigest()[:16]


def service(spec: NodeSpec, namespace: str, headless: bool = False) -> dict[str, Any]:
    n = names(spec.name)
    body: dict[str, Any] = {
        "selector": selector(spec.name),
        "ports": [{"name": "http", "port": PORT, "targetPort": "http"}],
    }
    if headless:
        body |= {"clusterIP": "None", "publishNotReadyAddresses": True}
    meta = _meta(n["headless" if headless else "service"], spec.name, namespace)
    # The chart's ServiceMonitor scrapes the api Service only: each node once.
    meta["labels"]["app.kubernetes.io/component"] = "peers" if headless else "api"
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": body}


def endpoint(spec: NodeSpec, namespace: str) -> str:
    return f"http://{names(spec.name)['service']}.{namespace}.svc:{PORT}"


def archive_env(spec: NodeSpec) -> list[dict[str, Any]]:
    """The node's ``storage.archive`` settings, and its S3 keys by reference to the user's
    Secret (``secretKeyRef``: the kubelet resolves them at the pod's start; the operator
    never reads them). In the environment, not the settings file, so the ConfigMap stays
    free of anything about credentials; being in the pod template, a change rolls the node."""
    a = spec.archive
    if a is None:
        return []
    prefix = "PLATEAU_STORAGE__ARCHIVE__"
    env: list[dict[str, Any]] = [{"name": f"{prefix}URL", "value": a.url}]
    if a.endpoint:
        env.append({"name": f"{prefix}ENDPOINT", "value": a.endpoint})
    env += [
        {"name": f"{prefix}REGION", "value": a.region},
        {"name": f"{prefix}PATH_STYLE", "value": "true" if a.path_style else "false"},
        {
            "name": "AWS_ACCESS_KEY_ID",
            "valueFrom": {"secretKeyRef": {"name": a.secret, "key": a.access_key_id_key}},
        },
        {
            "name": "AWS_SECRET_ACCESS_KEY",
            "valueFrom": {"secretKeyRef": {"name": a.secret, "key": a.secret_access_key_key}},
        },
        # keys come from the Secret: no instance-metadata lookup (slow off AWS) at start
        {"name": "AWS_EC2_METADATA_DISABLED", "value": "true"},
    ]
    return env


def checksum(config: dict[str, Any], extra: str = "") -> str:
    """Of everything the pod reads at start that is not in its template (settings, token ref)."""
    text = json.dumps(config, sort_keys=True) + extra
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def statefulset(spec: NodeSpec, namespace: str, tokens: str = "") -> dict[str, Any]:
    """``tokens`` is ``token_digest`` of the tokens the pod will read."""
    n = names(spec.name)
    secret, key = token_ref(spec)
    probe = {"httpGet": {"path": HEALTH_PATH, "port": "http"}}
    container: dict[str, Any] = {
        "name": "node",
        "image": spec.image,
        "args": ["node", "--config", f"{CONFIG_DIR}/{CONFIG_FILE}"],
        "ports": [{"name": "http", "containerPort": PORT}],
        "env": [
            {
                "name": "PLATEAU_AUTH__TOKEN",
                "valueFrom": {"secretKeyRef": {"name": secret, "key": key}},
            },
            {
                "name": "PLATEAU_AUTH__READ_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": n["secret"], "key": READ_TOKEN_KEY}},
            },
            *archive_env(spec),
        ],
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_DIR},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        # as the README's "Probes": a wedged engine fails liveness (storage.stall_seconds)
        "startupProbe": {
            "httpGet": {"path": READY_PATH, "port": "http"},
            "periodSeconds": 2,
            "failureThreshold": 900,
        },
        "livenessProbe": {**probe, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        "readinessProbe": {
            "httpGet": {"path": READY_PATH, "port": "http"},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 2,
        },
        "resources": spec.resources,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    if spec.pull_policy:
        container["imagePullPolicy"] = spec.pull_policy
    pod_spec: dict[str, Any] = {
        # No Docker-link variables: a Service named plateau-* would otherwise put
        # PLATEAU_*_PORT=tcp://... into the node's environment, where its settings live.
        "enableServiceLinks": False,
        # the node never calls the API server: no credential in the pod to steal
        "automountServiceAccountToken": False,
        "containers": [container],
        "terminationGracePeriodSeconds": GRACE_SECONDS,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "fsGroup": UID,
            # chown the volume only when its root is not the node's yet, not on every start
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumes": [
            {"name": "config", "configMap": {"name": n["configmap"]}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
        ],
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = spec.node_selector
    if spec.tolerations:
        pod_spec["tolerations"] = spec.tolerations
    if spec.affinity:
        pod_spec["affinity"] = spec.affinity
    claim: dict[str, Any] = {
        "metadata": {"name": "data", "labels": labels(spec.name)},
        "spec": {
            "accessModes": spec.access_modes,
            "resources": {"requests": {"storage": str(spec.size_bytes)}},
        },
    }
    if spec.storage_class:
        claim["spec"]["storageClassName"] = spec.storage_class
    digest = checksum(spec.node_config(), f"{secret}/{key}/{tokens}")
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(n["statefulset"], spec.name, namespace),
        "spec": {
            "replicas": 1,
            "serviceName": n["headless"],
            "podManagementPolicy": "OrderedReady",
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector(spec.name)},
            "template": {
                "metadata": {
                    "labels": labels(spec.name),
                    "annotations": {CHECKSUM_ANNOTATION: digest},
                },
                "spec": pod_spec,
            },
            "volumeClaimTemplates": [claim],
            # The StatefulSet goes with its PlateauNode (owner reference); its
            # claim stays unless spec.retainVolume is false.
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Retain" if spec.retain_volume else "Delete",
                "whenScaled": "Retain",
            },
        },
    }
