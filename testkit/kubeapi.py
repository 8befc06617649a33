"""A real kube-apiserver with its etcd, on loopback, for tests of CRDs and the operator.

No kubelet, scheduler or controllers: what the API server itself does (schema
validation, CEL rules, defaults, the status subresource, finalizers, watches)
is real, and it starts in a few seconds. The binaries come from the project's
own build (``tools/cluster-build``, cached outside the clone). etcd and the API
server are started as tools/cluster starts them (testkit.controlplane: the same
flags, admission plugins and certificates); kubectl and the tests are the
cluster's admin, by client certificate.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from testkit.controlplane import configs, flags, pki
from testkit.controlplane.layout import Layout

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binaries() -> Path:
    """The directory of kube-apiserver, etcd and kubectl (built once, then cached).

    ``PLATEAU_CLUSTER_BIN`` names a directory holding them instead, as for tools/cluster.
    """
    if env := os.environ.get("PLATEAU_CLUSTER_BIN"):
        return Path(env)
    out = subprocess.run(
        [str(ROOT / "tools" / "cluster-build"), "--print-dir"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"tools/cluster-build failed: {out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


class KubeApi:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.bin = binaries()
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = workdir / "kubeconfig"
        self._procs: dict[str, subprocess.Popen[bytes]] = {}  # by name, in start order

    def start(self, timeout: float = 90.0) -> KubeApi:
        w = self.workdir
        w.mkdir(parents=True, exist_ok=True)
        # No bridge (nothing to advertise) and no kubelet: the API server's certificates only.
        layout = Layout(
            data=w,
            run=w / "run",
            bin=self.bin,
            api_port=self.port,
            etcd_port=free_port(),
            etcd_peer_port=free_port(),
            gateway=None,
        )
        pki.make(layout.pki, pki.apiserver_certs(layout))
        self._spawn("etcd", flags.etcd(layout))
        self._spawn("kube-apiserver", flags.apiserver(layout))
        configs.write_private(self.kubeconfig, json.dumps(configs.kubeconfig(layout, "admin")))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited: {self.logs()}")
            if self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0:
                return self
            time.sleep(0.5)
        raise RuntimeError(f"the API server did not become ready: {self.logs()}")

    def start_controllers(self, *controllers: str) -> KubeApi:
        """kube-controller-manager running only ``controllers`` (``garbagecollector``,
        ``statefulset``, ``pvc-protection``...): what a test needs of the cluster's
        controllers, without a scheduler or kubelet (pods stay Pending)."""
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(controllers)}",
                "--leader-elect=false",
                "--secure-port=0",
                "--use-service-account-credentials=false",
                "--v=1",
            ],
        )
        return self

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        self._procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.workdir.glob("*.log"))
        )

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        proc = subprocess.run(
            [str(self.bin / "kubectl"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {proc.stderr}")
        return proc

    def apply(self, doc: dict[str, Any] | str) -> subprocess.CompletedProcess[str]:
        text = doc if isinstance(doc, str) else json.dumps(doc)
        return self.kubectl("apply", "-f", "-", stdin=text, check=False)

    def stop(self) -> None:
        """Stop one process at a time, the last started first, each exiting while what it
        depends on still serves.

        Why not all at once: kube-apiserver's graceful shutdown deletes its lease in
        etcd, and with etcd already gone it retried until killed (its 20 s here, ~27 s a
        test module); with etcd up it exits in about a second.
        """
        for proc in reversed(self._procs.values()):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
