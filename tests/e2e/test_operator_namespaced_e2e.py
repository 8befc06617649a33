"""The operator installed for listed namespaces only (``watchNamespaces``), and uninstalled.

Deleting a watched namespace with nodes and topics completes while the
operator runs (its rights over its custom resources come from a
ClusterRoleBinding, which the namespace's deletion cannot take away), and
``helm uninstall`` leaves no finalizer behind: its pre-delete hook stops the
operator and releases every PlateauTopic, so a namespace deleted afterwards,
with no operator at all, still goes. The data stays on the nodes' volumes.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tests.e2e.kube import Kube, new_namespace
from tests.e2e.operator import API, condition, helm, installed, node_topic


def manifests(deletion: str = "Delete") -> list[dict[str, Any]]:
    node = {
        "apiVersion": API,
        "kind": "PlateauNode",
        "metadata": {"name": "ingest"},
        "spec": {"storage": {"size": "1Gi"}},
    }
    topics: list[dict[str, Any]] = [
        {
            "apiVersion": API,
            "kind": "PlateauTopic",
            "metadata": {"name": name},
            "spec": {
                "nodeRef": {"name": "ingest"},
                "retention": {"maxBytes": "8Mi"},
                "deletionPolicy": policy,
            },
        }
        for name, policy in (("dropped", deletion), ("kept", "Retain"))
    ]
    return [node, *topics]


def up(ns: Kube, logs: object) -> None:
    ns.apply(manifests())
    ns.wait_for("the node pod", lambda: ns.exists("pod", "plateau-ingest-0"), 120)
    ns.wait_ready("pod/plateau-ingest-0", timeout=240)
    for name in ("dropped", "kept"):

        def ok(n: str = name) -> bool:
            return (
                ns.exists("plateautopic", n) and condition(ns.get("plateautopic", n))[0] == "True"
            )

        try:
            ns.wait_for(f"{name} Ready", ok, 240)
        except AssertionError:
            print(logs)
            raise
    assert node_topic(ns, "plateau-ingest-0", "dropped") is not None


def test_watched_namespaces_delete_cleanly_and_uninstall_releases_every_finalizer(
    kube: Kube,
) -> None:
    first, second = new_namespace(kube, "watched-a"), new_namespace(kube, "watched-b")
    spaces = f"watchNamespaces={{{first.namespace},{second.namespace}}}"
    try:
        with installed(kube, spaces, uninstall=False) as release:
            # --- a watched namespace with a node and topics: its deletion completes
            up(first, release.logs())
            t0 = time.monotonic()
            first.run("delete", "namespace", first.namespace, "--timeout=180s",
                      namespaced=False, timeout=240)  # fmt: skip
            assert not first.exists("namespace", first.namespace)
            deletion = time.monotonic() - t0

            # --- helm uninstall: no finalizer is left for nobody to remove
            up(second, release.logs())
            t0 = time.monotonic()
            helm(kube, "uninstall", release.name, "--namespace", release.system.namespace,
                 "--wait", "--timeout", "240s")  # fmt: skip
            uninstall = time.monotonic() - t0
            for t in second.get("plateautopics")["items"]:
                assert not t["metadata"].get("finalizers"), t["metadata"]
            assert not second.get("plateaunode", "ingest")["metadata"].get("finalizers")
            # the data stays: the node runs on, its claim holds both topics
            assert node_topic(second, "plateau-ingest-0", "dropped") is not None
            assert second.exists("pvc", "data-plateau-ingest-0")
            second.run("delete", "namespace", second.namespace, "--timeout=180s",
                       namespaced=False, timeout=240)  # fmt: skip
            assert not second.exists("namespace", second.namespace)
            print(json.dumps({"namespace_deletion_seconds": round(deletion, 1),
                              "uninstall_seconds": round(uninstall, 1)}))  # fmt: skip
    finally:
        for space in (first, second):
            space.run("delete", "namespace", space.namespace, "--wait=false",
                      namespaced=False, check=False)  # fmt: skip
