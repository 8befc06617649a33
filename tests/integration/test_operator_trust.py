"""The operator on a shared cluster, against a real kube-apiserver and a real node.

What a team applying YAML through GitOps relies on: another team's PlateauTopic
cannot change or delete its topic, GitOps labels never reach the children, the
operator never takes over an object it did not make, sends its token nowhere a
PlateauNode's author chooses, files each failure under the right reason, writes
status only when it changes, and never holds a deletion forever.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from plateau.protocol import JSON
from testkit.arrowhttp import append
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

TOKEN = NODE_TOKEN
GiB, MiB = 1 << 30, 1 << 20
API = "plateau.dev/v1alpha1"
OPERATOR_LABELS = {
    "app.kubernetes.io/name": "plateau-node",
    "app.kubernetes.io/managed-by": "plateau-operator",
}


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    with managed_node(tmp_path / "data") as proc:
        yield proc


@pytest.fixture
def operator(kube: KubeApi, tmp_path: Path) -> Iterator[Operator]:
    with running_operator(kube, tmp_path / "operator.log") as op:
        yield op


_spaces = iter(range(1000))


@pytest.fixture
def ns(kube: KubeApi) -> str:
    name = f"team-{next(_spaces)}"
    kube.kubectl("create", "namespace", name)
    return name


def secret(ns: str, name: str, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "data": {"token": base64.b64encode(token.encode()).decode()},
    }


def plateau_node(ns: str, name: str, url: str, secret_name: str = "node-token",
                 **meta: Any) -> dict[str, Any]:  # fmt: skip
    annotations = {"plateau.dev/endpoint": url, **meta.pop("annotations", {})}
    return {
        "apiVersion": API,
        "kind": "PlateauNode",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations, **meta},
        "spec": {"storage": {"size": "10Gi"}, "auth": {"secretRef": {"name": secret_name}}},
    }


def with_node(kube: KubeApi, ns: str, node: NodeProcess, name: str = "n") -> None:
    assert kube.apply(secret(ns, "node-token", TOKEN)).returncode == 0
    assert kube.apply(plateau_node(ns, name, node.url)).returncode == 0


def topic(ns: str, name: str, budget: str = "100Mi", **spec: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns, **spec.pop("metadata", {})}
    return {
        "apiVersion": API,
        "kind": "PlateauTopic",
        "metadata": meta,
        "spec": {"nodeRef": {"name": "n"}, "retention": {"maxBytes": budget}, **spec},
    }


def ready(kube: KubeApi, ns: str, name: str, kind: str = "plateautopic") -> tuple[str, str]:
    c = condition(get(kube, kind, name, ns))
    return c.get("status", ""), c.get("reason", "")


def wait_ready(kube: KubeApi, op: Operator, ns: str, name: str, want: tuple[str, str]) -> str:
    try:
        wait_until(lambda: ready(kube, ns, name) == want, f"{name} {want}")
    except AssertionError:
        print(op.tail())
        raise
    return str(condition(get(kube, "plateautopic", name, ns))["message"])


def on_node(node: NodeProcess, name: str) -> dict[str, Any] | None:
    r = httpx.get(f"{node.url}/admin/topics/{name}", headers=node.headers())
    return r.json() if r.status_code == 200 else None


def rows(node: NodeProcess, name: str, n: int) -> None:
    with httpx.Client(base_url=node.url, headers=node.headers()) as c:
        append(c, name, "0", pa.table({"x": list(range(n))}))


def test_a_second_claimant_changes_nothing_and_deleting_it_deletes_nothing(
    kube: KubeApi, node: NodeProcess, operator: Operator, ns: str
) -> None:
    with_node(kube, ns, node)
    kube.apply(topic(ns, "events", "100Mi", deletionPolicy="Delete"))
    wait_ready(kube, operator, ns, "events", ("True", "Synced"))
    rows(node, "events", 3)
    uid = get(kube, "plateautopic", "events", ns)["metadata"]["uid"]
    assert (on_node(node, "events") or {}).get("owner", {}).get("uid") == uid

    kube.apply(topic(ns, "other", "10Mi", topicName="events", deletionPolicy="Delete"))
    message = wait_ready(kube, operator, ns, "other", ("False", "ResourceConflict"))
    assert f"{ns}/events" in message and uid in message
    found = on_node(node, "events")
    assert found and found["retention"]["max_bytes"] == 100 * MiB, "the budget is the owner's"
    kube.kubectl("delete", "plateautopic", "other", "-n", ns, "--wait=true", "--timeout=60s")
    found = on_node(node, "events")
    assert found and found["usage"]["records"] == 3, "the owner's records are all there"
    assert ready(kube, ns, "events") == ("True", "Synced")
    warnings = [e for e in events(kube, ns, "other") if e["type"] == "Warning"]
    assert any("belongs to" in e["message"] for e in warnings)


def test_a_hand_made_topic_is_taken_only_with_the_adoption_annotation(
    kube: KubeApi, node: NodeProcess, operator: Operator, ns: str
) -> None:
    with_node(kube, ns, node)
    r = httpx.put(f"{node.url}/admin/topics/manual", headers=node.headers(),
                  json={"partitions": 1, "retention": {"max_bytes": 50 * MiB}})  # fmt: skip
    assert r.status_code == 201
    kube.apply(topic(ns, "manual", "20Mi"))
    message = wait_ready(kube, operator, ns, "manual", ("False", "ResourceConflict"))
    assert "plateau.dev/adopt=true" in message
    assert (on_node(node, "manual") or {})["retention"]["max_bytes"] == 50 * MiB

    kube.kubectl("annotate", "plateautopic", "manual", "-n", ns, "plateau.dev/adopt=true")
    message = wait_ready(kube, operator, ns, "manual", ("True", "Synced"))
    assert "adopted" in message
    found = on_node(node, "manual") or {}
    assert found["retention"]["max_bytes"] == 20 * MiB
    assert found["owner"]["uid"] == get(kube, "plateautopic", "manual", ns)["metadata"]["uid"]


def test_a_recreated_topic_takes_its_retained_data_back_and_says_so(
    kube: KubeApi, node: NodeProcess, operator: Operator, ns: str
) -> None:
    with_node(kube, ns, node)
    kube.apply(topic(ns, "keep", partitions=3))
    wait_ready(kube, operator, ns, "keep", ("True", "Synced"))
    rows(node, "keep", 5)
    kube.kubectl("delete", "plateautopic", "keep", "-n", ns, "--wait=true", "--timeout=60s")
    assert (on_node(node, "keep") or {}).get("usage", {}).get("records") == 5, "Retain"

    kube.apply(topic(ns, "keep", partitions=3))  # GitOps re-creates it: a new UID
    message = wait_ready(kube, operator, ns, "keep", ("True", "Synced"))
    assert "took back its retained topic" in message
    uid = get(kube, "plateautopic", "keep", ns)["metadata"]["uid"]
    found = on_node(node, "keep") or {}
    assert found["owner"]["uid"] == uid and found["usage"]["records"] == 5
    assert any(e["reason"] == "Reclaimed" for e in events(kube, ns, "keep"))

    # fewer partitions than the node's: Invalid (not OverBudget), nothing changed
    kube.kubectl("delete", "plateautopic", "keep", "-n", ns, "--wait=true", "--timeout=60s")
    kube.apply(topic(ns, "keep", partitions=1))
    message = wait_ready(kube, operator, ns, "keep", ("False", "Invalid"))
    assert "never decrease" in message
    assert (on_node(node, "keep") or {})["partitions"] == 3


def test_a_token_the_node_refuses_is_unauthorized_not_unreachable(
    kube: KubeApi, node: NodeProcess, operator: Operator, ns: str
) -> None:
    kube.apply(secret(ns, "wrong", "not-the-token"))
    kube.apply(plateau_node(ns, "n", node.url, secret_name="wrong"))
    kube.apply(topic(ns, "events"))
    message = wait_ready(kube, operator, ns, "events", ("False", "Unauthorized"))
    assert "token" in message and on_node(node, "events") is None


def test_status_is_written_on_change_only_and_a_failure_warns_once(
    kube: KubeApi, node: NodeProcess, operator: Operator, ns: str
) -> None:
    with_node(kube, ns, node)
    kube.apply(topic(ns, "calm"))
    kube.apply(topic(ns, "huge", "100Gi"))
    wait_ready(kube, operator, ns, "calm", ("True", "Synced"))
    wait_ready(kube, operator, ns, "huge", ("False", "OverBudget"))
    version = get(kube, "plateautopic", "calm", ns)["metadata"]["resourceVersion"]
    time.sleep(5 * RESYNC_SECONDS)  # several resyncs, nothing changed
    assert get(kube, "plateautopic", "calm", ns)["metadata"]["resourceVersion"] == version
    warnings = [e for e in events(kube, ns, "huge") if e["type"] == "Warning"]
    assert len(warnings) == 1 and warnings[0].get("count", 1) == 1, warnings
    assert "does not fit" in warnings[0]["message"]
    gen = get(kube, "plateautopic", "calm", ns)["status"]["observedGeneration"]
    assert gen == get(kube, "plateautopic", "calm", ns)["metadata"]["generation"]


def test_children_carry_only_the_operators_labels_and_nothing_is_taken_over(
    kube: KubeApi, node: NodeProcess, operator: Operator, ns: str
) -> None:
    kube.apply(secret(ns, "node-token", TOKEN))
    gitops = {"app.kubernetes.io/instance": "argo-app", "team": "ml"}
    labelled = plateau_node(ns, "n", node.url, labels=gitops,
                            annotations={"argocd.argoproj.io/tracking-id": "app:x"})  # fmt: skip
    assert kube.apply(labelled).returncode == 0
    names = {
        "statefulset": "plateau-n", "service": "plateau-n", "configmap": "plateau-n-config",
        "secret": "plateau-n-token", "networkpolicy": "plateau-n",
    }  # fmt: skip
    uid = wait_until(lambda: get(kube, "plateaunode", "n", ns), "the node")["metadata"]["uid"]
    for kind, name in [*names.items(), ("service", "plateau-n-headless")]:
        child = wait_until(partial(get, kube, kind, name, ns), f"{kind} {name}")
        labels = child["metadata"].get("labels") or {}
        extra = (
            set(labels) - set(OPERATOR_LABELS) - {"plateau.dev/node", "app.kubernetes.io/component"}
        )
        assert not extra and OPERATOR_LABELS.items() <= labels.items(), (kind, labels)
        assert "argocd.argoproj.io/tracking-id" not in (child["metadata"].get("annotations") or {})
        (ref,) = child["metadata"]["ownerReferences"]
        assert ref["uid"] == uid and ref["controller"] is True
    pod_labels = get(kube, "statefulset", "plateau-n", ns)["spec"]["template"]["metadata"]["labels"]
    assert "team" not in pod_labels and "app.kubernetes.io/instance" not in pod_labels
    wait_until(
        lambda: get(kube, "plateaunode", "n", ns).get("status", {}).get("observedGeneration"),
        "status",
    )
    assert not get(kube, "plateaunode", "n", ns)["metadata"].get("finalizers"), "no finalizer"

    # an object that happens to have a child's name is left alone
    foreign = {"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "plateau-taken-config", "namespace": ns},
               "data": {"theirs": "yes"}}  # fmt: skip
    kube.apply(foreign)
    kube.apply(plateau_node(ns, "taken", node.url))
    wait_until(lambda: ready(kube, ns, "taken", "plateaunode") == ("False", "ResourceConflict"),
               "ResourceConflict")  # fmt: skip
    cm = get(kube, "configmap", "plateau-taken-config", ns)
    assert cm["data"] == {"theirs": "yes"} and not cm["metadata"].get("ownerReferences")
    assert "plateau-taken-config" in condition(get(kube, "plateaunode", "taken", ns))["message"]
    kube.kubectl("delete", "plateaunode", "taken", "-n", ns, "--wait=true", "--timeout=60s")
    assert get(kube, "configmap", "plateau-taken-config", ns)["data"] == {"theirs": "yes"}


class _Catcher(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def _any(self) -> None:
        _Catcher.seen.append(f"{self.command} {self.path} {self.headers.get('authorization')}")
        self.send_response(200)
        self.send_header("content-type", JSON)
        self.end_headers()
        self.wfile.write(json.dumps({"capacity_bytes": 1}).encode())

    do_GET = do_PUT = do_DELETE = do_POST = _any

    def log_message(self, *args: Any) -> None:
        pass


def test_a_plateau_node_cannot_send_the_operators_credentials_anywhere(
    kube: KubeApi, tmp_path: Path, ns: str
) -> None:
    """Operator as installed by default (no endpoint override): a PlateauNode naming
    another Secret and a URL of its author's gets no request at that URL."""
    catcher = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Catcher)
    threading.Thread(target=catcher.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{catcher.server_address[1]}"
    kube.apply(secret(ns, "db-password", "hunter2"))
    with running_operator(kube, tmp_path / "operator.log", allow_override=False) as op:
        kube.apply(plateau_node(ns, "n", url, secret_name="db-password"))
        kube.apply(topic(ns, "events"))
        wait_ready(kube, op, ns, "events", ("False", "NodeUnreachable"))
        time.sleep(3 * RESYNC_SECONDS)
    catcher.shutdown()
    assert _Catcher.seen == []
    status = get(kube, "plateaunode", "n", ns)["status"]
    assert status["endpoint"] == f"http://plateau-n.{ns}.svc:3030"


def test_a_deletion_whose_node_cannot_be_reached_lets_go_and_keeps_the_data(
    kube: KubeApi, node: NodeProcess, operator: Operator, ns: str
) -> None:
    with_node(kube, ns, node)
    kube.apply(topic(ns, "events", deletionPolicy="Delete"))
    wait_ready(kube, operator, ns, "events", ("True", "Synced"))
    rows(node, "events", 2)
    node.stop()
    kube.kubectl("delete", "plateautopic", "events", "-n", ns, "--wait=true", "--timeout=90s")
    warned = [e for e in events(kube, ns, "events") if e["reason"] == "DeletionIncomplete"]
    assert warned and "kept on the node" in warned[0]["message"]
    node.start()
    assert (on_node(node, "events") or {}).get("usage", {}).get("records") == 2
    # kopf retried the deletion while it waited (routine): logged at info, never at error
    records = [json.loads(line) for line in operator.log.read_text().splitlines()]
    retries = [r for r in records if "failed temporarily" in r.get("message", "")]
    assert retries and all(r["severity"] == "info" for r in retries), retries[:3]
    errors = [r for r in records if r.get("severity") in ("error", "fatal")]
    assert not errors, errors[:3]
    assert not [e for e in events(kube, ns, "events") if e["type"] == "Error"]


def test_a_new_token_value_rolls_the_node(kube: KubeApi, node: NodeProcess, operator: Operator,
                                          ns: str) -> None:  # fmt: skip
    with_node(kube, ns, node)

    def checksum() -> str:
        sts = get(kube, "statefulset", "plateau-n", ns)
        return str(((sts.get("spec") or {}).get("template", {}).get("metadata", {})
                    .get("annotations") or {}).get("plateau.dev/config-checksum", ""))  # fmt: skip

    before = wait_until(checksum, "the StatefulSet")
    kube.apply(secret(ns, "node-token", "rotated-token"))
    after = wait_until(lambda: (c := checksum()) != before and c, "a new checksum")
    own = get(kube, "secret", "plateau-n-token", ns)
    assert set(own["data"]) == {"readToken"}, "the read token; the write token is the user's"
    kube.kubectl("delete", "secret", "plateau-n-token", "-n", ns)
    wait_until(lambda: (c := checksum()) not in (before, after) and c, "a checksum for new tokens")
    assert get(kube, "secret", "plateau-n-token", ns)["data"]["readToken"]
