"""The operator as users install it, for the e2e tests: the chart installed with helm
into a namespace of its own, plus ways to look at a node from inside its pod."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from testkit.kubeapi import binaries
from tests.e2e.kube import IMAGE, PULL_POLICY, ROOT, Kube, new_namespace

CHART = ROOT / "charts" / "plateau"
CRDS = ROOT / "crds"
API = "plateau.dev/v1alpha1"
# The resync interval the tests install the operator with (the chart's minimum).
RESYNC_SECONDS = 5


@dataclass
class Release:
    system: Kube  # the operator's namespace
    timings: dict[str, float]
    name: str = ""
    values: tuple[str, ...] = ()  # the --set values it was installed with

    def operator_pod(self) -> dict[str, Any]:
        """The running operator pod (not one being deleted), or {}."""
        out = self.system(
            "get", "pods", "-l", "app.kubernetes.io/name=plateau-operator", "-o", "json"
        )
        for p in json.loads(out)["items"]:
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"):
                return dict(p)
        return {}

    def logs(self) -> str:
        pod = self.operator_pod()
        name = pod.get("metadata", {}).get("name")
        return self.system("logs", name, "--tail=200", check=False) if name else ""


def helm(kube: Kube, *args: str, timeout: float = 300) -> str:
    cmd = [str(binaries() / "helm"), "--kubeconfig", kube.kubeconfig, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: exit {proc.returncode}: {proc.stderr}")
    return proc.stdout


def upgrade(kube: Kube, release: Release, *values: str) -> None:
    """``helm upgrade`` to ``values`` over the install's, as a user upgrades the operator."""
    sets = [a for v in (*release.values, *values) for a in ("--set", v)]
    helm(kube, "upgrade", release.name, str(CHART), "--namespace", release.system.namespace,
         "--skip-crds", *sets, "--wait", "--timeout", "240s")  # fmt: skip


@contextmanager
def installed(kube: Kube, *extra: str, uninstall: bool = True) -> Iterator[Release]:
    """``helm install`` of the chart (cluster-wide unless ``extra`` sets watchNamespaces),
    until the operator pod is ready; ``helm uninstall`` after, unless the test did."""
    t0 = time.monotonic()
    # The CRDs as docs/operator.md says to upgrade them (a kept cluster may hold older
    # ones); helm then skips its own copy, which would conflict with kubectl's fields.
    kube.run("apply", "--server-side", "--force-conflicts", "-f", str(CRDS), namespaced=False)
    system = new_namespace(kube, "plateau-system")
    release = f"plateau-{uuid.uuid4().hex[:4]}"
    repo, tag = IMAGE.rsplit(":", 1)
    values = [
        f"image.repository={repo}",
        f"image.tag={tag}",
        f"image.pullPolicy={PULL_POLICY}",
        f"resyncSeconds={RESYNC_SECONDS}",
        "logFormat=plain",
        *extra,
    ]
    sets = [a for v in values for a in ("--set", v)]
    helm(kube, "install", release, str(CHART), "--namespace", system.namespace,
         "--skip-crds", *sets, "--wait", "--timeout", "240s")  # fmt: skip
    timings = {"install_seconds": time.monotonic() - t0}
    try:
        yield Release(system, timings, release, tuple(values))
    finally:
        if uninstall:
            helm(kube, "uninstall", release, "--namespace", system.namespace, "--wait",
                 "--ignore-not-found")  # fmt: skip
        system.run("delete", "namespace", system.namespace, "--wait=false", namespaced=False)


# Runs inside the node's pod: one admin API call on loopback with the node's own token.
NODE_CALL = """
import json, os, sys, httpx
h = {"authorization": "Bearer " + os.environ["PLATEAU_AUTH__TOKEN"]}
method, path = sys.argv[1], sys.argv[2]
body = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
r = httpx.request(method, "http://127.0.0.1:3030" + path, headers=h, json=body, timeout=30)
out = r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text
print(json.dumps({"status": r.status_code, "body": out}))
"""

# Runs inside the node's pod: appends N rows to a topic's partition 0, prints the spans.
APPEND = """
import json, os, sys
import pyarrow as pa
from plateau.client import PlateauClient
topic, n = sys.argv[1], int(sys.argv[2])
with PlateauClient("http://127.0.0.1:3030", token=os.environ["PLATEAU_AUTH__TOKEN"]) as c:
    t = pa.table({"i": list(range(n)), "v": [f"row-{i}" for i in range(n)]})
    s = c.append(topic, "0", t)
print(json.dumps([s.start, s.end]))
"""


def node_call(ns: Kube, pod: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    args = [method, path] + ([json.dumps(body)] if body is not None else [])
    out = ns("exec", pod, "-c", "node", "--", "python", "-c", NODE_CALL, *args, timeout=60)
    reply = json.loads(out.strip().splitlines()[-1])
    return int(reply["status"]), reply["body"]


def node_topic(ns: Kube, pod: str, topic: str) -> dict[str, Any] | None:
    status, body = node_call(ns, pod, "GET", f"/admin/topics/{topic}")
    return dict(body) if status == 200 else None


def condition(obj: dict[str, Any], kind: str = "Ready") -> tuple[str, str]:
    conds = (obj.get("status") or {}).get("conditions") or []
    c: dict[str, Any] = next((c for c in conds if c["type"] == kind), {})
    return str(c.get("status", "")), str(c.get("reason", ""))
