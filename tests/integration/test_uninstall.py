"""``python -m plateau_operator.uninstall`` against a real kube-apiserver, as the chart runs it.

The chart's own ServiceAccount, RBAC and Deployment are applied, and the
module runs as that ServiceAccount (a token from the TokenRequest API): what
passes here passes with exactly the rights the chart grants. No controllers
run, so scaling the Deployment only sets its replicas, and "the operator's
pod" is a Pod object that the test deletes (an unscheduled pod goes at once).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.kubeapi import ROOT, KubeApi, binaries
from testkit.waiting import wait_until

CHART = ROOT / "charts" / "plateau"
SYSTEM = "plateau-system"
FINALIZER = "plateau.dev/finalizer"
OTHER = "example.com/keep"  # someone else's finalizer: left alone
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.fixture(scope="module")
def as_operator(kube: KubeApi, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart's ServiceAccount, RBAC and Deployment applied; a kubeconfig as that account."""
    kube.kubectl("create", "namespace", SYSTEM)
    rendered = subprocess.run(
        [str(binaries() / "helm"), "template", "plateau", str(CHART), "--namespace", SYSTEM],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    wanted = [d for d in docs if d["kind"] in (*RBAC_KINDS, "Deployment")]
    assert {d["kind"] for d in wanted} == {*RBAC_KINDS, "Deployment"}
    objects = {"apiVersion": "v1", "kind": "List", "items": wanted}
    kube.kubectl("apply", "-f", "-", stdin=json.dumps(objects))
    token = kube.kubectl("create", "token", "plateau-operator", "-n", SYSTEM).stdout.strip()
    config = json.loads(kube.kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": {"token": token}}]
    path = tmp_path_factory.mktemp("operator-sa") / "kubeconfig"
    path.write_text(json.dumps(config))
    return path


def run(kubeconfig: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "plateau_operator.uninstall", *args],
        env={**os.environ, "KUBECONFIG": str(kubeconfig), **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def create_namespaces(kube: KubeApi, *names: str) -> None:
    for ns in names:
        kube.kubectl("create", "namespace", ns)


def create(kube: KubeApi, kind: str, ns: str, name: str, *finalizers: str) -> None:
    spec: dict[str, Any] = (
        {"nodeRef": {"name": "n"}, "retention": {"maxBytes": "1Gi"}}
        if kind == "PlateauTopic"
        else {"storage": {"size": "1Gi"}}
    )
    obj = {
        "apiVersion": "plateau.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": ns, "finalizers": list(finalizers)},
        "spec": spec,
    }
    r = kube.apply(obj)
    assert r.returncode == 0, r.stderr


def finalizers(kube: KubeApi, plural: str, ns: str, name: str) -> list[str] | None:
    """The object's finalizers, or None once it is gone."""
    r = kube.kubectl("get", plural, name, "-n", ns, "-o", "json", check=False)
    if r.returncode != 0:
        assert "NotFound" in r.stderr, r.stderr
        return None
    return list(json.loads(r.stdout)["metadata"].get("finalizers") or [])


def replicas(kube: KubeApi) -> int:
    r = kube.kubectl("get", "deployment", "plateau-operator", "-n", SYSTEM, "-o", "json")
    return int(json.loads(r.stdout)["spec"]["replicas"])


def start_operator(kube: KubeApi, pod: str) -> None:
    """Replicas back to 1 and a pod carrying the operator's labels (nothing runs it)."""
    kube.kubectl("scale", "deployment", "plateau-operator", "-n", SYSTEM, "--replicas=1")
    r = kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod,
                "namespace": SYSTEM,
                "labels": {"app.kubernetes.io/name": "plateau-operator"},
            },
            "spec": {
                "serviceAccountName": "plateau-operator",
                "containers": [{"name": "operator", "image": "localhost/plateau:dev"}],
            },
        }
    )
    assert r.returncode == 0, r.stderr


@pytest.fixture
def operator_pod(kube: KubeApi, as_operator: Path) -> Iterator[str]:
    start_operator(kube, "plateau-operator-0")
    yield "plateau-operator-0"
    kube.kubectl("delete", "pod", "plateau-operator-0", "-n", SYSTEM, "--ignore-not-found")


def test_stops_the_operator_first_then_releases_every_finalizer_and_deletes_nothing(
    kube: KubeApi, as_operator: Path, operator_pod: str
) -> None:
    create_namespaces(kube, "u-a", "u-b")
    create(kube, "PlateauNode", "u-a", "n", FINALIZER)
    create(kube, "PlateauTopic", "u-a", "t1", FINALIZER)
    create(kube, "PlateauTopic", "u-a", "t2", OTHER, FINALIZER)
    create(kube, "PlateauTopic", "u-b", "t3", FINALIZER)
    create(kube, "PlateauTopic", "u-b", "plain")  # no finalizer: nothing to say
    # deleted while the operator was stopping: waits on the finalizer only
    kube.kubectl("delete", "plateautopic", "t3", "-n", "u-b", "--wait=false")
    assert finalizers(kube, "plateautopics", "u-b", "t3") == [FINALIZER]

    proc = run(as_operator, "--namespace", SYSTEM, "--timeout", "60")
    wait_until(lambda: replicas(kube) == 0, "the Deployment scaled to 0")
    # while an operator pod runs, nothing is released: it would add the finalizers back
    time.sleep(2)
    assert proc.poll() is None
    assert finalizers(kube, "plateautopics", "u-a", "t1") == [FINALIZER]
    kube.kubectl("delete", "pod", operator_pod, "-n", SYSTEM)
    code, out, err = finish(proc)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"scaled deployment {SYSTEM}/plateau-operator to 0 (was 1)"
    assert lines[1] == f"no operator pod runs in {SYSTEM}"
    assert set(lines[2:-1]) == {
        "released plateautopics u-a/t1",
        "released plateautopics u-a/t2",
        "released plateautopics u-b/t3",
        "released plateaunodes u-a/n",
    }
    assert lines[-1].startswith("released 3 PlateauTopic(s) and 1 PlateauNode(s) in all namespaces")

    assert finalizers(kube, "plateautopics", "u-b", "t3") is None  # its deletion completed
    assert finalizers(kube, "plateautopics", "u-a", "t1") == []
    assert finalizers(kube, "plateautopics", "u-a", "t2") == [OTHER]
    assert finalizers(kube, "plateaunodes", "u-a", "n") == []
    assert replicas(kube) == 0

    # deleting them now completes with no operator (t2 waits for its other owner only)
    kube.kubectl("patch", "plateautopic", "t2", "-n", "u-a", "--type=merge",
                 "-p", '{"metadata": {"finalizers": null}}')  # fmt: skip
    kube.kubectl("delete", "plateautopics,plateaunodes", "--all", "-n", "u-a", "--timeout=30s")
    assert kube.kubectl("get", "plateau", "-n", "u-a", "-o", "name").stdout == ""

    # a second run (a retried Job) has nothing left to do and still succeeds
    code, out, err = finish(run(as_operator, "--namespace", SYSTEM))
    assert code == 0, err
    assert out.splitlines()[-1].startswith("released 0 PlateauTopic(s) and 0 PlateauNode(s)")


def test_a_scoped_run_releases_only_the_watched_namespaces(
    kube: KubeApi, as_operator: Path
) -> None:
    create_namespaces(kube, "s-a", "s-b", "s-c")
    for ns in ("s-a", "s-b", "s-c"):
        create(kube, "PlateauTopic", ns, "t", FINALIZER)
        create(kube, "PlateauNode", ns, "n", FINALIZER)
    kube.kubectl("scale", "deployment", "plateau-operator", "-n", SYSTEM, "--replicas=1")
    # the settings as the chart's hook Job passes them: from the environment
    env = {"PLATEAU_OPERATOR_POD_NAMESPACE": SYSTEM, "PLATEAU_OPERATOR_NAMESPACE": "s-a,s-c"}
    code, out, err = finish(run(as_operator, env=env))
    assert code == 0, err
    assert "released 2 PlateauTopic(s) and 2 PlateauNode(s) in s-a,s-c" in out
    assert replicas(kube) == 0
    for ns, left in (("s-a", []), ("s-b", [FINALIZER]), ("s-c", [])):
        assert finalizers(kube, "plateautopics", ns, "t") == left, ns
        assert finalizers(kube, "plateaunodes", ns, "n") == left, ns


def test_an_operator_pod_that_stays_fails_the_run_and_releases_nothing(
    kube: KubeApi, as_operator: Path, operator_pod: str
) -> None:
    create_namespaces(kube, "w-a")
    create(kube, "PlateauTopic", "w-a", "t", FINALIZER)
    code, out, err = finish(run(as_operator, "--namespace", SYSTEM, "--timeout", "2"))
    assert code == 2 and "scaled deployment" in out
    assert f"operator pods still present after 2s: {operator_pod}" in err
    assert "Traceback" not in err
    assert finalizers(kube, "plateautopics", "w-a", "t") == [FINALIZER]
    assert replicas(kube) == 0  # and it stays stopped: the message says so


def test_bad_arguments_and_an_unreachable_api_server_exit_2(
    kube: KubeApi, as_operator: Path, tmp_path: Path
) -> None:
    no_ns = {"PLATEAU_OPERATOR_POD_NAMESPACE": ""}
    for args, env, says in (
        (["--timeout", "soon"], None, "invalid float value"),
        (["--timeout", "0"], None, "--timeout must be a positive"),
        (["--namespace", SYSTEM, "--bogus"], None, "unrecognized arguments"),
        ([], no_ns, "needs a name and a namespace"),
    ):
        code, out, err = finish(run(as_operator, *args, env=env))
        assert code == 2 and says in err, (args, err)
        assert out == ""

    # a namespace where the account has no rights: the API server's 403, one message
    code, _, err = finish(run(as_operator, "--namespace", "default"))
    assert code == 2 and "the API server refused: 403" in err, err
    assert "Traceback" not in err

    config = json.loads(kube.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"
    gone = tmp_path / "kubeconfig"
    gone.write_text(json.dumps(config))
    code, _, err = finish(run(gone, "--skip-scale"), timeout=120)
    assert code == 2 and "cannot reach the API server" in err, err
    assert "Traceback" not in err
