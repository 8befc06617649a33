"""The operator on the real cluster, installed with helm, driven with kubectl apply.

What users do: install the chart, apply examples/, add and change topics,
lose pods and data, pause, delete. Each step checks what the node itself
holds (its admin API, asked from inside its pod) as well as what the status
says.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.kube import ROOT, Kube, new_namespace
from tests.e2e.operator import (
    API,
    APPEND,
    RESYNC_SECONDS,
    Release,
    condition,
    installed,
    node_call,
    node_topic,
)

MiB, GiB = 1 << 20, 1 << 30
EXAMPLES = ROOT / "examples"
POD = "plateau-ingest-0"  # the StatefulSet pod of examples/plateaunode.yaml
# The resync puts back what a node lost within one interval, plus a node call.
RESYNC_BOUND = 6 * RESYNC_SECONDS + 30


@pytest.fixture(scope="module")
def release(kube: Kube) -> Iterator[Release]:
    with installed(kube) as rel:
        yield rel


def topic(name: str, budget: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "PlateauTopic",
        "metadata": {"name": name},
        "spec": {"nodeRef": {"name": "ingest"}, "retention": {"maxBytes": budget}, **spec},
    }


def ready(ns: Kube, kind: str, name: str) -> tuple[str, str]:
    return condition(ns.get(kind, name)) if ns.exists(kind, name) else ("", "")


def wait_ready(ns: Kube, release: Release, kind: str, name: str, timeout: float = 240) -> None:
    try:
        ns.wait_for(f"{kind} {name} Ready", lambda: ready(ns, kind, name)[0] == "True", timeout)
    except AssertionError:
        print(release.logs())
        raise


def budget_on_node(ns: Kube, name: str) -> int | None:
    found = node_topic(ns, POD, name)
    return int(found["retention"]["max_bytes"]) if found else None


def pod_uid(ns: Kube) -> str:
    return str(ns.get("pod", POD)["metadata"]["uid"]) if ns.exists("pod", POD) else ""


def wait_new_pod_ready(ns: Kube, old_uid: str) -> None:
    ns.wait_for("a new node pod", lambda: pod_uid(ns) not in ("", old_uid), 240)
    ns.wait_ready(f"pod/{POD}", timeout=240)


def records(ns: Kube, name: str) -> int:
    found = node_topic(ns, POD, name)
    return int(found["usage"]["records"]) if found else -1


def test_nodes_and_topics_from_yaml(release: Release, ns: Kube) -> None:
    t0 = time.monotonic()
    # --- the examples, as a user applies them
    ns.run("apply", "-f", str(EXAMPLES))
    ns.wait_for("the node pod", lambda: ns.exists("pod", POD), 120)
    ns.wait_ready(f"pod/{POD}", timeout=240)
    wait_ready(ns, release, "plateaunode", "ingest")
    wait_ready(ns, release, "plateautopic", "inference-logs")
    first_ready = time.monotonic() - t0

    pod = ns.get("pod", POD)
    assert ns("exec", POD, "-c", "node", "--", "id", "-u").strip() == "10001"
    node = ns.get("plateaunode", "ingest")
    st = node["status"]
    assert st["hostNode"] == pod["spec"]["nodeName"]
    assert ns.get("pvc", st["pvcName"])["status"]["phase"] == "Bound"
    assert st["capacityBytes"] == 20 * GiB and st["observedGeneration"] == 1
    on_node = node_topic(ns, POD, "inference_logs")
    assert on_node is not None, "topicName (with '_') is the topic's name on the node"
    assert on_node["partitions"] == 4 and on_node["retention"]["max_bytes"] == 5 * GiB

    # --- applying the same directory again changes nothing (no drift from the operator)
    again = ns("apply", "-f", str(EXAMPLES)).strip().splitlines()
    assert again and all(line.endswith(" unchanged") for line in again), again

    # --- more topics; budgets reach the node, the node's status sums them
    ns.apply(
        [
            topic("clicks", "64Mi", partitions=2, deletionPolicy="Delete"),
            topic("audit", "32Mi", deletionPolicy="Retain"),
        ]
    )
    for name in ("clicks", "audit"):
        wait_ready(ns, release, "plateautopic", name)
    assert budget_on_node(ns, "clicks") == 64 * MiB and budget_on_node(ns, "audit") == 32 * MiB
    allocated = 5 * GiB + 96 * MiB
    ns.wait_for(
        "the node's status to sum the budgets",
        lambda: ns.get("plateaunode", "ingest")["status"].get("allocatedBytes") == allocated,
        RESYNC_BOUND,
    )
    assert ns.get("plateaunode", "ingest")["status"]["topics"] == 3

    # --- a lowered budget, applied, is enforced by the node
    ns.apply(topic("clicks", "16Mi", partitions=2, deletionPolicy="Delete"))
    ns.wait_for("the lowered budget", lambda: budget_on_node(ns, "clicks") == 16 * MiB, 60)

    # --- over budget: OverBudget, a Warning event, nothing changed on the node
    ns.apply(topic("huge", "100Gi"))
    ns.wait_for("OverBudget", lambda: ready(ns, "plateautopic", "huge") == ("False", "OverBudget"))
    assert node_topic(ns, POD, "huge") is None
    events = ns.get("events", "--field-selector", "involvedObject.name=huge")
    assert any(e["type"] == "Warning" and "does not fit" in e["message"] for e in events["items"])

    # --- data survives the pod's deletion; topics and budgets come back with it
    appended = json.loads(ns("exec", POD, "-c", "node", "--", "python", "-c", APPEND, "clicks",
                             "100").strip().splitlines()[-1])  # fmt: skip
    assert appended == [0, 100]
    uid = pod_uid(ns)
    ns.run("delete", "pod", POD, "--wait=true", timeout=120)
    wait_new_pod_ready(ns, uid)
    assert records(ns, "clicks") == 100
    assert budget_on_node(ns, "clicks") == 16 * MiB and budget_on_node(ns, "audit") == 32 * MiB

    # --- a settings change rolls the pod (checksum annotation); data stays
    uid = pod_uid(ns)
    ns.run("patch", "plateaunode", "ingest", "--type=merge",
           "-p", '{"spec": {"settings": {"reserveFraction": 0.05}}}')  # fmt: skip
    wait_new_pod_ready(ns, uid)
    assert records(ns, "clicks") == 100

    # --- the node loses its topics (an empty volume): the resync puts them back
    for name in ("clicks", "audit", "inference_logs"):
        assert node_call(ns, POD, "DELETE", f"/admin/topics/{name}")[0] == 204
    ns.wait_for(
        "the resync to put the topics back",
        lambda: all(node_topic(ns, POD, n) for n in ("clicks", "audit", "inference_logs")),
        RESYNC_BOUND,
    )
    assert budget_on_node(ns, "clicks") == 16 * MiB

    # --- the volume cannot grow on this StorageClass: Degraded says so, the node runs on
    ns.run("patch", "plateaunode", "ingest", "--type=merge",
           "-p", '{"spec": {"storage": {"size": "30Gi"}}}')  # fmt: skip
    ns.wait_for(
        "Degraded/ExpansionUnsupported",
        lambda: (
            condition(ns.get("plateaunode", "ingest"), "Degraded")
            == ("True", "ExpansionUnsupported")
        ),
        RESYNC_BOUND,
    )
    # the node keeps the capacity of the volume it has, and no roll happened for it
    assert ns.get("plateaunode", "ingest")["status"]["capacityBytes"] == 20 * GiB
    assert ready(ns, "plateaunode", "ingest")[0] == "True"

    # --- pause the node, scale it to 0: its topics go NodeUnreachable; unpause: Ready again
    ns.run("annotate", "plateaunode", "ingest", "plateau.dev/paused=true")
    # as a person would: pause, let a reconcile already under way finish, then act
    time.sleep(RESYNC_SECONDS)
    ns.run("scale", "statefulset", "plateau-ingest", "--replicas=0")
    ns.wait_for("the node pod gone", lambda: not ns.exists("pod", POD), 120)
    ns.wait_for(
        "NodeUnreachable",
        lambda: ready(ns, "plateautopic", "audit") == ("False", "NodeUnreachable"),
        RESYNC_BOUND,
    )
    time.sleep(2 * RESYNC_SECONDS)
    assert ns.get("statefulset", "plateau-ingest")["spec"]["replicas"] == 0, "paused: left alone"
    ns.run("annotate", "plateaunode", "ingest", "plateau.dev/paused-")
    ns.wait_for("the node pod back", lambda: ns.exists("pod", POD), RESYNC_BOUND)
    ns.wait_ready(f"pod/{POD}", timeout=240)
    wait_ready(ns, release, "plateautopic", "audit", timeout=360)
    assert records(ns, "clicks") == 0  # wiped above, put back empty

    # --- deletion policies: Delete removes the data, Retain keeps it
    ns.run("delete", "plateautopic", "clicks", "audit", "--wait=true", timeout=120)
    assert node_topic(ns, POD, "clicks") is None
    assert node_topic(ns, POD, "audit") is not None

    # --- the namespace, with a node and topics in it, terminates
    t1 = time.monotonic()
    ns.run("delete", "namespace", ns.namespace, "--timeout=180s", namespaced=False, timeout=240)
    assert not ns.exists("namespace", ns.namespace)
    print(json.dumps({"first_ready_seconds": round(first_ready, 1),
                      "namespace_deletion_seconds": round(time.monotonic() - t1, 1),
                      **{k: round(v, 1) for k, v in release.timings.items()}}))  # fmt: skip


def test_operator_restart_mid_reconcile_duplicates_and_loses_nothing(
    release: Release, kube: Kube
) -> None:
    ns = new_namespace(kube, "restart")
    try:
        node = {
            "apiVersion": API,
            "kind": "PlateauNode",
            "metadata": {"name": "ingest"},
            "spec": {"storage": {"size": "1Gi"}},
        }
        ns.apply(node)
        ns.wait_for("the node pod", lambda: ns.exists("pod", POD), 120)
        ns.wait_ready(f"pod/{POD}", timeout=240)
        wait_ready(ns, release, "plateaunode", "ingest")

        names = [f"t{i:02d}" for i in range(24)]
        operator = release.operator_pod()["metadata"]["name"]
        ns.apply([topic(n, f"{8 + i}Mi", partitions=1 + i % 3) for i, n in enumerate(names)])

        # killed (no grace) as soon as the first topic is Ready: in the middle of the work
        def ready_now() -> int:
            listed = ns.get("plateautopics")["items"]
            return sum(condition(t)[0] == "True" for t in listed)

        at_kill = ns.wait_for("a first topic Ready", ready_now, 120, interval=0.1)
        release.system.run("delete", "pod", operator, "--grace-period=0", "--force")
        print(json.dumps({"topics_ready_when_the_operator_was_killed": at_kill, "of": len(names)}))
        release.system.wait_for(
            "a new operator pod",
            lambda: release.operator_pod().get("metadata", {}).get("name") not in (None, operator),
            180,
        )
        for n in names:
            wait_ready(ns, release, "plateautopic", n)

        status, listed = node_call(ns, POD, "GET", "/topics")
        assert status == 200
        on_node = sorted(t["name"] for t in listed["topics"])
        assert on_node == names, "each topic exactly once on the node"
        for i, n in enumerate(names):
            found = node_topic(ns, POD, n)
            assert found and found["retention"]["max_bytes"] == (8 + i) * MiB
            assert found["partitions"] == 1 + i % 3
        # the node's children exist once each
        selector = "-l", "plateau.dev/node=ingest"
        assert len(ns.get("statefulsets", *selector)["items"]) == 1
        assert len(ns.get("services", *selector)["items"]) == 2
        assert len(ns.get("configmaps", *selector)["items"]) == 1
        assert len(ns.get("secrets", *selector)["items"]) == 1
        assert len(ns.get("pvc")["items"]) == 1
        assert ns.get("pod", POD)["status"]["containerStatuses"][0]["restartCount"] == 0
    finally:
        ns.run("delete", "namespace", ns.namespace, "--wait=false", namespaced=False, check=False)
