"""The operator against a real kube-apiserver and a real node on loopback.

No kubelet here: the PlateauNode's children are created but run no pod, so
the node is a ``plateau node`` process that the PlateauNode points to with the
``plateau.dev/endpoint`` annotation (its token in a Secret the node names).
What is real: the API server, the CRDs, kopf, the operator's handlers and the
node's admin API. The pod-running parts are in tests/e2e.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from testkit.arrowhttp import append
from testkit.kubeapi import KubeApi
from testkit.nodeproc import NodeProcess
from testkit.operatorproc import NODE_TOKEN, Operator, managed_node, running_operator, wait_until

NS = "default"
TOKEN = NODE_TOKEN
GiB = 1 << 30


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    with managed_node(tmp_path / "data") as proc:
        yield proc


@pytest.fixture
def operator(kube: KubeApi, tmp_path: Path) -> Iterator[Operator]:
    with running_operator(kube, tmp_path / "operator.log") as op:
        yield op


def metric(text: str, sample_name: str, **labels: str) -> float:
    """The value of one sample of a Prometheus text exposition (0 when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == sample_name and all(
                sample.labels.get(k) == v for k, v in labels.items()
            ):
                return float(sample.value)
    return 0.0


def get(kube: KubeApi, kind: str, name: str) -> dict[str, Any]:
    r = kube.kubectl("get", kind, name, "-n", NS, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def ready(kube: KubeApi, name: str) -> tuple[str, str]:
    conds = get(kube, "plateautopic", name).get("status", {}).get("conditions", [])
    c: dict[str, Any] = next((c for c in conds if c["type"] == "Ready"), {})
    return c.get("status", ""), c.get("reason", "")


def topic(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "plateau.dev/v1alpha1",
        "kind": "PlateauTopic",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"nodeRef": {"name": "n"}, "retention": {"maxBytes": "1Gi"}, **spec},
    }


def node_topic(node: NodeProcess, name: str) -> dict[str, Any] | None:
    r = httpx.get(f"{node.url}/admin/topics/{name}", headers=node.headers())
    return r.json() if r.status_code == 200 else None


def test_topics_are_reconciled_onto_the_node(
    kube: KubeApi, node: NodeProcess, operator: Operator, tmp_path: Path
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "node-token", "namespace": NS},
        "data": {"token": base64.b64encode(TOKEN.encode()).decode()},
    }
    assert kube.apply(secret).returncode == 0
    pnode = {
        "apiVersion": "plateau.dev/v1alpha1",
        "kind": "PlateauNode",
        "metadata": {
            "name": "n",
            "namespace": NS,
            "annotations": {"plateau.dev/endpoint": node.url},
        },
        "spec": {"storage": {"size": "10Gi"}, "auth": {"secretRef": {"name": "node-token"}}},
    }
    assert kube.apply(pnode).returncode == 0
    try:
        # the node's children exist, owned by the PlateauNode (no kubelet runs them here)
        sts = wait_until(lambda: get(kube, "statefulset", "plateau-n"), "the StatefulSet")
        assert sts["metadata"]["ownerReferences"][0]["kind"] == "PlateauNode"
        assert get(kube, "configmap", "plateau-n-config") and get(kube, "service", "plateau-n")

        assert kube.apply(topic("events", partitions=2, deletionPolicy="Delete")).returncode == 0
        wait_until(lambda: ready(kube, "events") == ("True", "Synced"), "events Ready")
        on_node = node_topic(node, "events")
        assert on_node and on_node["partitions"] == 2
        assert on_node["retention"]["max_bytes"] == GiB

        # the operator counts and times what it did, and says it is alive and making progress
        scraped = httpx.get(operator.metrics).text
        assert metric(scraped, "plateau_operator_reconciles_total", kind="PlateauTopic",
                      result="ok") >= 1  # fmt: skip
        assert metric(scraped, "plateau_operator_reconcile_seconds_count", kind="PlateauNode") >= 1
        assert metric(scraped, "plateau_operator_resources_ready", kind="PlateauTopic",
                      namespace=NS, name="events") == 1  # fmt: skip
        health = httpx.get(operator.health)
        assert health.status_code == 200
        assert health.json()["apiServer"].startswith("v1.")
        assert 0 <= health.json()["reconcileSeconds"] < 60

        # usage is read back into status by the resync
        append(
            httpx.Client(base_url=node.url, headers=node.headers()),
            "events",
            "0",
            pa.table({"x": [1, 2], "time": pa.array([1_700_000_000_000] * 2, pa.int64())}),
        )

        def usage() -> dict[str, Any]:
            u: dict[str, Any] = get(kube, "plateautopic", "events")["status"].get("usage", {})
            return u if u.get("records") == 2 else {}

        got = wait_until(usage, "usage in status")
        assert got["newestTime"] == "2023-11-14T22:13:20Z"
        assert got["partitions"]["0"]["end"] == 2

        # a lowered budget reaches the node
        kube.apply(topic("events", partitions=2, deletionPolicy="Delete",
                         retention={"maxBytes": "512Mi"}))  # fmt: skip
        wait_until(
            lambda: (
                (node_topic(node, "events") or {}).get("retention", {}).get("max_bytes")
                == 512 << 20
            ),
            "the lowered budget",
        )

        # over budget: Ready=False/OverBudget, and the node holds nothing of it
        kube.apply(topic("huge", retention={"maxBytes": "100Gi"}))
        wait_until(lambda: ready(kube, "huge") == ("False", "OverBudget"), "OverBudget")
        assert node_topic(node, "huge") is None
        scraped = httpx.get(operator.metrics).text
        assert metric(scraped, "plateau_operator_reconciles_total", kind="PlateauTopic",
                      result="retry") >= 1  # fmt: skip
        assert metric(scraped, "plateau_operator_resources_ready", kind="PlateauTopic",
                      namespace=NS, name="huge") == 0  # fmt: skip
        warned = json.loads(kube.kubectl("get", "events", "-n", NS, "-o", "json",
                            "--field-selector", "involvedObject.name=huge").stdout)  # fmt: skip
        assert any(e["type"] == "Warning" and "does not fit" in e["message"]
                   for e in warned["items"])  # fmt: skip

        # the node loses a topic (an empty volume): the resync puts it back
        httpx.delete(f"{node.url}/admin/topics/events", headers=node.headers())
        wait_until(lambda: node_topic(node, "events"), "events put back")

        # the node goes away: NodeUnreachable; back: Ready again by itself
        node.stop()
        wait_until(lambda: ready(kube, "events") == ("False", "NodeUnreachable"), "unreachable")
        node.start()
        wait_until(lambda: ready(kube, "events") == ("True", "Synced"), "Ready again", 120)

        # deletion: Delete removes the data, Retain keeps it
        kube.apply(topic("kept"))
        wait_until(lambda: node_topic(node, "kept"), "kept on the node")
        kube.kubectl("delete", "plateautopic", "events", "kept", "huge", "-n", NS, "--wait=true")
        assert node_topic(node, "events") is None
        assert node_topic(node, "kept") is not None

        # logs are JSON lines (one object each), for log pipelines
        lines = (tmp_path / "operator.log").read_text().splitlines()
        assert lines and all("message" in json.loads(line) for line in lines), lines[:5]
    except AssertionError:
        print((tmp_path / "operator.log").read_text()[-6000:])
        raise


def test_growing_storage_patches_the_bound_claim_or_says_why_not(
    kube: KubeApi, operator: Operator, tmp_path: Path
) -> None:
    for cls, grows in (("fixed", False), ("growing", True)):
        kube.apply(
            {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": cls},
                "provisioner": "example.com/none",
                "allowVolumeExpansion": grows,
            }
        )
    try:
        for name, cls in (("m", "fixed"), ("g", "growing")):
            pnode: dict[str, Any] = {
                "apiVersion": "plateau.dev/v1alpha1",
                "kind": "PlateauNode",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"storage": {"size": "1Gi", "storageClassName": cls}},
            }
            assert kube.apply(pnode).returncode == 0
            # no controller-manager here: the claim the StatefulSet would make, bound
            claim = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": f"data-plateau-{name}-0",
                    "namespace": NS,
                    "labels": {"plateau.dev/node": name},  # as from the claim template
                },
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": cls,
                    "volumeName": f"pv-{name}",
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
            assert kube.apply(claim).returncode == 0
            # grown only once the StatefulSet exists: its claim template cannot change
            wait_until(partial(get, kube, "statefulset", f"plateau-{name}"), "the StatefulSet")
            kube.kubectl(
                "patch", "pvc", f"data-plateau-{name}-0", "-n", NS, "--subresource=status",
                "--type=merge",
                "-p",
                '{"status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}',
            )  # fmt: skip
            pnode["spec"]["storage"]["size"] = "2Gi"
            assert kube.apply(pnode).returncode == 0

        def degraded() -> str:
            conds = get(kube, "plateaunode", "m").get("status", {}).get("conditions", [])
            c: dict[str, Any] = next((c for c in conds if c["type"] == "Degraded"), {})
            return str(c.get("message", "")) if c.get("reason") == "ExpansionUnsupported" else ""

        message = wait_until(degraded, "Degraded/ExpansionUnsupported")
        # the node keeps the capacity of the volume it has: no budgets past its disk
        config = yaml.safe_load(get(kube, "configmap", "plateau-m-config")["data"]["node.yaml"])
        assert config["storage"]["capacity_bytes"] == GiB
        # the StatefulSet keeps the claim template it was made with; nothing failed on it
        sts = get(kube, "statefulset", "plateau-g")
        template = sts["spec"]["volumeClaimTemplates"][0]["spec"]
        assert template["resources"]["requests"]["storage"] == str(GiB)
        for name in ("m", "g"):  # the grown spec was reconciled through, not failed on

            def observed(n: str = name) -> bool:
                pn = get(kube, "plateaunode", n)
                return bool(pn["status"].get("observedGeneration") == pn["metadata"]["generation"])

            wait_until(observed, f"{name}'s status for its newest generation")
        assert "StorageClass fixed" in message and "must support resize" in message
        wait_until(
            lambda: (
                get(kube, "pvc", "data-plateau-g-0")["spec"]["resources"]["requests"]["storage"]
                == str(2 * GiB)
            ),
            "the claim grown",
        )
    except AssertionError:
        print((tmp_path / "operator.log").read_text()[-6000:])
        raise
