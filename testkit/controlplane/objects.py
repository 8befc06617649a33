"""The API objects the local cluster's add-ons need (RBAC, kube-dns, the
default StorageClass), applied by tools/cluster on every start (idempotent)."""

from __future__ import annotations

from typing import Any

from testkit.controlplane.layout import Layout

RBAC = "rbac.authorization.k8s.io"
RBAC_V1 = f"{RBAC}/v1"
DNS_PORTS = [
    {"name": "dns", "port": 53, "protocol": "UDP"},
    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
]


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def _meta(name: str, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, **({"namespace": namespace} if namespace else {}), **extra}


def _role(
    kind: str, name: str, rules: list[dict[str, Any]], ns: str | None = None
) -> dict[str, Any]:
    return {"apiVersion": RBAC_V1, "kind": kind, "metadata": _meta(name, ns), "rules": rules}


def _binding(
    kind: str, name: str, role: str, subject: dict[str, Any], ns: str | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": RBAC_V1,
        "kind": kind,
        "metadata": _meta(name, ns),
        "roleRef": {"apiGroup": RBAC, "kind": kind.removesuffix("Binding"), "name": role},
        "subjects": [subject],
    }


def _user(name: str) -> dict[str, Any]:
    return {"apiGroup": RBAC, "kind": "User", "name": name}


def coredns(layout: Layout) -> list[dict[str, Any]]:
    """CoreDNS's RBAC and the kube-dns Service. CoreDNS runs on the node itself,
    on the bridge's gateway address: its endpoints are written by hand."""
    watch = ["list", "watch"]
    labels = {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
    return [
        _role(
            "ClusterRole",
            "system:coredns",
            [
                _rule([""], ["endpoints", "services", "pods", "namespaces"], watch),
                _rule(["discovery.k8s.io"], ["endpointslices"], watch),
            ],
        ),
        _binding("ClusterRoleBinding", "system:coredns", "system:coredns", _user("system:coredns")),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta("kube-dns", "kube-system", labels=labels),
            "spec": {
                "clusterIP": layout.dns_ip,
                "ports": [{**p, "targetPort": 53} for p in DNS_PORTS],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": _meta(
                "kube-dns",
                "kube-system",
                labels={"k8s-app": "kube-dns", "endpointslice.kubernetes.io/skip-mirror": "true"},
            ),
            "subsets": [
                {"addresses": [{"ip": layout.gateway, "nodeName": layout.node}], "ports": DNS_PORTS}
            ],
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": _meta(
                "kube-dns-node",
                "kube-system",
                labels={
                    "kubernetes.io/service-name": "kube-dns",
                    "endpointslice.kubernetes.io/managed-by": "plateau-cluster",
                },
            ),
            "addressType": "IPv4",
            "endpoints": [
                {
                    "addresses": [layout.gateway],
                    "conditions": {"ready": True},
                    "nodeName": layout.node,
                }
            ],
            "ports": DNS_PORTS,
        },
    ]


def network_policies() -> list[dict[str, Any]]:
    """kube-network-policies' account, as its upstream install.yaml (events: its recorder)."""
    name, ns = "kube-network-policies", "kube-system"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, ns)},
        _role(
            "ClusterRole",
            name,
            [
                _rule([""], ["pods", "namespaces", "nodes"], ["list", "watch"]),
                _rule(["networking.k8s.io"], ["networkpolicies"], ["list", "watch"]),
                _rule(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
            ],
        ),
        _binding(
            "ClusterRoleBinding",
            name,
            name,
            {"kind": "ServiceAccount", "name": name, "namespace": ns},
        ),
    ]


def local_path() -> list[dict[str, Any]]:
    """local-path-provisioner's namespace, scripts and RBAC, and (as kind's) the
    default StorageClass: bound when a pod is scheduled, deleted with its claim."""
    ns, user = "local-path-storage", "system:local-path-provisioner"
    provisioner = "local-path-provisioner"
    readable = ["nodes", "persistentvolumeclaims", "configmaps", "pods", "pods/log"]
    script = "#!/bin/sh\nset -eu\n{}"
    read = ["get", "list", "watch"]
    write = [*read, "create", "patch", "update", "delete"]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(ns)},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta("local-path-provisioner-service-account", ns),
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta("local-path-config", ns),
            "data": {
                "setup": script.format('mkdir -m 0777 -p "$VOL_DIR"'),
                "teardown": script.format('rm -rf "$VOL_DIR"'),
            },
        },
        _role(
            "ClusterRole",
            user,
            [
                _rule([""], readable, read),
                _rule([""], ["persistentvolumes"], write),
                _rule([""], ["events"], ["create", "patch"]),
                _rule(["storage.k8s.io"], ["storageclasses"], read),
            ],
        ),
        _binding("ClusterRoleBinding", user, user, _user(user)),
        _role("Role", provisioner, [_rule([""], ["pods"], write)], ns),
        _binding("RoleBinding", provisioner, provisioner, _user(user), ns),
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": _meta(
                "standard", annotations={"storageclass.kubernetes.io/is-default-class": "true"}
            ),
            "provisioner": "rancher.io/local-path",
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
        },
    ]


def bootstrap(layout: Layout) -> list[dict[str, Any]]:
    return [*coredns(layout), *network_policies(), *local_path()]
