"""What a user watching ``kubectl get plateau`` and ``kubectl describe`` relies on, on a real
kube-apiserver with a real node on loopback: usage that keeps up with ingest, allocated
bytes that follow a topic's change, no status written when nothing changed, an Event for
every change the operator makes, and tokens that outlive a re-created PlateauNode whose
claim was kept (with kube-controller-manager's garbage collector, the StatefulSet
controller and pvc-protection running: pods stay Pending, no kubelet)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from plateau.client import PlateauClient
from testkit.kubeapi import KubeApi
from testkit.nodeproc import NodeProcess
from testkit.operatorproc import (
    NODE_TOKEN,
    RESYNC_SECONDS,
    Operator,
    condition,
    events,
    get,
    managed_node,
    running_operator,
    wait_until,
)

API = "plateau.dev/v1alpha1"
GiB, MiB = 1 << 30, 1 << 20
BOUND = 10.0  # seconds: the status shows a change within this long
_spaces = iter(range(1000))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    with managed_node(tmp_path / "data") as proc:
        yield proc


@pytest.fixture
def ns(kube: KubeApi) -> str:
    name = f"status-{next(_spaces)}"
    kube.kubectl("create", "namespace", name)
    return name


def plateau_node(ns: str, url: str | None, name: str = "n", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if url:
        meta["annotations"] = {"plateau.dev/endpoint": url}
        spec.setdefault("auth", {"secretRef": {"name": "node-token"}})
    return {"apiVersion": API, "kind": "PlateauNode", "metadata": meta,
            "spec": {"storage": {"size": "10Gi"}, **spec}}  # fmt: skip


def topic(ns: str, name: str, budget: str = "1Gi", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "PlateauTopic",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeRef": {"name": "n"}, "retention": {"maxBytes": budget}, **spec},
    }


def ready_node(kube: KubeApi, ns: str, node: NodeProcess) -> None:
    """A node the operator calls (endpoint override), its StatefulSet's status said ready
    as the StatefulSet controller would once its pod runs (no kubelet here)."""
    token = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "node-token",
             "namespace": ns}, "stringData": {"token": NODE_TOKEN}}  # fmt: skip
    assert kube.apply(token).returncode == 0
    assert kube.apply(plateau_node(ns, node.url)).returncode == 0
    sts = wait_until(lambda: get(kube, "statefulset", "plateau-n", ns), "the StatefulSet")
    status = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "currentReplicas": 1,
              "availableReplicas": 1, "currentRevision": "r1", "updateRevision": "r1",
              "observedGeneration": sts["metadata"]["generation"]}  # fmt: skip
    kube.kubectl("patch", "statefulset", "plateau-n", "-n", ns, "--subresource=status",
                 "--type=merge", "-p", json.dumps({"status": status}))  # fmt: skip
    wait_until(lambda: condition(get(kube, "plateaunode", "n", ns)).get("status") == "True",
               "the node Ready")  # fmt: skip


def synced(kube: KubeApi, ns: str, name: str) -> bool:
    return condition(get(kube, "plateautopic", name, ns)).get("reason") == "Synced"


def test_usage_and_allocated_bytes_keep_up_and_an_idle_status_is_never_written(
    kube: KubeApi, node: NodeProcess, ns: str, tmp_path: Path
) -> None:
    # a resync of a minute, as installed: what follows comes from the poll and the nudge
    with running_operator(kube, tmp_path / "operator.log",
                          PLATEAU_OPERATOR_RESYNC_SECONDS="60") as op:  # fmt: skip
        try:
            ready_node(kube, ns, node)
            kube.apply(topic(ns, "events", "1Gi"))
            wait_until(lambda: synced(kube, ns, "events"), "events Synced")
            wait_until(lambda: get(kube, "plateaunode", "n", ns)["status"].get("allocatedBytes")
                       == GiB, "the node's allocated bytes", BOUND)  # fmt: skip

            rows = 200_000
            table = pa.table({"x": pa.array(range(rows), pa.int64())})
            with PlateauClient(node.url, token=NODE_TOKEN) as client:
                client.append("events", "0", table)
            acked = time.monotonic()

            def usage() -> dict[str, Any]:
                u: dict[str, Any] = get(kube, "pt", "events", ns)["status"].get("usage", {})
                return u if u.get("records") == rows else {}

            shown = wait_until(usage, "the topic's usage in status", BOUND)
            topic_seconds = time.monotonic() - acked
            assert shown["bytes"] > 0 and shown["partitions"]["0"]["end"] == rows
            used = wait_until(lambda: get(kube, "pn", "n", ns)["status"].get("usedBytes"),
                              "the node's used bytes", BOUND)  # fmt: skip
            assert used == shown["bytes"]
            printed = kube.kubectl("get", "pt", "events", "-n", ns).stdout
            assert shown["used"] in printed  # kubectl get pt's USED

            # a budget change: the node's ALLOCATED follows at once (the node is nudged)
            changed = time.monotonic()
            kube.apply(topic(ns, "events", "512Mi"))
            wait_until(lambda: get(kube, "pn", "n", ns)["status"].get("allocatedBytes")
                       == 512 * MiB, "allocated bytes after the change", BOUND)  # fmt: skip
            node_seconds = time.monotonic() - changed
            assert "512" in kube.kubectl("get", "pn", "n", "-n", ns).stdout

            # nothing changes: neither status is written over several polls
            versions = [get(kube, kind, name, ns)["metadata"]["resourceVersion"]
                        for kind, name in (("pt", "events"), ("pn", "n"))]  # fmt: skip
            time.sleep(4 * 5 + 1)  # four polls at usageSeconds' default
            after = [get(kube, kind, name, ns)["metadata"]["resourceVersion"]
                     for kind, name in (("pt", "events"), ("pn", "n"))]  # fmt: skip
            assert after == versions
            print(json.dumps({"rows": rows, "topic_usage_seconds": round(topic_seconds, 2),
                              "node_allocated_seconds": round(node_seconds, 2)}))  # fmt: skip
        except AssertionError:
            print(op.tail())
            raise


def reasons(kube: KubeApi, ns: str, kind: str, name: str) -> list[tuple[str, str, str]]:
    found = [e for e in events(kube, ns, name) if e["involvedObject"]["kind"] == kind]
    found.sort(key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"]))
    return [(e["type"], e["reason"], e["message"]) for e in found]


def test_every_change_the_operator_makes_has_its_event_once(
    kube: KubeApi, node: NodeProcess, ns: str, tmp_path: Path
) -> None:
    with running_operator(kube, tmp_path / "operator.log") as op:
        try:
            walkthrough(kube, node, ns, op)
        except AssertionError:
            print(op.tail())
            raise


def walkthrough(kube: KubeApi, node: NodeProcess, ns: str, op: Operator) -> None:
    ready_node(kube, ns, node)
    kube.apply(topic(ns, "events", "1Gi", deletionPolicy="Delete"))
    wait_until(lambda: synced(kube, ns, "events"), "events Synced")
    kube.apply(topic(ns, "events", "512Mi", deletionPolicy="Delete"))
    wait_until(lambda: any(r == "BudgetChanged" for _, r, _ in reasons(
        kube, ns, "PlateauTopic", "events")), "BudgetChanged")  # fmt: skip
    kube.apply(topic(ns, "events", "512Mi", deletionPolicy="Delete", partitions=2))
    wait_until(lambda: any(r == "Configured" for _, r, _ in reasons(
        kube, ns, "PlateauTopic", "events")), "Configured")  # fmt: skip
    kube.apply(topic(ns, "kept", "10Mi"))
    wait_until(lambda: synced(kube, ns, "kept"), "kept Synced")
    time.sleep(4 * RESYNC_SECONDS)  # resyncs: nothing changes, so no Event
    kube.kubectl("delete", "pt", "events", "kept", "-n", ns, "--wait=true", "--timeout=60s")

    got = reasons(kube, ns, "PlateauTopic", "events")
    by_reason = {r: (t, m) for t, r, m in got}
    assert [r for _, r, _ in got].count("Created") == 1, got
    assert sorted(r for _, r, _ in got) == sorted(
        ["Created", "Synced", "BudgetChanged", "Configured", "Deleted"]
    ), got
    assert by_reason["Created"] == (
        "Normal",
        "created topic 'events' on node 'n': 1 partition, budget 1.0Gi",
    )
    assert by_reason["BudgetChanged"] == (
        "Normal",
        "budget of topic 'events' on node 'n': 1.0Gi → 512.0Mi",
    )
    assert by_reason["Configured"] == ("Normal", "topic 'events' on node 'n': partitions 1 → 2")
    assert by_reason["Deleted"] == ("Normal", "deleted topic 'events' and its data on node 'n'")
    kept = {r: m for _, r, m in reasons(kube, ns, "PlateauTopic", "kept")}
    assert set(kept) == {"Created", "Synced", "Retained"}, kept
    assert "kept topic 'kept' and its data on node 'n'" in kept["Retained"]

    nodes = reasons(kube, ns, "PlateauNode", "n")
    assert [r for _, r, _ in nodes] == ["Created", "NodeReady"], nodes
    created = nodes[0][2]
    for child in (
        "StatefulSet plateau-n",
        "ConfigMap plateau-n-config",
        "Secret plateau-n-token",
        "Service plateau-n",
        "Service plateau-n-headless",
        "NetworkPolicy plateau-n",
    ):
        assert child in created, created  # fmt: skip
    assert not [e for e in events(kube, ns, "n") if e["type"] == "Warning"]

    # a change of the node's settings: Configured, naming what changed; the pod rolls
    changed = plateau_node(ns, node.url, settings={"durability": "relaxed"})
    kube.apply(changed)
    wait_until(lambda: any(r == "Configured" for _, r, _ in reasons(
        kube, ns, "PlateauNode", "n")), "the node's Configured")  # fmt: skip
    (message,) = [m for _, r, m in reasons(kube, ns, "PlateauNode", "n") if r == "Configured"]
    assert "ConfigMap plateau-n-config" in message and "StatefulSet plateau-n" in message
    assert "the node's pod is replaced" in message


def token_of(kube: KubeApi, ns: str) -> dict[str, str]:
    data: dict[str, str] = get(kube, "secret", "plateau-keep-token", ns).get("data") or {}
    return data


def owner_kinds(obj: dict[str, Any]) -> list[str]:
    return [r["kind"] for r in obj.get("metadata", {}).get("ownerReferences") or []]


@pytest.fixture
def controllers(kube: KubeApi) -> KubeApi:
    """The garbage collector, the StatefulSet controller (it makes the node's claim from
    its template) and pvc-protection, once per module."""
    if not getattr(kube, "_controllers", False):
        kube.start_controllers("garbagecollector", "statefulset", "pvc-protection")
        kube._controllers = True  # type: ignore[attr-defined]
    return kube


def test_a_node_recreated_on_its_kept_claim_keeps_its_tokens(
    controllers: KubeApi, ns: str, tmp_path: Path
) -> None:
    kube = controllers
    with running_operator(kube, tmp_path / "operator.log") as op:
        try:
            kept_tokens(kube, ns)
        except AssertionError:
            print(op.tail())
            print(kube.logs()[-3000:])
            raise


def kept_tokens(kube: KubeApi, ns: str) -> None:
    assert kube.apply(plateau_node(ns, None, "keep")).returncode == 0  # retainVolume: true
    # the StatefulSet controller makes the claim; the Secret then becomes the claim's
    claim = wait_until(lambda: get(kube, "pvc", "data-plateau-keep-0", ns), "the claim", 90)
    secret = wait_until(lambda: (s := get(kube, "secret", "plateau-keep-token", ns))
                        and owner_kinds(s) == ["PersistentVolumeClaim"] and s,
                        "the Secret owned by the claim")  # fmt: skip
    (ref,) = secret["metadata"]["ownerReferences"]
    assert ref["uid"] == claim["metadata"]["uid"] and ref["controller"] is True
    before = token_of(kube, ns)
    assert set(before) == {"token", "readToken"}
    moved = wait_until(lambda: [e["message"] for e in events(kube, ns, "keep")
                                if e["reason"] == "Configured"], "the move's Event")  # fmt: skip
    assert "Secret plateau-keep-token (now kept with volume claim data-plateau-keep-0" in moved[0]

    kube.kubectl("delete", "pn", "keep", "-n", ns, "--wait=true", "--timeout=60s")
    wait_until(lambda: not get(kube, "statefulset", "plateau-keep", ns), "the StatefulSet gone")
    wait_until(lambda: not get(kube, "configmap", "plateau-keep-config", ns), "children gone")
    assert get(kube, "pvc", "data-plateau-keep-0", ns), "the claim is kept"
    assert token_of(kube, ns) == before, "the tokens are kept with it"

    assert kube.apply(plateau_node(ns, None, "keep")).returncode == 0  # re-created: a new UID
    wait_until(lambda: get(kube, "statefulset", "plateau-keep", ns), "the new StatefulSet")
    status = wait_until(lambda: get(kube, "pn", "keep", ns).get("status"), "status")
    assert status["tokenSecret"] == "plateau-keep-token"
    time.sleep(2 * RESYNC_SECONDS)
    assert token_of(kube, ns) == before, "the same tokens: producers keep working"
    assert condition(get(kube, "pn", "keep", ns)).get("reason") != "ResourceConflict"
    kept = [e for e in events(kube, ns, "keep") if e["reason"] == "TokensKept"]
    assert kept and "data-plateau-keep-0" in kept[0]["message"]

    # the claim deleted (after the node): its tokens go with it
    kube.kubectl("delete", "pn", "keep", "-n", ns, "--wait=true", "--timeout=60s")
    wait_until(lambda: not get(kube, "statefulset", "plateau-keep", ns), "the StatefulSet gone")
    kube.kubectl("delete", "pvc", "data-plateau-keep-0", "-n", ns, "--wait=false")
    wait_until(lambda: not get(kube, "secret", "plateau-keep-token", ns),
               "the Secret collected with its claim", 90)  # fmt: skip

    # retainVolume: false keeps the Secret the node's: it goes with the node
    assert kube.apply(plateau_node(ns, None, "keep", retainVolume=False)).returncode == 0
    wait_until(lambda: get(kube, "pvc", "data-plateau-keep-0", ns), "the new claim", 90)
    time.sleep(2 * RESYNC_SECONDS)
    assert owner_kinds(get(kube, "secret", "plateau-keep-token", ns)) == ["PlateauNode"]
