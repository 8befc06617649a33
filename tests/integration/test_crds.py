"""The CRDs on a real kube-apiserver: they install, the examples are accepted, and each
invalid object is rejected with a message that says what to fix."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.kubeapi import ROOT, KubeApi

NS = "default"


def test_examples_are_accepted_with_defaults_and_short_names(kube: KubeApi) -> None:
    r = kube.kubectl("apply", "-n", NS, "-f", str(ROOT / "examples"))
    assert "created" in r.stdout or "unchanged" in r.stdout
    got = yaml.safe_load(kube.kubectl("get", "pn", "ingest", "-n", NS, "-o", "yaml").stdout)
    assert got["spec"]["storage"]["accessModes"] == ["ReadWriteOnce"]  # defaulted
    got = yaml.safe_load(kube.kubectl("get", "pt", "inference-logs", "-n", NS, "-o", "yaml").stdout)
    assert got["spec"]["retention"]["maxBytes"] == "5Gi"
    listed = kube.kubectl("get", "plateau", "-n", NS).stdout  # the category
    assert "inference-logs" in listed and "ingest" in listed
    columns = kube.kubectl("get", "pt", "-n", NS).stdout.splitlines()[0].split()
    assert columns[:4] == ["NAME", "NODE", "PARTITIONS", "BUDGET"]


TOPIC: dict[str, Any] = {
    "apiVersion": "plateau.dev/v1alpha1",
    "kind": "PlateauTopic",
    "metadata": {"name": "t", "namespace": NS},
    "spec": {"nodeRef": {"name": "n"}, "partitions": 2, "retention": {"maxBytes": "1Gi"}},
}


def topic(name: str, **spec: Any) -> dict[str, Any]:
    doc = copy.deepcopy(TOPIC)
    doc["metadata"]["name"] = name
    doc["spec"].update(spec)
    return doc


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"partitions": 0}, "greater than or equal to 1"),
        ({"retention": {"maxBytes": "10Xi"}}, "maxBytes must be a non-negative quantity"),
        ({"retention": {"maxBytes": "1Gi", "maxAge": "1y"}}, "should match"),
        ({"segment": {"maxBytes": "0"}}, "segment.maxBytes must be a positive quantity"),
        ({"segment": {"format": "csv"}}, 'Unsupported value: "csv"'),
        ({"topicName": "Bad/Name"}, "should match"),
        ({"deletionPolicy": "Orphan"}, "Unsupported value"),
        ({"nodeRef": {}}, "spec.nodeRef.name: Required value"),
    ],
)
def test_invalid_topics_are_rejected_with_what_to_fix(
    kube: KubeApi, spec: dict[str, Any], message: str
) -> None:
    r = kube.apply(topic("bad", **spec))
    assert r.returncode != 0 and message in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nodeRef": {"name": "other"}}, "nodeRef is immutable"),
        ({"partitions": 1}, "partitions never decrease"),
        ({"topicName": "renamed"}, "topicName is immutable"),
    ],
)
def test_topic_updates_that_would_break_records_are_rejected(
    kube: KubeApi, change: dict[str, Any], message: str
) -> None:
    name = f"upd-{next(iter(change)).lower()}"
    assert kube.apply(topic(name)).returncode == 0
    r = kube.apply(topic(name, **change))
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert kube.apply(topic(name, partitions=3)).returncode == 0  # growing is fine


NODE: dict[str, Any] = {
    "apiVersion": "plateau.dev/v1alpha1",
    "kind": "PlateauNode",
    "metadata": {"name": "n", "namespace": NS},
    "spec": {"storage": {"size": "10Gi", "storageClassName": "fast"}},
}


def test_node_storage_never_shrinks_and_is_well_formed(kube: KubeApi) -> None:
    assert kube.apply(NODE).returncode == 0
    shrunk = copy.deepcopy(NODE)
    shrunk["spec"]["storage"]["size"] = "5Gi"
    r = kube.apply(shrunk)
    assert r.returncode != 0 and "storage.size never shrinks" in r.stderr, r.stderr
    moved = copy.deepcopy(NODE)
    moved["spec"]["storage"]["storageClassName"] = "slow"
    r = kube.apply(moved)
    assert r.returncode != 0 and "storageClassName is immutable" in r.stderr, r.stderr
    grown = copy.deepcopy(NODE)
    grown["spec"]["storage"]["size"] = "20Gi"
    assert kube.apply(grown).returncode == 0
    bad = copy.deepcopy(NODE)
    bad["metadata"]["name"] = "bad"
    bad["spec"]["storage"]["size"] = "lots"
    r = kube.apply(bad)
    assert r.returncode != 0 and "positive quantity" in r.stderr, r.stderr
