"""tools/cluster's entry to the launch data: ``python -m testkit.controlplane
[LAYOUT OPTIONS] COMMAND``.

  pki              make the CA and every component's certificate (kept if present)
  configs          write the kubeconfigs and every component's configuration file
  objects          print the add-ons' API objects as YAML (for kubectl apply -f -)
  args COMPONENT   print etcd's or kube-apiserver's command line, one word a line
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from testkit.controlplane import configs, flags, objects, pki
from testkit.controlplane.layout import Layout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testkit.controlplane", description=__doc__)
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--bin", type=Path, required=True)
    p.add_argument("--api-port", type=int, required=True)
    p.add_argument("--etcd-port", type=int, required=True)
    for name in ("node", "gateway", "bridge", "pod-cidr", "service-cidr", "api-service-ip"):
        p.add_argument(f"--{name}", required=True)
    for name in ("dns-ip", "pause-image", "busybox-image"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--kubeconfig", type=Path, help="where `configs` writes the admin's")
    p.add_argument("command", choices=["pki", "configs", "objects", "args"])
    p.add_argument("component", nargs="?", choices=["etcd", "kube-apiserver"])
    a = p.parse_args(argv)
    layout = Layout(
        data=a.data,
        run=a.run,
        bin=a.bin,
        api_port=a.api_port,
        etcd_port=a.etcd_port,
        etcd_peer_port=a.etcd_port + 1,
        node=a.node,
        gateway=a.gateway,
        bridge=a.bridge,
        pod_cidr=a.pod_cidr,
        service_cidr=a.service_cidr,
        api_service_ip=a.api_service_ip,
        dns_ip=a.dns_ip,
        pause_image=a.pause_image,
        busybox_image=a.busybox_image,
    )
    if a.command == "pki":
        pki.make(layout.pki, pki.cluster_certs(layout))
    elif a.command == "configs":
        if a.kubeconfig is None:
            p.error("configs needs --kubeconfig")
        configs.write_cluster(layout, a.kubeconfig)
    elif a.command == "objects":
        sys.stdout.write(configs.dump_yaml_all(objects.bootstrap(layout)))
    else:
        if a.component is None:
            p.error("args needs a COMPONENT: etcd or kube-apiserver")
        cmd = flags.etcd(layout) if a.component == "etcd" else flags.apiserver(layout)
        sys.stdout.write("".join(f"{word}\n" for word in cmd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
