"""Where a control plane keeps its files and which addresses it uses."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Layout:
    """One control plane's paths, ports and addresses.

    The defaults are the local cluster's networks (tools/cluster passes each
    value it uses itself explicitly); a test's API server changes only paths
    and ports, and has no ``gateway`` (no bridge: nothing to advertise).
    """

    data: Path
    run: Path
    bin: Path
    api_port: int
    etcd_port: int
    etcd_peer_port: int
    node: str = "plateau-control-plane"
    gateway: str | None = "10.244.0.1"
    bridge: str = "plateau0"
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/16"
    api_service_ip: str = "10.96.0.1"
    dns_ip: str = "10.96.0.10"
    pause_image: str = "localhost/plateau/pause:1"
    busybox_image: str = "localhost/plateau/busybox:1"

    @property
    def pki(self) -> Path:
        return self.data / "pki"

    @property
    def conf(self) -> Path:
        return self.data / "conf"

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd" / "containerd.sock"

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"
