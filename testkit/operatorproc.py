"""The operator as a subprocess against a real kube-apiserver (testkit/kubeapi.py).

No kubelet there: a PlateauNode's children are created but run no pod, so
tests point the PlateauNode at a ``plateau node`` on loopback with the
``plateau.dev/endpoint`` annotation, which the operator honours only when
started with ``allow_override`` (as an operator run off-cluster would be).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit import waiting
from testkit.kubeapi import KubeApi, free_port
from testkit.nodeproc import NodeProcess

RESYNC_SECONDS = 2
NODE_TOKEN = "node-secret-token"


@contextmanager
def managed_node(data_dir: Path) -> Iterator[NodeProcess]:
    """A node as the operator runs it: 10 GiB, topics only through the admin API."""
    env = {
        "PLATEAU_STORAGE__AUTO_CREATE_TOPICS": "false",
        "PLATEAU_STORAGE__CAPACITY_BYTES": str(10 << 30),
    }
    proc = NodeProcess(data_dir, token=NODE_TOKEN, env=env).start()
    try:
        yield proc
    finally:
        proc.stop()


@dataclass
class Operator:
    proc: subprocess.Popen[bytes]
    metrics: str
    health: str
    log: Path

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


@contextmanager
def running_operator(
    kube: KubeApi, log: Path, allow_override: bool = True, **env: str
) -> Iterator[Operator]:
    metrics, health = free_port(), free_port()
    full = {
        **os.environ,
        "KUBECONFIG": str(kube.kubeconfig),
        "PLATEAU_OPERATOR_RESYNC_SECONDS": str(RESYNC_SECONDS),
        "PLATEAU_OPERATOR_METRICS_PORT": str(metrics),
        "PLATEAU_OPERATOR_HEALTH_PORT": str(health),
        "PLATEAU_OPERATOR_ALLOW_ENDPOINT_OVERRIDE": str(allow_override).lower(),
        "PLATEAU_OPERATOR_DELETE_WAIT_SECONDS": "6",
        **env,
    }
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "plateau_operator"], env=full, stdout=out, stderr=out
        )
    op = Operator(
        proc, f"http://127.0.0.1:{metrics}/metrics", f"http://127.0.0.1:{health}/healthz", log
    )
    try:
        yield op
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            # still a failure (a hung shutdown), but not one left running into later tests
            proc.kill()
            proc.wait()
            raise


def wait_until(check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    """``testkit.waiting.wait_until`` at the pace a kube-apiserver is polled (kubectl)."""
    return waiting.wait_until(check, what, timeout, interval=0.3)


def get(kube: KubeApi, kind: str, name: str, namespace: str) -> dict[str, Any]:
    r = kube.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def condition(obj: dict[str, Any], type_: str = "Ready") -> dict[str, Any]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return dict(next((c for c in conds if c["type"] == type_), {}))


def events(kube: KubeApi, namespace: str, name: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "events", "-n", namespace, "-o", "json",
                       "--field-selector", f"involvedObject.name={name}").stdout  # fmt: skip
    return list(json.loads(out)["items"])
