"""A PlateauNode's decide step: from what runs to the children and status. No cluster:
``decide`` is pure, so each case is an ``Observed`` written out by hand."""

from __future__ import annotations

from typing import Any

from plateau.client.errors import AuthError, ConnectionFailed
from plateau.protocol.replies import Memory, NodeInfo
from plateau_operator import claims, nodes, resources
from plateau_operator.nodes import Observed
from plateau_operator.settings import OperatorSettings, RolloutMode
from plateau_operator.spec import NodeSpec

GiB = 1 << 30
CFG = OperatorSettings(node_image="img:2", pod_namespace="plateau-system")
TOKENS = {"token": "w", "readToken": "r"}


def body(**extra_meta: Any) -> dict[str, Any]:
    meta = {
        "name": "ingest",
        "namespace": "team-a",
        "uid": "u-1",
        "generation": 3,
        "labels": {"app.kubernetes.io/instance": "argo-app", "team": "ml"},
        "annotations": {"argocd.argoproj.io/tracking-id": "x"},
        **extra_meta,
    }
    spec = {"storage": {"size": "20Gi"}, "network": {"allowedNamespaces": ["spark"]}}
    return {
        "apiVersion": "plateau.dev/v1alpha1",
        "kind": "PlateauNode",
        "metadata": meta,
        "spec": spec,
    }


def running_sts(template_hash: str, ready: int = 1, image: str = "img:1") -> dict[str, Any]:
    return {
        "metadata": {
            "uid": "s-1",
            "generation": 2,
            "annotations": {nodes.TEMPLATE_ANNOTATION: template_hash},
        },
        "spec": {
            "template": {"spec": {"containers": [{"name": "node", "image": image}]}},
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": str(20 * GiB)}},
                    },
                }
            ],
        },
        "status": {"observedGeneration": 2, "readyReplicas": ready, "updatedReplicas": 1,
                   "currentRevision": "a", "updateRevision": "a"},
    }  # fmt: skip


def observed(b: dict[str, Any] | None = None, **kw: Any) -> Observed:
    b = b or body()
    spec = NodeSpec.parse("ingest", b["spec"], CFG.node_image)
    args: dict[str, Any] = {
        "sts": None,
        "pvc": None,
        "pod": None,
        "tokens": TOKENS,
        "write_token": "w",
    }
    return Observed(b, spec, **{**args, **kw})


def node_info(capacity: int) -> NodeInfo:
    """A node's ``GET /admin/node`` reply, as the operator's client parses it."""
    memory = Memory(budget_bytes=GiB, source="configured", parts={})
    return NodeInfo(
        capacity_bytes=capacity,
        reserve_bytes=0,
        allocated_bytes=0,
        used_bytes=0,
        free_disk_bytes=capacity,
        topics=0,
        memory=memory,
    )


def cond(plan: nodes.Plan, type_: str) -> tuple[str, str]:
    c = next(c for c in plan.outcome.status["conditions"] if c["type"] == type_)
    return c["status"], c["reason"]


def test_children_carry_no_label_or_annotation_of_the_parent() -> None:
    plan = nodes.decide(observed(), CFG, slot=False)
    kinds = [c["kind"] for c in plan.children]
    assert kinds == ["Secret", "ConfigMap", "Service", "Service", "NetworkPolicy", "StatefulSet"]
    for child in plan.children:
        labels = child["metadata"]["labels"]
        assert "team" not in labels and "app.kubernetes.io/instance" not in labels, child["kind"]
        assert "argocd.argoproj.io/tracking-id" not in (child["metadata"].get("annotations") or {})


def test_network_policy_adds_the_nodes_listed_namespaces_to_the_operators() -> None:
    cfg = OperatorSettings(pod_namespace="plateau-system", allowed_namespaces=["monitoring"])
    pol = next(
        c for c in nodes.decide(observed(), cfg, False).children if c["kind"] == "NetworkPolicy"
    )
    peers = pol["spec"]["ingress"][0]["from"]
    names = [p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in peers]
    assert names == ["monitoring", "plateau-system", "spark", "team-a"]
    off = OperatorSettings(network_policy=False)
    plan = nodes.decide(observed(), off, False)
    assert all(c["kind"] != "NetworkPolicy" for c in plan.children)
    assert plan.remove == [("networking.k8s.io/v1", "NetworkPolicy", "plateau-ingest")]
    assert nodes.decide(observed(), CFG, False).remove == []


def test_a_ready_node_waits_for_its_turn_before_its_pod_is_replaced() -> None:
    obs = observed(sts=running_sts("old-template"), info=node_info(20 * GiB))
    waiting = nodes.decide(obs, CFG, slot=False)
    assert "StatefulSet" not in [c["kind"] for c in waiting.children]
    assert cond(waiting, "Progressing") == ("True", "WaitingForRollout")
    assert waiting.outcome.retry_after is not None
    rolling = nodes.decide(obs, CFG, slot=True)
    assert rolling.children[-1]["kind"] == "StatefulSet"
    assert cond(rolling, "Progressing") == ("True", "RollingUpdate")


def test_a_node_that_is_down_needs_no_turn() -> None:
    obs = observed(sts=running_sts("old-template", ready=0))
    sts = nodes.desired_children(obs, CFG)[-1]
    assert not nodes.needs_slot(obs, sts)
    assert nodes.decide(obs, CFG, slot=False).children[-1]["kind"] == "StatefulSet"


def test_an_unchanged_template_is_stable_and_needs_no_turn() -> None:
    obs = observed(sts=running_sts("x", image="img:2"), info=node_info(10 * GiB))
    sts = nodes.desired_children(obs, CFG)[-1]
    settled_sts = running_sts(nodes.template_hash(sts), image="img:2")
    obs = observed(sts=settled_sts, info=node_info(10 * GiB))
    assert not nodes.needs_slot(obs, nodes.desired_children(obs, CFG)[-1])
    plan = nodes.decide(obs, CFG, slot=False)
    assert cond(plan, "Progressing") == ("False", "Stable") and cond(plan, "Ready") == (
        "True",
        "NodeReady",
    )


def test_opt_in_rollout_keeps_the_image_a_node_runs_unless_annotated() -> None:
    cfg = OperatorSettings(node_image="img:2", rollout=RolloutMode.OPT_IN)
    obs = observed(sts=running_sts("x", image="img:1"))
    image = nodes.desired_children(obs, cfg)[-1]["spec"]["template"]["spec"]["containers"][0][
        "image"
    ]
    assert image == "img:1"
    opted = body(annotations={"plateau.dev/follow-operator-image": "true"})
    obs = observed(opted, sts=running_sts("x", image="img:1"))
    image = nodes.desired_children(obs, cfg)[-1]["spec"]["template"]["spec"]["containers"][0][
        "image"
    ]
    assert image == "img:2"
    fresh = nodes.desired_children(observed(), cfg)[-1]
    assert fresh["spec"]["template"]["spec"]["containers"][0]["image"] == "img:2"  # a new node


def test_ready_reasons_say_who_has_to_act() -> None:
    b = body()
    b["spec"]["auth"] = {"secretRef": {"name": "mine", "key": "k"}}
    missing = nodes.decide(observed(b, write_token=None), CFG, False)
    assert cond(missing, "Ready") == ("False", "TokenSecretMissing")
    refused = observed(sts=running_sts("x"), info_error=AuthError(401, "wrong bearer token"))
    assert cond(nodes.decide(refused, CFG, False), "Ready") == ("False", "Unauthorized")
    down = observed(sts=running_sts("x"), info_error=ConnectionFailed("refused", False))
    plan = nodes.decide(down, CFG, False)
    assert cond(plan, "Ready") == ("False", "NotReady") and plan.outcome.retry_after


def test_status_records_the_image_the_pod_runs_and_the_token_secret() -> None:
    pod = {"spec": {"nodeName": "k1", "containers": [{"name": "node", "image": "img:1"}]}}
    status = nodes.decide(observed(pod=pod), CFG, False).outcome.status
    assert status["image"] == "img:1" and status["hostNode"] == "k1"
    assert status["tokenSecret"] == resources.names("ingest")["secret"]
    assert status["observedGeneration"] == 3


def claim(uid: str = "c-1", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-plateau-ingest-0", "uid": uid,
                     "labels": resources.labels("ingest") if labels is None else labels},
        "status": {"phase": "Bound", "capacity": {"storage": "20Gi"}},
    }  # fmt: skip


def token_secret(
    controller: dict[str, Any], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    ref = {"kind": controller["kind"], "name": controller["metadata"]["name"],
           "uid": controller["metadata"]["uid"], "controller": True}  # fmt: skip
    meta = {"name": "plateau-ingest-token", "ownerReferences": [ref],
            "labels": resources.labels("ingest") if labels is None else labels}  # fmt: skip
    return {"metadata": meta, "data": {}}


def test_the_token_secret_lives_with_a_kept_claim_and_only_with_one_made_for_the_node() -> None:
    kept = nodes.decide(observed(pvc=claim()), CFG, False)
    assert kept.token_keeper is not None and kept.token_keeper["metadata"]["uid"] == "c-1"
    b = body()
    b["spec"]["retainVolume"] = False
    assert nodes.decide(observed(b, pvc=claim()), CFG, False).token_keeper is None
    assert nodes.decide(observed(), CFG, False).token_keeper is None  # no claim yet
    foreign = claim(labels={"app": "theirs"})
    assert nodes.decide(observed(pvc=foreign), CFG, False).token_keeper is None

    node = body()
    assert claims.secret_is_ours(token_secret(node), "u-1", None, "ingest")
    assert claims.secret_is_ours(token_secret(claim()), "u-1", claim(), "ingest")
    # not the operator's labels, another claim, a claim not made for the node: not ours
    assert not claims.secret_is_ours(token_secret(claim(), labels={}), "u-1", claim(), "ingest")
    assert not claims.secret_is_ours(token_secret(claim("c-2")), "u-1", claim(), "ingest")
    assert not claims.secret_is_ours(token_secret(foreign), "u-1", foreign, "ingest")
    other = {**node, "metadata": {**node["metadata"], "uid": "u-0"}}
    assert not claims.secret_is_ours(token_secret(other), "u-1", None, "ingest")


def test_a_node_recreated_on_its_kept_claim_says_it_kept_its_tokens() -> None:
    plan = nodes.decide(observed(pvc=claim(), secret=token_secret(claim())), CFG, False)
    (note,) = [n for n in plan.outcome.notes if n[0] == "TokensKept"]
    assert "plateau-ingest-token" in note[1] and "data-plateau-ingest-0" in note[1]
    running = observed(pvc=claim(), secret=token_secret(claim()), sts=running_sts("x"))
    assert not nodes.decide(running, CFG, False).outcome.notes  # said once, when re-created
