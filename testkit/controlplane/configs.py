"""The cluster's configuration files, each built as data and written as its
component reads it (YAML, JSON, TOML; the Corefile in CoreDNS's own syntax)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from testkit.controlplane.layout import Layout

# Every component's kubeconfig is named after its certificate (pki.cluster_certs).
KUBECONFIG_USERS = (
    "controller-manager",
    "scheduler",
    "kubelet",
    "kube-proxy",
    "coredns",
    "local-path-provisioner",
)


def kubeconfig(layout: Layout, user: str, server: str | None = None) -> dict[str, Any]:
    """A kubeconfig for ``user``'s certificate, embedded so the file can be copied."""

    def data(name: str) -> str:
        return base64.b64encode((layout.pki / name).read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "plateau",
                "cluster": {
                    "server": server or layout.api_url,
                    "certificate-authority-data": data("ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": data(f"{user}.crt"),
                    "client-key-data": data(f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "plateau", "context": {"cluster": "plateau", "user": user}}],
        "current-context": "plateau",
    }


def containerd(layout: Layout) -> dict[str, Any]:
    """containerd (config version 2) with the CRI plugin, runc, and this cluster's CNI."""
    cri = {
        "sandbox_image": layout.pause_image,
        "restrict_oom_score_adj": True,
        "netns_mounts_under_state_dir": True,
        "stream_server_address": "127.0.0.1",
        "containerd": {
            "snapshotter": "overlayfs",
            "default_runtime_name": "runc",
            "runtimes": {
                "runc": {
                    "runtime_type": "io.containerd.runc.v2",
                    "options": {"SystemdCgroup": False, "Root": str(layout.run / "runc")},
                }
            },
        },
        "cni": {"bin_dir": "/usr/lib/cni", "conf_dir": str(layout.data / "cni" / "net.d")},
    }
    sock = str(layout.containerd_socket)
    return {
        "version": 2,
        "root": str(layout.data / "containerd"),
        "state": str(layout.run / "containerd"),
        "disabled_plugins": [
            "io.containerd.snapshotter.v1.aufs",
            "io.containerd.snapshotter.v1.btrfs",
            "io.containerd.snapshotter.v1.zfs",
            "io.containerd.snapshotter.v1.devmapper",
            "io.containerd.tracing.processor.v1.otlp",
            "io.containerd.internal.v1.tracing",
        ],
        "grpc": {"address": sock},
        "ttrpc": {"address": f"{sock}.ttrpc"},
        "debug": {"address": ""},
        "metrics": {"address": ""},
        "plugins": {
            "io.containerd.internal.v1.opt": {"path": str(layout.data / "containerd-opt")},
            "io.containerd.grpc.v1.cri": cri,
        },
    }


def cni(layout: Layout) -> dict[str, Any]:
    """The pods' network: one bridge, addresses from host-local, no masquerading."""
    ipam = {
        "type": "host-local",
        "ranges": [[{"subnet": layout.pod_cidr, "gateway": layout.gateway}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": str(layout.run / "cni-ipam"),
    }
    return {
        "cniVersion": "1.0.0",
        "name": "plateau",
        "plugins": [
            {
                "type": "bridge",
                "bridge": layout.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": ipam,
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet(layout: Layout) -> dict[str, Any]:
    pki, conf = layout.pki, layout.conf
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "address": layout.gateway,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local",
        "clusterDNS": [layout.dns_ip],
        "resolvConf": str(conf / "resolv.conf"),
        "podLogsDir": str(layout.data / "pod-logs"),
        "failSwapOn": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "2%",
            "imagefs.available": "2%",
            "nodefs.inodesFree": "2%",
        },
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "serializeImagePulls": False,
        "maxPods": 110,
    }


def kube_proxy(layout: Layout) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(layout.conf / "kube-proxy.kubeconfig")},
        "mode": "iptables",
        "clusterCIDR": layout.pod_cidr,
        "hostnameOverride": layout.node,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "nodePortAddresses": [f"{layout.gateway}/32"],
        "iptables": {"localhostNodePorts": False, "syncPeriod": "10s", "minSyncPeriod": "0s"},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }


def corefile(layout: Layout) -> str:
    """CoreDNS answers cluster names only; everything else is NXDOMAIN, nothing is forwarded."""
    return f"""\
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {layout.gateway}
    errors
    health 127.0.0.1:18080
    ready 127.0.0.1:18181
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {layout.conf / "coredns.kubeconfig"} plateau
        pods insecure
        ttl 5
    }}
    cache 5
}}
.:53 {{
    bind {layout.gateway}
    errors
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""


def local_path(layout: Layout) -> dict[str, Any]:
    paths = [str(layout.data / "storage")]
    return {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": paths}]}


def local_path_helper_pod(layout: Layout) -> dict[str, Any]:
    """The pod local-path-provisioner runs to make and remove a volume's directory."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "helper-pod"},
        "spec": {
            "priorityClassName": "system-node-critical",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/disk-pressure",
                    "operator": "Exists",
                    "effect": "NoSchedule",
                }
            ],
            "containers": [
                {
                    "name": "helper-pod",
                    "image": layout.busybox_image,
                    "imagePullPolicy": "Never",
                    "securityContext": {"runAsUser": 0},
                }
            ],
        },
    }


def write_cluster(layout: Layout, admin_kubeconfig: Path) -> None:
    """Every file tools/cluster's components read, from the layout and the PKI."""
    conf, net_d = layout.conf, layout.data / "cni" / "net.d"
    conf.mkdir(parents=True, exist_ok=True)
    net_d.mkdir(parents=True, exist_ok=True)
    (layout.data / "storage").mkdir(parents=True, exist_ok=True)
    for user in KUBECONFIG_USERS:
        write_private(conf / f"{user}.kubeconfig", dump_yaml(kubeconfig(layout, user)))
    write_private(admin_kubeconfig, dump_yaml(kubeconfig(layout, "admin")))
    (conf / "containerd.toml").write_text(dump_toml(containerd(layout)))
    (net_d / "10-plateau.conflist").write_text(json.dumps(cni(layout), indent=2) + "\n")
    # Pods get the cluster DNS only; nothing of the host's resolver.
    (conf / "resolv.conf").write_text(f"nameserver {layout.dns_ip}\noptions ndots:5\n")
    (conf / "kubelet.yaml").write_text(dump_yaml(kubelet(layout)))
    (conf / "kube-proxy.yaml").write_text(dump_yaml(kube_proxy(layout)))
    (conf / "Corefile").write_text(corefile(layout))
    (conf / "local-path.json").write_text(json.dumps(local_path(layout)) + "\n")
    (conf / "local-path-helper-pod.yaml").write_text(dump_yaml(local_path_helper_pod(layout)))


def write_private(path: Path, text: str) -> None:
    """A file holding a private key: readable by its owner only, from its first byte."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)


def dump_yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def dump_yaml_all(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, default_flow_style=False)


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def dump_toml(doc: Mapping[str, Any]) -> str:
    """TOML for a document of tables, strings, booleans, integers and lists of
    those (what containerd's configuration needs: no TOML writer is installed)."""
    lines: list[str] = []
    _toml_table(doc, [], lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_table(table: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    if path and (scalars or not table):
        lines.append(f"\n[{'.'.join(path)}]")
    lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items())
    for key, value in table.items():
        if isinstance(value, Mapping):
            _toml_table(value, [*path, _toml_key(key)], lines)


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}: {value!r}")
