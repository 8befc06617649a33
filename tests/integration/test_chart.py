"""The Helm chart: lint clean, its CRDs the same as crds/, and every object it renders
accepted by a real kube-apiserver (server-side dry run), cluster-wide and namespaced."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.kubeapi import ROOT, KubeApi, binaries

CHART = ROOT / "charts" / "plateau"


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
    [[], ["--set", "watchNamespaces={team-a,team-b}", "--set", "networkPolicy.enabled=true"]],
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
