"""The Helm chart: lint clean, its CRDs the same as crds/, and every object it renders
accepted by a real kube-apiserver (server-side dry run), cluster-wide and namespaced."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from plateau_operator import resources, telemetry
from plateau_operator.spec import DEFAULT_IMAGE, NodeSpec
from testkit.kubeapi import ROOT, KubeApi, binaries
from testkit.kubeschemas import TEMPLATE as SCHEMA_TEMPLATE
from testkit.kubeschemas import write_schemas
from testkit.nodeproc import NodeProcess

CHART = ROOT / "charts" / "plateau"
METRIC = re.compile(r"\bplateau_[a-z_]+")
assert telemetry.RECONCILES  # registers the operator's metrics in this process


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries() / "helm"), *args], capture_output=True, text=True, check=False, timeout=120
    )


def test_chart_crds_are_the_crds() -> None:
    ours = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert ours == sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    for name in ours:
        assert (CHART / "crds" / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), name


def test_lint_and_values_schema() -> None:
    r = helm("lint", str(CHART))
    assert r.returncode == 0, r.stdout + r.stderr
    bad = helm("template", "t", str(CHART), "--set", "resyncSeconds=1")
    assert bad.returncode != 0 and "resyncSeconds" in bad.stderr


@pytest.mark.parametrize(
    "values",
    [
        ["--set", "monitoring.dashboard.enabled=true"],
        ["--set", "watchNamespaces={team-a,team-b}", "--set", "networkPolicy.enabled=false"],
        ["--set", "spark.jobNamespaces={team-a,team-b}"],
    ],
)
def test_rendered_objects_are_accepted_by_the_api_server(kube: KubeApi, values: list[str]) -> None:
    for ns in ("plateau-system", "team-a", "team-b"):
        kube.kubectl("create", "namespace", ns, check=False)
    r = helm("template", "plateau", str(CHART), "--namespace", "plateau-system", *values)
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    applied = kube.kubectl("apply", "--dry-run=server", "-f", "-", stdin=r.stdout, check=False)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("(server dry run)") == len(docs)
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "Role"):
            for rule in doc["rules"]:
                assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
            assert doc["spec"]["strategy"]["type"] == "Recreate"
            # a Service's link variables would override PLATEAU_OPERATOR_METRICS_PORT
            assert pod["enableServiceLinks"] is False


def _rendered(*values: str) -> list[dict[str, Any]]:
    r = helm("template", "plateau", str(CHART), "--namespace", "plateau-system", *values)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def test_dashboard_queries_only_metrics_the_node_and_operator_export(tmp_path: Path) -> None:
    docs = _rendered("--set", "monitoring.dashboard.enabled=true")
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["plateau-nodes.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    wanted = {re.sub(r"_(bucket|count|sum)$", "", m) for e in exprs for m in METRIC.findall(e)}
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for topic in ("ingest", "refused", "budget", "fsync", "seal"):
        assert topic in titles

    node = NodeProcess(tmp_path / "data").start()
    try:
        scraped = httpx.get(f"{node.url}/metrics").text
    finally:
        node.stop()
    exported = {f.name for f in text_string_to_metric_families(scraped)}
    exported |= {f.name for f in REGISTRY.collect() if f.name.startswith("plateau_operator_")}
    assert "plateau_operator_reconciles" in exported  # telemetry is imported
    missing = {m.removesuffix("_total") for m in wanted} - exported
    assert not missing, f"the dashboard queries metrics nobody exports: {sorted(missing)}"


def test_service_monitor_scrapes_each_node_once_and_the_operator() -> None:
    docs = _rendered("--set", "monitoring.serviceMonitor.enabled=true",
                     "--set", "monitoring.serviceMonitor.labels.release=prom")  # fmt: skip
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceMonitor"}
    nodes, op = monitors["plateau-nodes"], monitors["plateau-operator"]
    assert nodes["metadata"]["labels"]["release"] == "prom"
    assert nodes["spec"]["namespaceSelector"] == {"any": True}
    spec = NodeSpec.parse("n", {"storage": {"size": "1Gi"}}, DEFAULT_IMAGE)
    api, peers = resources.service(spec, "ns"), resources.service(spec, "ns", headless=True)
    want = nodes["spec"]["selector"]["matchLabels"]
    assert want.items() <= api["metadata"]["labels"].items()
    assert not want.items() <= peers["metadata"]["labels"].items()
    assert nodes["spec"]["endpoints"][0]["port"] == api["spec"]["ports"][0]["name"]
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    assert op["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    ports = {p["name"] for p in deploy["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert op["spec"]["endpoints"][0]["port"] in ports
    narrowed = _rendered("--set", "monitoring.serviceMonitor.enabled=true",
                         "--set", "watchNamespaces={a,b}")  # fmt: skip
    (mon,) = [d for d in narrowed if d["metadata"]["name"] == "plateau-nodes"]
    assert mon["spec"]["namespaceSelector"] == {"matchNames": ["a", "b"]}


def test_rendered_chart_and_examples_validate_with_kubeconform(
    kube: KubeApi, tmp_path: Path
) -> None:
    """Strict offline validation against Kubernetes 1.35's schemas and our CRDs'."""
    version = json.loads(kube.kubectl("version", "-o", "json").stdout)["serverVersion"]
    assert (version["major"], version["minor"]) == ("1", "35")
    openapi = json.loads(kube.kubectl("get", "--raw", "/openapi/v2").stdout)
    assert write_schemas(openapi, tmp_path / "schemas") > 100
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    for i, values in enumerate(
        [
            [],
            ["--set", "monitoring.dashboard.enabled=true", "--set", "networkPolicy.enabled=false"],
            ["--set", "watchNamespaces={a,b}", "--set", "networkPolicy.allowedNamespaces={mon}",
             "--set", "spark.jobNamespaces={a,jobs}"],
        ]
    ):  # fmt: skip
        r = helm("template", "plateau", str(CHART), "--namespace", "plateau-system", *values)
        assert r.returncode == 0, r.stderr
        (manifests / f"chart-{i}.yaml").write_text(r.stdout)
    for example in (ROOT / "examples").glob("*.yaml"):
        (manifests / example.name).write_bytes(example.read_bytes())

    def kubeconform(*paths: Path) -> subprocess.CompletedProcess[str]:
        location = f"{tmp_path / 'schemas'}/{SCHEMA_TEMPLATE}"
        return subprocess.run(
            [str(binaries() / "kubeconform"), "-strict", "-summary", "-output", "json",
             "-schema-location", location, *map(str, paths)],
            capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip

    r = kubeconform(manifests)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(r.stdout)["summary"]
    assert summary["invalid"] == 0 and summary["errors"] == 0 and summary["skipped"] == 0
    assert summary["valid"] >= 12, summary

    # the schemas are strict: a misspelt field and a bad example fail
    (tmp_path / "bad").mkdir()
    typo = yaml.safe_load((ROOT / "examples" / "plateautopic.yaml").read_text())
    typo["spec"]["retention"]["maxByte"] = "1Gi"
    (tmp_path / "bad" / "typo.yaml").write_text(yaml.safe_dump(typo))
    deploy = (
        (manifests / "chart-0.yaml").read_text().replace("readOnlyRootFilesystem", "readOnlyRoot")
    )
    (tmp_path / "bad" / "deploy.yaml").write_text(deploy)
    broken = deploy.count("readOnlyRoot:")  # the Deployment's and the uninstall Job's
    assert broken == 2
    r = kubeconform(tmp_path / "bad")
    assert r.returncode != 0
    out = json.loads(r.stdout)
    assert out["summary"]["invalid"] == 1 + broken, r.stdout
    messages = " ".join(res.get("msg", "") for res in out["resources"])
    assert "maxByte" in messages and "readOnlyRoot" in messages


# --- RBAC, operator settings, the uninstall hook --------------------------------------

SA = "system:serviceaccount:plateau-system:plateau-operator"
# What the operator may do, by (API group, resource): the whole of it. docs/operator.md's
# RBAC table says why for each; anything added here must be added there.
OWN = {
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"get", "list", "watch"},
    ("plateau.dev", "plateaunodes"): {"get", "list", "watch", "patch"},
    ("plateau.dev", "plateautopics"): {"get", "list", "watch", "patch"},
    ("plateau.dev", "plateaunodes/status"): {"get", "patch"},
    ("plateau.dev", "plateautopics/status"): {"get", "patch"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
CHILDREN = {
    ("apps", "statefulsets"): {"get", "create", "patch"},
    ("", "services"): {"get", "create", "patch"},
    ("", "configmaps"): {"get", "create", "patch"},
    ("", "secrets"): {"get", "create", "patch"},
    ("", "pods"): {"get"},
    ("", "persistentvolumeclaims"): {"get", "patch"},
    ("networking.k8s.io", "networkpolicies"): {"get", "create", "patch", "delete"},
}
UNINSTALL = {
    ("apps", "deployments"): {"get", "patch"},
    ("apps", "deployments/scale"): {"get", "patch"},
    ("", "pods"): {"list"},
}


def _grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def _by_kind(docs: list[dict[str, Any]], kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in docs
        if d["kind"] == kind
    }


@pytest.mark.parametrize("watch", [[], ["team-a", "team-b"]])
def test_rbac_is_least_privilege_and_bound_as_documented(watch: list[str]) -> None:
    values = ["--set", "watchNamespaces={" + ",".join(watch) + "}"] if watch else []
    docs = _rendered(*values)
    cluster_roles = _by_kind(docs, "ClusterRole")
    roles = _by_kind(docs, "Role")
    own = cluster_roles["", "plateau-operator-plateau-system"]
    children = cluster_roles["", "plateau-operator-plateau-system-children"]
    assert len(cluster_roles) == 2
    assert _grants(own) == OWN
    assert _grants(children) == CHILDREN
    (uninstall,) = roles.values()
    assert uninstall["metadata"]["namespace"] == "plateau-system"
    assert _grants(uninstall) == UNINSTALL
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    for rule in uninstall["rules"]:
        if rule["apiGroups"] == ["apps"]:  # this chart's Deployment, and no other
            assert rule["resourceNames"] == [deploy["metadata"]["name"]]

    # list and watch: only the CRDs and the operator's own kinds; never a Secret
    for role in (own, children, uninstall):
        for (group, resource), verbs in _grants(role).items():
            assert "*" not in verbs and resource != "*" and group != "*"
            if verbs & {"list", "watch"} and role is not uninstall:
                assert group in ("plateau.dev", "apiextensions.k8s.io"), (group, resource)
        assert not _grants(role).get(("", "secrets"), set()) & {"list", "watch"}
    assert "update" not in set().union(*_grants(own).values(), *_grants(children).values())

    subject = [
        {"kind": "ServiceAccount", "name": "plateau-operator", "namespace": "plateau-system"}
    ]
    crbs = _by_kind(docs, "ClusterRoleBinding")
    rbs = _by_kind(docs, "RoleBinding")
    for b in (*crbs.values(), *rbs.values()):
        assert b["subjects"] == subject
    # the custom resources' rights are cluster-wide in both modes (they must outlive
    # a namespace's RoleBindings while it is deleted)
    bound_cluster_wide = {b["roleRef"]["name"] for b in crbs.values()}
    assert own["metadata"]["name"] in bound_cluster_wide
    bound_in = {
        ns: b["roleRef"]
        for (ns, _), b in rbs.items()
        if b["roleRef"]["name"] == children["metadata"]["name"]
    }
    if watch:
        assert bound_cluster_wide == {own["metadata"]["name"]}
        assert sorted(bound_in) == watch
        assert all(ref["kind"] == "ClusterRole" for ref in bound_in.values())
    else:
        assert bound_cluster_wide == {own["metadata"]["name"], children["metadata"]["name"]}
        assert bound_in == {}
    (hook_binding,) = [b for b in rbs.values() if b["roleRef"]["kind"] == "Role"]
    assert hook_binding["roleRef"]["name"] == uninstall["metadata"]["name"]
    assert hook_binding["metadata"]["namespace"] == "plateau-system"

    off = _rendered(*values, "--set", "uninstall.enabled=false")
    assert not [d for d in off if d["kind"] in ("Role", "Job")]
    assert not [d for d in off if d["kind"] == "RoleBinding" and d["roleRef"]["kind"] == "Role"]


def _env(docs: list[dict[str, Any]], kind: str = "Deployment") -> dict[str, Any]:
    (workload,) = [d for d in docs if d["kind"] == kind]
    (container,) = workload["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_operator_settings_are_chart_values() -> None:
    docs = _rendered()
    env = _env(docs)
    assert env["PLATEAU_OPERATOR_NAMESPACE"] == ""
    assert env["PLATEAU_OPERATOR_POD_NAMESPACE"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }
    assert env["PLATEAU_OPERATOR_NETWORK_POLICY"] == "true"  # on by default
    assert env["PLATEAU_OPERATOR_ALLOWED_NAMESPACES"] == ""
    assert env["PLATEAU_OPERATOR_ALLOW_ENDPOINT_OVERRIDE"] == "false"
    assert env["PLATEAU_OPERATOR_ROLLOUT"] == "serial"
    # the nodes' NetworkPolicies are the operator's; the chart's only selects its own pod
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "plateau-operator"
    }

    docs = _rendered(
        "--set", "watchNamespaces={a,b}",
        "--set", "networkPolicy.enabled=false",
        "--set", "networkPolicy.allowedNamespaces={monitoring,audit}",
        "--set", "allowEndpointOverride=true",
        "--set", "rollout.mode=opt-in",
    )  # fmt: skip
    env = _env(docs)
    assert env["PLATEAU_OPERATOR_NAMESPACE"] == "a,b"
    assert env["PLATEAU_OPERATOR_NETWORK_POLICY"] == "false"
    assert env["PLATEAU_OPERATOR_ALLOWED_NAMESPACES"] == "monitoring,audit"
    assert env["PLATEAU_OPERATOR_ALLOW_ENDPOINT_OVERRIDE"] == "true"
    assert env["PLATEAU_OPERATOR_ROLLOUT"] == "opt-in"
    assert not [d for d in docs if d["kind"] == "NetworkPolicy"]
    # the hook releases what the operator watches
    assert _env(docs, "Job")["PLATEAU_OPERATOR_NAMESPACE"] == "a,b"

    for bad in ("rollout.mode=parallel", "allowEndpointOverride=yes", "uninstall.timeoutSeconds=1"):
        r = helm("template", "t", str(CHART), "--set", bad)
        assert r.returncode != 0 and bad.split("=")[0].split(".")[-1] in r.stderr, r.stderr

    # every value has a description in the schema
    schema = json.loads((CHART / "values.schema.json").read_text())

    def undescribed(node: dict[str, Any], path: str) -> list[str]:
        missing = [] if "description" in node or not path else [path]
        for key, sub in node.get("properties", {}).items():
            missing += undescribed(sub, f"{path}.{key}")
        return missing

    assert undescribed(schema, "") == []
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) == set(schema["properties"])


def test_uninstall_hook_runs_the_module_restricted_as_the_operator() -> None:
    docs = _rendered("--set", "uninstall.timeoutSeconds=60")
    (job,) = [d for d in docs if d["kind"] == "Job"]
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-delete"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    pod, op = job["spec"]["template"]["spec"], deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "plateau_operator.uninstall"]
    assert "--deployment=plateau-operator" in container["args"]
    assert "--timeout=60" in container["args"]
    assert job["spec"]["activeDeadlineSeconds"] > 60
    assert container["image"] == op["containers"][0]["image"]
    assert pod["serviceAccountName"] == op["serviceAccountName"]
    assert pod["automountServiceAccountToken"] is True
    assert pod["restartPolicy"] == "Never"
    # the hook waits for the operator's pods to be gone: it must not be one of them
    selector = deploy["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    # restricted Pod Security, field by field (the API server checks it too, below)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}


def test_rbac_on_the_api_server_survives_a_namespace_losing_its_binding(kube: KubeApi) -> None:
    """The rendered chart applied for real (watching team-a and team-b) in a namespace
    enforcing restricted Pod Security; the operator's rights asked of the API server."""
    for ns in ("plateau-system", "team-a", "team-b", "team-c"):
        kube.kubectl("create", "namespace", ns, check=False)
    kube.kubectl("label", "--overwrite", "namespace", "plateau-system",
                 "pod-security.kubernetes.io/enforce=restricted",
                 "pod-security.kubernetes.io/warn=restricted")  # fmt: skip
    docs = _rendered("--set", "watchNamespaces={team-a,team-b}")
    r = kube.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert "PodSecurity" not in r.stderr, r.stderr
    # the pods the Deployment and the hook Job would create are admitted under "restricted"
    for kind in ("Deployment", "Job"):
        (workload,) = [d for d in docs if d["kind"] == kind]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"check-{kind.lower()}", "namespace": "plateau-system"},
            "spec": workload["spec"]["template"]["spec"],
        }
        r = kube.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod),
                         check=False)  # fmt: skip
        assert r.returncode == 0, (kind, r.stderr)

    def can(verb: str, what: str, ns: str | None = None, *extra: str) -> bool:
        where = ["-n", ns] if ns else ["--all-namespaces"]
        r = kube.kubectl("auth", "can-i", verb, what, *where, f"--as={SA}", *extra, check=False)
        assert r.stdout.strip() in ("yes", "no"), r.stdout + r.stderr
        return r.stdout.strip() == "yes"

    assert can("list", "plateautopics.plateau.dev") and can("watch", "plateaunodes.plateau.dev")
    assert can("patch", "plateautopics.plateau.dev", "team-c")  # cluster-wide in both modes
    assert not can("list", "secrets") and not can("watch", "secrets", "team-a")
    assert not can("list", "pods", "team-a") and not can("list", "statefulsets.apps", "team-a")
    assert can("get", "secrets", "team-a") and not can("get", "secrets", "team-c")
    assert can("create", "statefulsets.apps", "team-b")
    assert not can("create", "statefulsets.apps", "team-c")
    assert not can("delete", "statefulsets.apps", "team-a")
    assert can("delete", "networkpolicies.networking.k8s.io", "team-a")
    assert can("patch", "deployments.apps/plateau-operator", "plateau-system")
    assert can(
        "patch", "deployments.apps/plateau-operator", "plateau-system", "--subresource=scale"
    )
    assert not can("patch", "deployments.apps/other", "plateau-system")
    assert can("list", "pods", "plateau-system")

    # team-a's RoleBinding goes first while the namespace is deleted: the operator can
    # still patch its resources there (remove its finalizer), and nothing else
    kube.kubectl(
        "delete", "rolebinding", "plateau-operator-plateau-system-children", "-n", "team-a"
    )
    assert can("patch", "plateautopics.plateau.dev", "team-a")
    assert can("patch", "plateaunodes.plateau.dev", "team-a")
    assert can("get", "plateautopics.plateau.dev", "team-a")
    assert not can("get", "secrets", "team-a") and not can("get", "services", "team-a")


# --- what a Spark driver needs, in spark.jobNamespaces ----------------------------------

# Spark's driver (spark-submit, cluster mode): its executors' pods, their ConfigMap, the
# headless Service, claims made per executor. No Secrets, nothing cluster-wide.
SPARK_DRIVER = {
    ("", resource): {"create", "get", "list", "watch", "delete", "deletecollection", "patch",
                     "update"}
    for resource in ("pods", "services", "configmaps", "persistentvolumeclaims")
}  # fmt: skip


def _spark_objects(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {
        (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d
        for d in docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "plateau-spark"
    }


def test_spark_job_namespaces_get_the_drivers_account_role_and_binding_and_no_more() -> None:
    default = _rendered()
    assert _spark_objects(default) == {}  # jobNamespaces is empty by default
    docs = _rendered("--set", "spark.jobNamespaces={ml,jobs}")
    spark = _spark_objects(docs)
    kinds = ("ServiceAccount", "Role", "RoleBinding")
    assert set(spark) == {(k, ns, "plateau-spark") for k in kinds for ns in ("ml", "jobs")}
    # everything else is what the chart renders without them
    assert len(docs) - len(spark) == len(default)
    for ns in ("ml", "jobs"):
        role = spark["Role", ns, "plateau-spark"]
        assert _grants(role) == SPARK_DRIVER
        assert ("", "secrets") not in _grants(role)
        binding = spark["RoleBinding", ns, "plateau-spark"]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                      "name": "plateau-spark"}  # fmt: skip
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "plateau-spark", "namespace": ns}
        ]
        for kind in kinds:
            labels = spark[kind, ns, "plateau-spark"]["metadata"]["labels"]
            assert labels["app.kubernetes.io/part-of"] == "plateau"
            assert labels["app.kubernetes.io/managed-by"] == "Helm"
            assert labels["helm.sh/chart"].startswith("plateau-")

    own = _rendered("--set", "spark.jobNamespaces={ml}",
                    "--set", "spark.serviceAccount.create=false",
                    "--set", "spark.serviceAccount.name=etl")  # fmt: skip
    assert set(_spark_objects(own)) == {("Role", "ml", "etl"), ("RoleBinding", "ml", "etl")}
    none = _rendered("--set", "spark.jobNamespaces={ml}", "--set", "spark.rbac.create=false")
    assert set(_spark_objects(none)) == {("ServiceAccount", "ml", "plateau-spark")}
    for bad in ("spark.jobNamespaces={Team_A}", "spark.rbac.create=yes"):
        r = helm("template", "t", str(CHART), "--set", bad)
        assert r.returncode != 0 and "spark" in r.stderr, r.stderr


def test_spark_driver_rights_on_the_api_server(kube: KubeApi) -> None:
    """Installed for real: the driver's account may run executors in its namespace, and
    read no Secret, nor anything in another namespace, nor the cluster's nodes."""
    for ns in ("plateau-system", "spark-a", "spark-b", "other"):
        kube.kubectl("create", "namespace", ns, check=False)
    # the Spark objects alone: this module's API server may hold the rest of another install
    docs = list(
        _spark_objects(_rendered("--set", "spark.jobNamespaces={spark-a,spark-b}")).values()
    )
    r = kube.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs), check=False)
    assert r.returncode == 0, r.stderr
    sa = "system:serviceaccount:spark-a:plateau-spark"

    def can(verb: str, what: str, ns: str) -> bool:
        r = kube.kubectl("auth", "can-i", verb, what, "-n", ns, f"--as={sa}", check=False)
        assert r.stdout.strip() in ("yes", "no"), r.stdout + r.stderr
        return r.stdout.strip() == "yes"

    for verb in ("create", "get", "list", "watch", "delete", "deletecollection", "patch"):
        assert can(verb, "pods", "spark-a"), verb
    assert can("create", "configmaps", "spark-a") and can("create", "services", "spark-a")
    assert can("deletecollection", "persistentvolumeclaims", "spark-a")
    assert not can("get", "secrets", "spark-a") and not can("list", "secrets", "spark-a")
    assert not can("create", "pods", "spark-b")  # spark-b's account is another one
    assert not can("create", "pods", "other")
    r = kube.kubectl("auth", "can-i", "list", "nodes", f"--as={sa}", check=False)
    assert r.stdout.strip() == "no"
    out = kube.kubectl("get", "serviceaccount", "plateau-spark", "-n", "spark-b", "-o", "json")
    assert json.loads(out.stdout)["metadata"]["name"] == "plateau-spark"
