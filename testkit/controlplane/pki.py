"""The control plane's certificates: one CA, a key per component, made with openssl.

EC P-256 keys, certificates valid 825 days (the CA ten years). Each file is
made once and kept: a restarted cluster keeps its identities, and a
kubeconfig copied elsewhere stays valid.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from testkit.controlplane.layout import Layout


@dataclass(frozen=True)
class Cert:
    """A certificate signed by the cluster's CA: ``name`` is its file stem."""

    name: str
    cn: str
    org: str = ""
    sans: tuple[str, ...] = ()
    usage: str = "client"  # "server", "client" or "both"


def apiserver_certs(layout: Layout) -> list[Cert]:
    """What kube-apiserver itself needs: its serving certificate, its client
    certificate towards kubelets, and an admin for kubectl."""
    ips = ["127.0.0.1", *([layout.gateway] if layout.gateway else []), layout.api_service_ip]
    names = ["localhost", layout.node, "kubernetes", "kubernetes.default"]
    names += ["kubernetes.default.svc", "kubernetes.default.svc.cluster.local"]
    return [
        Cert(
            "apiserver",
            "kube-apiserver",
            sans=tuple(f"IP:{i}" for i in ips) + tuple(f"DNS:{n}" for n in names),
            usage="server",
        ),
        Cert("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"),
        Cert("admin", "kubernetes-admin", "system:masters"),
    ]


def cluster_certs(layout: Layout) -> list[Cert]:
    """The API server's and every other component's of the local cluster."""
    node = f"system:node:{layout.node}"
    serving = (f"IP:{layout.gateway}", "IP:127.0.0.1", f"DNS:{layout.node}", "DNS:localhost")
    return [
        *apiserver_certs(layout),
        Cert("controller-manager", "system:kube-controller-manager"),
        Cert("scheduler", "system:kube-scheduler"),
        Cert("kubelet", node, "system:nodes"),
        Cert("kubelet-serving", node, "system:nodes", serving, "server"),
        Cert("kube-proxy", "system:kube-proxy"),
        Cert("coredns", "system:coredns"),
        Cert("local-path-provisioner", "system:local-path-provisioner"),
    ]


def _openssl(*args: str | Path) -> None:
    proc = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def _ec_key(path: Path) -> None:
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", path)


def ensure_ca(pki: Path) -> None:
    """The CA and the service-account signing key pair, unless they exist."""
    pki.mkdir(parents=True, exist_ok=True)
    pki.chmod(0o700)
    if not _made(pki / "ca.crt"):
        _ec_key(pki / "ca.key")
        _openssl(
            "req", "-x509", "-new", "-key", pki / "ca.key", "-subj", "/CN=plateau-cluster-ca",
            "-days", "3650", "-sha256", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "-out", pki / "ca.crt",
        )  # fmt: skip
    if not _made(pki / "sa.key"):
        _ec_key(pki / "sa.key")
        _openssl("ec", "-in", pki / "sa.key", "-pubout", "-out", pki / "sa.pub")


def ensure_cert(pki: Path, cert: Cert) -> None:
    """``cert`` signed by the CA in ``pki``, unless it exists."""
    crt, key = pki / f"{cert.name}.crt", pki / f"{cert.name}.key"
    if _made(crt):
        return
    _ec_key(key)
    usage = {"server": "serverAuth", "client": "clientAuth", "both": "serverAuth,clientAuth"}
    ext = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usage[cert.usage]}",
    ]
    if cert.sans:
        ext.append(f"subjectAltName={','.join(cert.sans)}")
    extfile, csr = pki / f"{cert.name}.ext", pki / f"{cert.name}.csr"
    extfile.write_text("\n".join(ext) + "\n")
    subj = (f"/O={cert.org}" if cert.org else "") + f"/CN={cert.cn}"
    try:
        _openssl("req", "-new", "-key", key, "-subj", subj, "-out", csr)
        _openssl(
            "x509", "-req", "-in", csr, "-CA", pki / "ca.crt", "-CAkey", pki / "ca.key",
            "-CAcreateserial", "-days", "825", "-sha256", "-extfile", extfile, "-out", crt,
        )  # fmt: skip
    finally:
        csr.unlink(missing_ok=True)
        extfile.unlink(missing_ok=True)


def make(pki: Path, certs: list[Cert]) -> None:
    ensure_ca(pki)
    for cert in certs:
        ensure_cert(pki, cert)


def _made(path: Path) -> bool:
    return path.exists() and path.stat().st_size > 0
