"""The operator's pure parts: specs read from custom resources, the objects a PlateauNode
becomes, and condition bookkeeping. No cluster needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from plateau.client.units import parse_duration
from plateau.protocol.replies import Memory, NodeInfo
from plateau.protocol.topic_config import TopicConfigRequest
from plateau.settings import load_settings
from plateau_operator import resources
from plateau_operator.crd import CHECKSUM_ANNOTATION
from plateau_operator.spec import InvalidSpec, NodeSpec, TopicSpec
from plateau_operator.status import node_usage, set_condition

ROOT = Path(__file__).resolve().parents[2]
GiB = 1 << 30


def node(**spec: object) -> NodeSpec:
    return NodeSpec.parse("ingest", {"storage": {"size": "20Gi"}, **spec}, "img:1")


def test_topic_spec_turns_quantities_and_durations_into_the_nodes_units() -> None:
    t = TopicSpec.parse(
        "inference-logs",
        {
            "nodeRef": {"name": "ingest"},
            "topicName": "inference_logs",
            "partitions": 4,
            "retention": {"maxBytes": "5Gi", "maxAge": "1h30m"},
            "segment": {"maxBytes": "64Mi", "maxAge": "60s", "format": "arrow"},
            "deletionPolicy": "Delete",
        },
    )
    assert (t.node, t.topic, t.partitions, t.max_bytes) == ("ingest", "inference_logs", 4, 5 * GiB)
    assert t.max_age_seconds == 5400 and t.delete_data
    body = t.admin_request()
    # what the manifest leaves out goes as null: the node's default (a removed field reverts)
    assert body["segment"] == {
        "format": "arrow",
        "compression": None,
        "max_rows": None,
        "max_bytes": 64 << 20,
        "max_age_seconds": 60.0,
    }
    TopicConfigRequest.model_validate(body)  # the node's own model accepts it


def test_topic_spec_defaults_and_errors() -> None:
    t = TopicSpec.parse("events", {"nodeRef": {"name": "n"}, "retention": {"maxBytes": 1000}})
    assert (t.topic, t.partitions, t.max_age_seconds, t.delete_data) == ("events", 1, None, False)
    assert t.admin_request()["retention"] == {"max_bytes": 1000, "max_age_seconds": None}
    with pytest.raises(InvalidSpec, match="maxBytes"):
        TopicSpec.parse("x", {"nodeRef": {"name": "n"}, "retention": {"maxBytes": "lots"}})
    with pytest.raises(InvalidSpec, match="required"):
        TopicSpec.parse("x", {"nodeRef": {"name": "n"}})


def test_node_config_is_a_settings_file_the_node_loads(tmp_path: Path) -> None:
    spec = node(settings={"durability": "relaxed", "segment": {"maxBytes": "8Mi"}})
    cm = resources.config_map(spec, "ns")
    path = tmp_path / "node.yaml"
    path.write_text(cm["data"][resources.CONFIG_FILE])
    settings = load_settings(path)
    assert settings.storage.capacity_bytes == 20 * GiB  # the volume's size
    assert settings.storage.auto_create_topics is False
    assert settings.storage.durability.mode == "relaxed"
    assert settings.storage.topic_defaults.segment.max_bytes == 8 << 20
    assert settings.server.bind == "0.0.0.0:3030"


def test_statefulset_runs_one_hardened_pod_on_its_sized_claim() -> None:
    sts = resources.statefulset(node(storage={"size": "20Gi", "storageClassName": "fast"}), "ns")
    assert sts["spec"]["replicas"] == 1
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == str(20 * GiB)
    assert claim["spec"]["storageClassName"] == "fast"
    pod = sts["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["fsGroup"] == 10001
    (c,) = pod["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    token = c["env"][0]["valueFrom"]["secretKeyRef"]
    assert token == {"name": "plateau-ingest-token", "key": "token"}
    assert resources.names("ingest")["pvc"] == "data-plateau-ingest-0"


def test_settings_changes_roll_the_pod_and_nothing_else_does() -> None:
    def digest(spec: NodeSpec) -> str:
        tpl = resources.statefulset(spec, "ns")["spec"]["template"]["metadata"]
        return str(tpl["annotations"][CHECKSUM_ANNOTATION])

    base = digest(node())
    assert digest(node()) == base
    assert digest(node(settings={"durability": "relaxed"})) != base
    assert digest(node(storage={"size": "30Gi"})) != base  # capacity is a setting
    assert digest(node(auth={"secretRef": {"name": "mine"}})) != base


def test_a_new_token_value_rolls_the_pod() -> None:
    """The pod reads its tokens at start: a rotated Secret needs a new pod (same name)."""

    def digest(write: str, read: str) -> str:
        sts = resources.statefulset(node(), "ns", resources.token_digest(write, read))
        return str(sts["spec"]["template"]["metadata"]["annotations"][CHECKSUM_ANNOTATION])

    assert digest("w", "r") == digest("w", "r")
    assert digest("w2", "r") != digest("w", "r") != digest("w", "r2")


def test_node_pod_reads_both_tokens_and_mounts_no_service_account_token() -> None:
    pod = resources.statefulset(node(), "ns")["spec"]["template"]["spec"]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in pod["containers"][0]["env"]}
    assert env["PLATEAU_AUTH__TOKEN"] == {"name": "plateau-ingest-token", "key": "token"}
    assert env["PLATEAU_AUTH__READ_TOKEN"] == {"name": "plateau-ingest-token", "key": "readToken"}
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["fsGroupChangePolicy"] == "OnRootMismatch"


def test_network_policy_admits_the_node_namespace_the_operator_and_the_listed() -> None:
    pol = resources.network_policy(node(), "team-a", "plateau-system", ["monitoring"])
    (rule,) = pol["spec"]["ingress"]
    spaces = [
        p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in rule["from"]
    ]
    assert spaces == ["monitoring", "plateau-system", "team-a"]
    assert rule["ports"] == [{"port": 3030, "protocol": "TCP"}]
    assert pol["spec"]["podSelector"] == {"matchLabels": {"plateau.dev/node": "ingest"}}


def test_read_write_once_pod_is_refused_with_the_reason() -> None:
    with pytest.raises(InvalidSpec, match="Spark"):
        node(storage={"size": "1Gi", "accessModes": ["ReadWriteOncePod"]})


def test_node_pod_gets_no_service_link_variables() -> None:
    """Services named plateau-* would put PLATEAU_*_PORT=tcp://... among the node's settings."""
    pod = resources.statefulset(node(), "ns")["spec"]["template"]["spec"]
    assert pod["enableServiceLinks"] is False


def test_children_carry_only_the_operators_labels() -> None:
    spec = node()
    objs = [
        resources.statefulset(spec, "ns"),
        resources.service(spec, "ns"),
        resources.service(spec, "ns", headless=True),
        resources.config_map(spec, "ns"),
        resources.token_secret(spec, "ns", {"token": "t0k", "readToken": "r3ad"}),
        resources.network_policy(spec, "ns", "plateau-system", ["monitoring"]),
    ]
    for obj in objs:
        own = resources.labels("ingest")
        assert own.items() <= obj["metadata"]["labels"].items()
        extra = obj["metadata"]["labels"].keys() - own.keys()
        assert extra <= {"app.kubernetes.io/component"}, extra  # only app.kubernetes.io/*
        assert "app.kubernetes.io/instance" not in obj["metadata"]["labels"]  # Argo CD's
    assert objs[2]["spec"]["clusterIP"] == "None"


def test_conditions_keep_their_transition_time_while_status_holds() -> None:
    c1 = set_condition(None, "Ready", False, "NodeUnreachable", "down", 1, now="t1")
    c2 = set_condition(c1, "Ready", False, "NodeUnreachable", "still down", 2, now="t2")
    assert c2[0]["lastTransitionTime"] == "t1" and c2[0]["message"] == "still down"
    assert c2[0]["observedGeneration"] == 2
    c3 = set_condition(c2, "Ready", True, "Synced", "ok", 2, now="t3")
    assert c3[0]["status"] == "True" and c3[0]["lastTransitionTime"] == "t3"
    c4 = set_condition(c3, "Degraded", None, "Unknown", "?", 2, now="t4")
    assert [c["type"] for c in c4] == ["Degraded", "Ready"] and c4[0]["status"] == "Unknown"


def test_node_usage_for_printing() -> None:
    memory = Memory(budget_bytes=0, source="machine", parts={})
    got = node_usage(
        NodeInfo(
            capacity_bytes=10 * GiB,
            reserve_bytes=0,
            allocated_bytes=3 * GiB,
            used_bytes=0,
            free_disk_bytes=GiB,
            topics=2,
            memory=memory,
        )
    )
    assert got["allocated"] == "3.0Gi" and got["topics"] == 2 and got["capacityBytes"] == 10 * GiB


def test_crd_durations_are_the_ones_the_operator_parses() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "plateau.dev_plateautopics.yaml").read_text())
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rule = props["properties"]["retention"]["properties"]["maxAge"]["x-kubernetes-validations"]
    found = re.fullmatch(r"self\.matches\('(.*)'\)", rule[0]["rule"])
    assert found, rule
    pattern = re.compile(found.group(1))
    for text in ["30s", "15m", "12h", "7d", "2w", "1h30m", "500ms", "1.5h"]:
        assert pattern.fullmatch(text) and parse_duration(text) > 0, text
    for text in ["1y", "", "h", "-1s", "1 h"]:
        assert not pattern.fullmatch(text), text


def test_the_volume_outlives_the_node_unless_retain_volume_is_false() -> None:
    def policy(spec: NodeSpec) -> dict[str, str]:
        sts = resources.statefulset(spec, "ns")
        return dict(sts["spec"]["persistentVolumeClaimRetentionPolicy"])

    assert policy(node()) == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    assert policy(node(retainVolume=False))["whenDeleted"] == "Delete"
