"""The product on the cluster: a StatefulSet runs `plateau node` as non-root on a
PersistentVolumeClaim; client pods append and read through its Service by DNS
name; every acknowledged record survives the node pod's replacement."""

from __future__ import annotations

import json
from typing import Any

from tests.e2e.kube import IMAGE, PULL_POLICY, Kube, pod

# Runs inside a client pod (the plateau image): appends BATCHES batches of 10 rows
# to events/0 unless BATCHES is 0, then reads the whole partition back and prints
# one JSON line: the spans the node acknowledged and every row it returned.
CLIENT = """
import json, sys
import pyarrow as pa
from plateau.client import PlateauClient

url, batches, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
acked = []
with PlateauClient(url, timeout=30) as client:
    for b in range(first, first + batches):
        values = [f"r{b}-{i}" for i in range(10)]
        table = pa.table({"batch": [b] * 10, "i": list(range(10)), "v": values})
        span = client.append("events", "0", table)
        acked.append([b, span.start, span.end])
    rows = []
    for page in client.read_all("events", "0"):
        start = page.span.start
        for k, row in enumerate(page.table.select(["batch", "i", "v"]).to_pylist()):
            rows.append([start + k, row["batch"], row["i"], row["v"]])
print(json.dumps({"acked": acked, "rows": rows}))
"""


def _statefulset() -> list[dict[str, Any]]:
    labels = {"app": "plateau"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "plateau"},
            "spec": {
                "selector": labels,
                "ports": [{"name": "http", "port": 3030, "targetPort": "http"}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "plateau-headless"},
            "spec": {
                "clusterIP": "None",
                "selector": labels,
                "ports": [{"name": "http", "port": 3030}],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "plateau"},
            "spec": {
                "serviceName": "plateau-headless",
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "terminationGracePeriodSeconds": 10,
                        "securityContext": {
                            "runAsNonRoot": True,
                            "runAsUser": 10001,
                            "runAsGroup": 10001,
                            "fsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"},
                        },
                        "containers": [
                            {
                                "name": "node",
                                "image": IMAGE,
                                "imagePullPolicy": PULL_POLICY,
                                # The image's default command, spelled out.
                                "args": ["node", "--data-dir", "/data", "--bind", "0.0.0.0:3030"],
                                "ports": [{"name": "http", "containerPort": 3030}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/readyz", "port": "http"},
                                    "periodSeconds": 1,
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]},
                                },
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            }
                        ],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "256Mi"}},
                        },
                    }
                ],
            },
        },
    ]


def _client(ns: Kube, name: str, batches: int, first: int) -> dict[str, Any]:
    url = f"http://plateau.{ns.namespace}.svc.cluster.local:3030"
    ns.apply(pod(name, ["python", "-c", CLIENT, url, str(batches), str(first)]))
    phase = ns.wait_pod_done(name)
    out = ns.logs(name)
    assert phase == "Succeeded", out
    return dict(json.loads(out.strip().splitlines()[-1]))


def _expected(acked: list[list[int]]) -> list[list[Any]]:
    rows = []
    for b, start, end in acked:
        assert end - start == 10
        rows += [[start + i, b, i, f"r{b}-{i}"] for i in range(10)]
    return rows


def test_statefulset_node_keeps_acknowledged_records_across_pod_replacement(ns: Kube) -> None:
    ns.apply(_statefulset())
    ns.wait_for("pod plateau-0", lambda: ns.exists("pod", "plateau-0"))
    ns.wait_ready("pod/plateau-0", timeout=240)
    node = ns.get("pod", "plateau-0")
    assert ns("exec", "plateau-0", "--", "id", "-u").strip() == "10001", "the node runs as non-root"
    assert ns.get("pvc", "data-plateau-0")["status"]["phase"] == "Bound"

    first = _client(ns, "client-1", batches=20, first=0)
    acked = first["acked"]
    assert [s for _, s, _ in acked] == list(range(0, 200, 10)), "dense indexes from 0"
    assert first["rows"] == _expected(acked)

    ns.run("delete", "pod", "plateau-0", "--wait=true", timeout=120)
    ns.wait_for(
        "a new plateau-0",
        lambda: ns.get("pod", "plateau-0")["metadata"]["uid"] != node["metadata"]["uid"],
    )
    ns.wait_ready("pod/plateau-0", timeout=240)

    # Every acknowledged record is still there, and new ones continue the indexes.
    second = _client(ns, "client-2", batches=2, first=20)
    assert [s for _, s, _ in second["acked"]] == [200, 210]
    assert second["rows"] == _expected(acked + second["acked"])
