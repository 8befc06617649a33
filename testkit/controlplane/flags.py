"""etcd's and kube-apiserver's command lines: the one definition both the local
cluster and the integration tests' API server start from."""

from __future__ import annotations

from testkit.controlplane.layout import Layout


def etcd(layout: Layout) -> list[str]:
    """A single-member etcd on loopback, plain HTTP (only the API server talks to it)."""
    peer = f"http://127.0.0.1:{layout.etcd_peer_port}"
    return [
        str(layout.bin / "etcd"),
        "--name", layout.node,
        "--data-dir", str(layout.data / "etcd"),
        "--listen-client-urls", layout.etcd_url,
        "--advertise-client-urls", layout.etcd_url,
        "--listen-peer-urls", peer,
        "--initial-advertise-peer-urls", peer,
        "--initial-cluster", f"{layout.node}={peer}",
        "--initial-cluster-state", "new",
        "--listen-metrics-urls", "",
        "--quota-backend-bytes", str(2 * 1024**3),
        "--snapshot-count", "10000",
        "--log-level", "warn",
    ]  # fmt: skip


# The service-account tokens' issuer and audience, as a kubeadm cluster's.
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"


def apiserver(layout: Layout) -> list[str]:
    """kube-apiserver on loopback with the certificates of ``pki.apiserver_certs``.

    Admission: the defaults (PodSecurity among them: namespaces'
    pod-security.kubernetes.io labels are enforced) plus NodeRestriction.
    Authorization: Node, then RBAC; anonymous requests reach only what RBAC
    grants system:anonymous (health and discovery). On SIGTERM it drains its
    requests (new ones get 429 + Retry-After) and then gives open watches 2 s,
    not the request timeout (60 s): a restart takes seconds.
    """
    pki = layout.pki
    args = [
        str(layout.bin / "kube-apiserver"),
        f"--etcd-servers={layout.etcd_url}",
        "--bind-address=127.0.0.1",
        f"--secure-port={layout.api_port}",
        f"--service-cluster-ip-range={layout.service_cidr}",
        "--service-node-port-range=30000-32767",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        "--anonymous-auth=true",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--api-audiences={SA_ISSUER}",
        "--profiling=false",
        "--event-ttl=30m",
        "--v=1",
        "--shutdown-send-retry-after=true",
    ]
    if layout.gateway:
        # Pods reach the API through the bridge's address (tools/cluster forwards it).
        args.insert(4, f"--advertise-address={layout.gateway}")
    return args
