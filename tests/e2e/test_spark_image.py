"""The Spark job image on the project's cluster: spark-submit in cluster mode runs
examples/spark_job.py in a driver pod and an executor pod of localhost/plateau-spark,
reading a plateau node's volume mounted read-only with the settings of
``plateau spark-conf`` (claim, readOnly, affinity to the volume's host), then the
node's URL through plateau's JVM reader, which the image puts on Spark's classpath."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.kube import IN_CI, ROOT, Kube, pod, restricted_container, restricted_pod
from tests.e2e.test_plateau_node import _statefulset

SPARK_IMAGE = os.environ.get("PLATEAU_SPARK_IMAGE", "localhost/plateau-spark:dev")
# The Spark image's user: Spark's own uid, as its images run (images/build --spark).
SPARK_UID = 185
FILL = """
import sys
import pyarrow as pa
from plateau.client import PlateauClient
with PlateauClient(sys.argv[1]) as c:
    c.put_topic("t", partitions=2, segment_max_rows=100)
    for p in ("0", "1"):
        for start in range(0, 501, 100):  # the last append seals [400, 500)
            n = min(100, 501 - start)
            c.append("t", p, pa.table({"v": list(range(start, start + n))}))
print("filled")
"""


@pytest.fixture(scope="module")
def spark_image(local_cluster: Path | None) -> str:
    """Build the Spark job image and load it into the local cluster (kind: load it yourself)."""
    if local_cluster is None:
        return SPARK_IMAGE
    build = subprocess.run([str(ROOT / "images" / "build"), "--spark", "--name", SPARK_IMAGE],
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    archive = build.stdout.strip().splitlines()[-1]
    load = subprocess.run([str(ROOT / "tools" / "cluster"), "load-image", archive],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert load.returncode == 0, load.stderr[-3000:]
    return SPARK_IMAGE


def spark_rbac(ns: Kube) -> None:
    """What Spark's driver needs: create and watch its executor pods and their service."""
    ns.apply([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "spark"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "spark"},
         "rules": [{"apiGroups": [""], "resources": ["pods", "services", "configmaps",
                                                     "persistentvolumeclaims"],
                    "verbs": ["create", "get", "list", "watch", "delete", "deletecollection",
                              "patch", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "spark"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "spark"},
         "subjects": [{"kind": "ServiceAccount", "name": "spark", "namespace": ns.namespace}]},
    ])  # fmt: skip


def restricted_template(path: Path) -> Path:
    """The pod template at ``path`` (made if absent) with the securityContext that the
    namespace's Pod Security Standard `restricted` asks of Spark's driver and executor
    pods: Spark sets none of its own and takes the first container of a template as
    the base of its own container."""
    template = yaml.safe_load(path.read_text()) if path.exists() else {}
    template = {"apiVersion": "v1", "kind": "Pod", **(template or {})}
    spec = template.setdefault("spec", {})
    spec["securityContext"] = {**spec.get("securityContext", {}), **restricted_pod(SPARK_UID)}
    container = (spec.get("containers") or [{}])[0]
    container["securityContext"] = {
        **container.get("securityContext", {}),
        **restricted_container(),
    }
    spec["containers"] = [container, *(spec.get("containers") or [])[1:]]
    path.write_text(yaml.safe_dump(template))
    return path


def templates(path: Path) -> list[str]:
    """spark-submit arguments: the pod template at ``path`` for the driver and executors."""
    return [a for role in ("driver", "executor")
            for a in ("--conf", f"spark.kubernetes.{role}.podTemplateFile={path}")]  # fmt: skip


def api_server(kubeconfig: str) -> str:
    config: dict[str, Any] = yaml.safe_load(Path(kubeconfig).read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    return str(cluster["cluster"]["server"])


@pytest.fixture
def filled(ns: Kube) -> Iterator[Kube]:
    ns.apply(_statefulset())
    ns.wait_for("the node pod", lambda: ns.exists("pod", "plateau-0"), 120)
    ns.wait_ready("pod/plateau-0", 180)
    url = f"http://plateau.{ns.namespace}.svc.cluster.local:3030"
    ns.apply(pod("fill", ["python", "-c", FILL, url]))
    assert ns.wait_pod_done("fill") == "Succeeded", ns.logs("fill")
    yield ns


def test_spark_job_in_cluster_mode_reads_the_node_volume_and_url(
    filled: Kube, spark_image: str, kubeconfig: str, tmp_path: Path
) -> None:
    ns = filled
    spark_rbac(ns)
    conf = subprocess.run(
        [sys.executable, "-c", "from plateau.cli import main; main()", "spark-conf",
         "--node", "plateau", "--namespace", ns.namespace, "--kubeconfig", kubeconfig,
         "--pod-template-out", str(tmp_path / "template.yaml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert conf.returncode == 0, conf.stderr
    host = ns.get("pod", "plateau-0")["spec"]["nodeName"]
    assert host in (tmp_path / "template.yaml").read_text()
    # spark-conf's template (the volume's host) is the one spark-submit is given: the
    # restricted securityContext goes into it.
    assert f"podTemplateFile={tmp_path / 'template.yaml'}" in conf.stdout
    restricted_template(tmp_path / "template.yaml")
    job = ["--path", "/plateau/data", "--topic", "t", "--column", "v"]
    report, _ = run_job(ns, spark_image, kubeconfig, "plateau-e2e-driver", conf.stdout.split(), job)
    assert report == {"topic": "t", "hours": 1, "rows": 1000}
    pods = ns.get("pods", "-l", "spark-role=executor")["items"]
    assert pods, "an executor pod ran"
    for p in [ns.get("pod", "plateau-e2e-driver"), *pods]:
        assert p["spec"]["nodeName"] == host
        mounts = p["spec"]["containers"][0]["volumeMounts"]
        assert any(m["mountPath"] == "/plateau/data" and m.get("readOnly") for m in mounts)
    # the node's URL instead: read_topic's JVM reader, on the image's Spark classpath
    url = f"http://plateau.{ns.namespace}.svc.cluster.local:3030"
    namespace = ["--conf", f"spark.kubernetes.namespace={ns.namespace}"]
    namespace += templates(restricted_template(tmp_path / "restricted.yaml"))
    report, logs = run_job(ns, spark_image, kubeconfig, "plateau-e2e-url", namespace,
                           ["--url", url, "--topic", "t", "--column", "v"])  # fmt: skip
    assert report == {"topic": "t", "hours": 1, "rows": 1002}  # the open rows too
    assert "reading through format('plateau')" not in logs
    if IN_CI:
        for driver in ("plateau-e2e-driver", "plateau-e2e-url"):
            ns.run("delete", "pod", driver, "--wait=false", check=False)


def run_job(
    ns: Kube, image: str, kubeconfig: str, driver: str, conf: list[str], job: list[str]
) -> tuple[dict[str, Any], str]:
    """examples/spark_job.py by spark-submit in cluster mode: its report and the driver's log."""
    submit = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master", f"k8s://{api_server(kubeconfig)}", "--deploy-mode", "cluster",
        "--name", driver,
        "--conf", f"spark.kubernetes.container.image={image}",
        "--conf", "spark.kubernetes.container.image.pullPolicy=Never",
        "--conf", "spark.kubernetes.authenticate.driver.serviceAccountName=spark",
        "--conf", f"spark.kubernetes.driver.pod.name={driver}",
        "--conf", "spark.executor.instances=1",
        "--conf", "spark.kubernetes.driver.request.cores=0.1",
        "--conf", "spark.kubernetes.executor.request.cores=0.1",
        "--conf", "spark.driver.memory=512m", "--conf", "spark.executor.memory=512m",
        "--conf", "spark.kubernetes.submission.waitAppCompletion=true",
        # kept after the app ends, for the checks below (the namespace goes after the test)
        "--conf", "spark.kubernetes.executor.deleteOnTermination=false",
        *conf,
        "local:///opt/plateau/examples/spark_job.py",
        *job,
    ]  # fmt: skip
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    out = subprocess.run(submit, capture_output=True, text=True, env=env, timeout=900, check=False)
    assert ns.exists("pod", driver), f"spark-submit made no driver pod: {out.stderr[-3000:]}"
    logs = ns.logs(driver)
    assert ns.pod_phase(driver) == "Succeeded", f"{out.stderr[-3000:]}\n--- driver\n{logs[-4000:]}"
    report = json.loads(next(line for line in logs.splitlines() if line.startswith('{"topic"')))
    return report, logs
