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
from tests.kubeapi import ROOT, KubeApi, binaries
from tests.kubeschemas import TEMPLATE as SCHEMA_TEMPLATE
from tests.kubeschemas import write_schemas
from tests.nodeproc import NodeProcess

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
        ["--set", "watchNamespaces={team-a,team-b}", "--set", "networkPolicy.enabled=true"],
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
            ["--set", "monitoring.dashboard.enabled=true", "--set", "networkPolicy.enabled=true"],
            ["--set", "watchNamespaces={a,b}", "--set", "networkPolicy.enabled=true"],
        ]
    ):
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
    r = kubeconform(tmp_path / "bad")
    assert r.returncode != 0
    out = json.loads(r.stdout)
    assert out["summary"]["invalid"] == 2, r.stdout
    messages = " ".join(res.get("msg", "") for res in out["resources"])
    assert "maxByte" in messages and "readOnlyRoot" in messages
