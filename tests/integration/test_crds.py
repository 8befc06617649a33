"""The CRDs on a real kube-apiserver: they install, the examples are accepted, and each
invalid object is rejected with a message that says what to fix."""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from plateau_operator.resources import names
from testkit.kubeapi import ROOT, KubeApi

NS = "default"
WHOLE = "must be a whole number of bytes: not milli (500m is half a byte; write 500M or 500Mi)"
DURATION = "must be a duration such as 30s, 15m, 12h, 7d or 1h30m"
TOPIC_NAME = (
    "topicName must be 1 to 128 lowercase letters, digits, '-', '_' and '.', not starting "
    "with '.', such as inference_logs or events.v2"
)
NODE_REF = "nodeRef.name must be the name of a PlateauNode in this namespace"


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
        ({"retention": {"maxBytes": "1Gi", "maxAge": "1y"}}, f"retention.maxAge {DURATION}"),
        ({"retention": {"maxBytes": "1Gi", "maxAge": "1 day"}}, f"retention.maxAge {DURATION}"),
        ({"retention": {"maxBytes": "1Gi", "maxAge": "7 days"}}, f"retention.maxAge {DURATION}"),
        ({"retention": {"maxBytes": "lots"}}, "maxBytes must be a non-negative quantity"),
        ({"retention": {"maxBytes": "-1Gi"}}, "maxBytes must be a non-negative quantity"),
        ({"segment": {"maxAge": "5 min"}}, f"segment.maxAge {DURATION}"),
        ({"segment": {"maxAge": "1h30"}}, f"segment.maxAge {DURATION}"),
        ({"retention": {"maxBytes": "500m"}}, f"retention.maxBytes {WHOLE}"),
        ({"retention": {"maxBytes": "1.5"}}, f"retention.maxBytes {WHOLE}"),
        ({"retention": {"maxBytes": "1.0001k"}}, f"retention.maxBytes {WHOLE}"),
        ({"retention": {"maxBytes": "1000m"}}, f"retention.maxBytes {WHOLE}"),  # meant 1000M
        ({"segment": {"maxBytes": "64m"}}, f"segment.maxBytes {WHOLE}"),
        ({"segment": {"maxBytes": "0.1Ki"}}, f"segment.maxBytes {WHOLE}"),  # 102.4 bytes
        ({"segment": {"maxBytes": "0"}}, "segment.maxBytes must be a positive quantity"),
        ({"segment": {"format": "csv"}}, 'Unsupported value: "csv"'),
        ({"topicName": "Bad/Name"}, TOPIC_NAME),
        ({"topicName": ".hidden"}, TOPIC_NAME),
        ({"topicName": ""}, TOPIC_NAME),
        ({"topicName": "x" * 129}, "Too long: may not be more than 128"),
        ({"nodeRef": {"name": "Node_1"}}, NODE_REF),
        ({"nodeRef": {"name": ""}}, NODE_REF),
        ({"deletionPolicy": "Orphan"}, "Unsupported value"),
        ({"nodeRef": {}}, "spec.nodeRef.name: Required value"),
    ],
)
def test_invalid_topics_are_rejected_with_what_to_fix(
    kube: KubeApi, spec: dict[str, Any], message: str
) -> None:
    r = kube.apply(topic("bad", **spec))
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert "should match" not in r.stderr  # a sentence, never a raw regex


def test_a_topic_named_longer_than_a_node_topic_name_needs_topic_name(kube: KubeApi) -> None:
    long = "t" * 129  # a valid Kubernetes name, too long for the node
    r = kube.apply(topic(long))
    assert r.returncode != 0, r.stderr
    assert "set spec.topicName or a shorter name" in r.stderr and "should match" not in r.stderr
    assert kube.apply(topic(long, topicName="events_long")).returncode == 0


@pytest.mark.parametrize(
    "spec",
    [
        {"retention": {"maxBytes": "1.5Gi", "maxAge": "1h30m"}},
        {"retention": {"maxBytes": "0.5Ki", "maxAge": "7d"}},  # 512 bytes
        {"retention": {"maxBytes": "2.25Mi", "maxAge": "500ms"}},
        {"retention": {"maxBytes": 1000, "maxAge": "1.5h"}},
        {"retention": {"maxBytes": "1e3", "maxAge": "2w"}},
        {"retention": {"maxBytes": "0"}, "segment": {"maxBytes": "64Mi", "maxAge": "30s"}},
        {"retention": {"maxBytes": "1.5k"}, "segment": {"maxBytes": 4096, "maxAge": "15m"}},
        {"retention": {"maxBytes": "8Ei"}, "segment": {"maxBytes": "1.5Ti", "maxAge": "12h"}},
    ],
)
def test_whole_byte_quantities_and_durations_are_accepted(
    kube: KubeApi, spec: dict[str, Any]
) -> None:
    r = kube.apply(topic("good", **spec))
    assert r.returncode == 0, r.stderr


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


def test_topic_status_records_its_owner_and_no_sync_time(kube: KubeApi) -> None:
    assert kube.apply(topic("owned")).returncode == 0
    owner = {"namespace": NS, "name": "owned", "uid": "0f9e8d7c"}
    status = {"owner": owner, "lastSyncTime": "2026-01-01T00:00:00Z", "topicName": "owned"}
    kube.kubectl(
        "patch", "pt", "owned", "-n", NS, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    got = json.loads(kube.kubectl("get", "pt", "owned", "-n", NS, "-o", "json").stdout)
    assert got["status"]["owner"] == owner
    assert "lastSyncTime" not in got["status"]  # no longer in the schema: pruned


def node(name: str, **storage: Any) -> dict[str, Any]:
    doc = copy.deepcopy(NODE)
    doc["metadata"]["name"] = name
    doc["spec"]["storage"].update(storage)
    return doc


# A StatefulSet labels its pods controller-revision-hash=<its name>-<hash>, the hash
# being a 32-bit number's decimal digits (up to 10): a label value, at most 63.
MAX_NAME = 63 - len(names("")["statefulset"]) - len("-") - 10


def test_the_longest_node_name_makes_valid_children() -> None:
    assert MAX_NAME == 44
    longest = "n" * MAX_NAME
    children = names(longest)
    assert len(f"{children['statefulset']}-{'9' * 10}") == 63
    dns_label = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # Services (DNS-1035), pod
    for kind in ("statefulset", "service", "headless", "pod"):
        assert len(children[kind]) <= 63 and dns_label.match(children[kind]), kind
    assert all(len(name) <= 253 for name in children.values())  # DNS-1123 subdomains
    assert len(f"{names('n' * (MAX_NAME + 1))['statefulset']}-{'9' * 10}") == 64


def test_node_names_the_children_cannot_take_are_refused(kube: KubeApi) -> None:
    r = kube.apply(node("a" * MAX_NAME))
    assert r.returncode == 0, r.stderr
    r = kube.apply(node("a" * (MAX_NAME + 1)))
    assert r.returncode != 0, r.stderr
    assert "metadata.name must be at most 44 characters" in r.stderr, r.stderr
    assert "controller-revision-hash=plateau-<name>-<hash of up to 10 characters>" in r.stderr
    for bad in ("n.one", "1node"):  # valid object names, but not DNS-1035 labels
        r = kube.apply(node(bad))
        assert r.returncode != 0, bad
        assert "metadata.name must be lowercase letters, digits and '-'" in r.stderr, r.stderr
        assert "plateau-<name>-headless" in r.stderr, r.stderr
    r = kube.apply(node("a" * MAX_NAME, size="11Gi"))
    assert r.returncode == 0, r.stderr


def until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """The API server serves a changed CRD a moment after accepting it."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_node_named_before_the_name_rules_can_still_change_and_go(kube: KubeApi) -> None:
    """The name rules run on create only: a node made before them (under an older CRD)
    still takes updates, and the finalizer the operator removes on delete, so its
    deletion completes."""
    crd = "crd/plateaunodes.plateau.dev"
    old = json.loads(kube.kubectl("get", crd, "-o", "json").stdout)
    del old["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    kube.kubectl("replace", "-f", "-", stdin=json.dumps(old))
    legacy = node("legacy-" + "x" * MAX_NAME)
    try:
        until(lambda: kube.apply(legacy).returncode == 0, "the older CRD never served")
    finally:  # the module's later tests need the real CRD back
        kube.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f",
            str(ROOT / "crds" / "plateau.dev_plateaunodes.yaml"),
        )  # fmt: skip
    probe = node("probe-" + "x" * MAX_NAME)
    until(lambda: kube.apply(probe).returncode != 0, "the name rules never came back")
    name = legacy["metadata"]["name"]
    changed = {
        "metadata": {"finalizers": ["plateau.dev/test"]},
        "spec": {"storage": {"size": "11Gi"}},
    }
    kube.kubectl("patch", "pn", name, "-n", NS, "--type=merge", "-p", json.dumps(changed))
    kube.kubectl(
        "patch", "pn", name, "-n", NS, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"image": "plateau:1"}}),
    )  # fmt: skip
    kube.kubectl("delete", "pn", name, "-n", NS, "--wait=false")
    released = {"metadata": {"finalizers": None}}
    kube.kubectl("patch", "pn", name, "-n", NS, "--type=merge", "-p", json.dumps(released))
    gone = kube.kubectl("get", "pn", name, "-n", NS, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, gone.stdout


@pytest.mark.parametrize(
    ("storage", "settings", "message"),
    [
        ({"size": "500m"}, {}, f"storage.size {WHOLE}"),
        ({"size": "1.5"}, {}, f"storage.size {WHOLE}"),
        # a YAML number fails int-or-string's type check, before any CEL rule runs
        ({"size": 1.5}, {}, "spec.storage.size in body must be of type integer,string"),
        ({}, {"segment": {"maxBytes": "500m"}}, f"settings.segment.maxBytes {WHOLE}"),
        ({}, {"segment": {"maxBytes": "1.5"}}, f"settings.segment.maxBytes {WHOLE}"),
        ({}, {"segment": {"maxAge": "1 day"}}, f"settings.segment.maxAge {DURATION}"),
        ({}, {"segment": {"maxAge": "1y"}}, f"settings.segment.maxAge {DURATION}"),
        (
            {"accessModes": ["ReadWriteOncePod"]},
            {},
            "storage.accessModes cannot hold ReadWriteOncePod: Spark's executors mount the "
            "node's volume read-only next to the node, which ReadWriteOncePod forbids; use "
            "ReadWriteOnce",
        ),
        ({"accessModes": []}, {}, "spec.storage.accessModes: Invalid value"),
    ],
)
def test_invalid_nodes_are_rejected_with_what_to_fix(
    kube: KubeApi, storage: dict[str, Any], settings: dict[str, Any], message: str
) -> None:
    doc = node("bad", **storage)
    if settings:
        doc["spec"]["settings"] = settings
    r = kube.apply(doc)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert "should match" not in r.stderr


def test_whole_byte_sizes_durations_and_shared_volumes_are_accepted(kube: KubeApi) -> None:
    doc = node("good", size="1.5Gi", accessModes=["ReadWriteMany"])
    doc["spec"]["settings"] = {"segment": {"maxBytes": "0.5Mi", "maxAge": "1h30m"}}
    r = kube.apply(doc)
    assert r.returncode == 0, r.stderr


def test_allowed_namespaces_are_namespace_names(kube: KubeApi) -> None:
    doc = node("net")
    doc["spec"]["network"] = {"allowedNamespaces": ["spark-jobs", "monitoring"]}
    assert kube.apply(doc).returncode == 0
    got = json.loads(kube.kubectl("get", "pn", "net", "-n", NS, "-o", "json").stdout)
    assert got["spec"]["network"]["allowedNamespaces"] == ["spark-jobs", "monitoring"]
    for bad, message in [
        (["Spark_Jobs"], "network.allowedNamespaces must hold namespace names"),
        (["team.a"], "network.allowedNamespaces must hold namespace names"),
        (["x" * 64], "Too long"),
        (["a", "a"], "Duplicate value"),
        ([f"ns{i}" for i in range(65)], "must have at most 64 items"),
    ]:
        doc["spec"]["network"]["allowedNamespaces"] = bad
        r = kube.apply(doc)
        assert r.returncode != 0 and message in r.stderr, (bad, r.stderr)


def test_storage_class_and_access_modes_are_immutable(kube: KubeApi) -> None:
    assert kube.apply(node("fixed")).returncode == 0  # accessModes defaulted
    # applied again unchanged, and grown: the defaulted accessModes compare equal
    assert kube.apply(node("fixed")).returncode == 0
    r = kube.apply(node("fixed", size="12Gi"))
    assert r.returncode == 0, r.stderr
    r = kube.apply(node("fixed", size="12Gi", accessModes=["ReadWriteOnce"]))
    assert r.returncode == 0, r.stderr
    changes: list[tuple[dict[str, Any], str]] = [
        ({"storageClassName": "slow"}, "storage.storageClassName is immutable"),
        ({"accessModes": ["ReadWriteMany"]}, "storage.accessModes is immutable"),
        ({"accessModes": ["ReadWriteOnce", "ReadWriteMany"]}, "storage.accessModes is immutable"),
    ]
    for change, message in changes:
        r = kube.apply(node("fixed", size="12Gi", **change))
        assert r.returncode != 0 and message in r.stderr, (change, r.stderr)
        assert "create a new PlateauNode" in r.stderr
    # removing or adding a class would change the claim template as much as renaming it
    unset = node("fixed", size="12Gi")
    del unset["spec"]["storage"]["storageClassName"]
    r = kube.apply(unset)
    assert r.returncode != 0 and "storage.storageClassName is immutable" in r.stderr, r.stderr
    default_class = node("defaulted")
    del default_class["spec"]["storage"]["storageClassName"]
    assert kube.apply(default_class).returncode == 0
    r = kube.apply(node("defaulted"))  # now naming class "fast"
    assert r.returncode != 0 and "storage.storageClassName is immutable" in r.stderr, r.stderr
    shared = node("shared", accessModes=["ReadWriteMany"])
    assert kube.apply(shared).returncode == 0
    assert kube.apply(node("shared", accessModes=["ReadWriteMany"], size="20Gi")).returncode == 0
    r = kube.apply(node("shared", size="20Gi"))  # dropping the field defaults it: a change
    assert r.returncode != 0 and "storage.accessModes is immutable" in r.stderr, r.stderr


def test_node_status_shows_its_image_and_token_secret(kube: KubeApi) -> None:
    assert kube.apply(node("shown")).returncode == 0
    status = {"image": "registry.example/plateau:1.2.3", "tokenSecret": "plateau-shown-token"}
    kube.kubectl(
        "patch", "pn", "shown", "-n", NS, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip
    got = json.loads(kube.kubectl("get", "pn", "shown", "-n", NS, "-o", "json").stdout)
    assert {k: got["status"][k] for k in status} == status
    plain = kube.kubectl("get", "pn", "shown", "-n", NS).stdout.splitlines()
    assert "IMAGE" not in plain[0].split()  # priority 1: only with -o wide
    wide = kube.kubectl("get", "pn", "shown", "-n", NS, "-o", "wide").stdout.splitlines()
    header = wide[0].split()
    assert "IMAGE" in header and "registry.example/plateau:1.2.3" in wide[1].split()
