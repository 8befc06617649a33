"""``plateau spark-conf``'s settings from the objects the API server returns: url mode's,
the job's (service account, master, fail-fast), the sizing for the nodes seen, and plain
YAML (no API server: tests/integration/test_spark_conf_cli.py runs the command against one)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from plateau.spark.kube import conf as kubeconf
from plateau.spark.kube import job as kubejob
from plateau.spark.kube import sizing as kubesizing
from plateau.spark.kube.sizing import NodeCapacity
from testkit.kubeapi import ROOT

NODE: dict[str, Any] = {
    "metadata": {"name": "a", "namespace": "ml"},
    "status": {"endpoint": "http://plateau-a.ml.svc:3030", "tokenSecret": "plateau-a-token"},
}


def test_access_follows_the_status_and_falls_back_to_the_operators_names() -> None:
    a = kubeconf.access_from_objects("ml", "a", NODE, statefulset_exists=False)
    assert (a.url, a.secret, a.key) == ("http://plateau-a.ml.svc:3030", "plateau-a-token",
                                        "readToken")  # fmt: skip
    other = {"status": {"endpoint": "http://x.ml.svc:3030", "tokenSecret": "team-tokens"}}
    a = kubeconf.access_from_objects("ml", "b", other, statefulset_exists=False)
    assert (a.url, a.secret) == ("http://x.ml.svc:3030", "team-tokens")
    a = kubeconf.access_from_objects("ml", "new", {"spec": {}}, statefulset_exists=False)
    assert (a.url, a.secret) == ("http://plateau-new.ml.svc:3030", "plateau-new-token")


@pytest.mark.parametrize(
    ("exists", "message"), [(True, "needs a PlateauNode"), (False, "no PlateauNode named 'a'")]
)
def test_url_mode_needs_a_plateau_node(exists: bool, message: str) -> None:
    with pytest.raises(kubeconf.SparkConfError, match=message):
        kubeconf.access_from_objects("ml", "a", None, statefulset_exists=exists)


def test_every_format_names_the_secret_and_the_url() -> None:
    a = kubeconf.access_from_objects("ml", "a", NODE, statefulset_exists=False)
    job = kubejob.Job("ml", "k8s://https://10.0.0.1:6443", None)
    conf = dict(
        line.removeprefix("--conf ").split("=", 1)
        for line in kubeconf.render_url(a, "conf", job).splitlines()
    )
    expected = {
        "spark.master": "k8s://https://10.0.0.1:6443",
        "spark.submit.deployMode": "cluster",
        "spark.kubernetes.namespace": "ml",
        "spark.kubernetes.authenticate.driver.serviceAccountName": "plateau-spark",
        **kubejob.FAIL_FAST,
        "spark.kubernetes.driver.secretKeyRef.PLATEAU_TOKEN": "plateau-a-token:readToken",
        "spark.kubernetes.executor.secretKeyRef.PLATEAU_TOKEN": "plateau-a-token:readToken",
        "spark.kubernetes.driverEnv.PLATEAU_URL": "http://plateau-a.ml.svc:3030",
    }
    assert conf == expected
    text = kubeconf.render_url(a, "properties", job)
    props = dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
    assert props == expected and "# read token: key readToken of Secret plateau-a-token" in text
    text = kubeconf.render_url(a, "sparkapplication", job)
    assert "&id" not in text and "*id" not in text
    spec = yaml.safe_load(text)["spec"]
    ref = {"name": "plateau-a-token", "key": "readToken"}
    token = {"name": "PLATEAU_TOKEN", "valueFrom": {"secretKeyRef": ref}}
    assert spec["driver"] == {
        "serviceAccount": "plateau-spark",
        "env": [{"name": "PLATEAU_URL", "value": "http://plateau-a.ml.svc:3030"}, token],
    }
    assert spec["executor"] == {"env": [token]} and spec["mode"] == "cluster"
    with pytest.raises(kubeconf.SparkConfError, match="--format"):
        kubeconf.render_url(a, "json")


# --- path mode's SparkApplication: plain YAML, and the advice of docs/spark.md ----------

RWO = kubeconf.VolumePlacement("ml", "a", "data-plateau-a-0", ("ReadWriteOnce",), "worker-1")


def test_sparkapplication_is_plain_yaml_with_the_same_settings_for_both_roles() -> None:
    sized = kubesizing.settings(kubesizing.PROFILES[2])
    job = kubejob.Job("ml", "k8s://https://k:6443", None, sizing=tuple(sized.items()))
    text = kubeconf.render(RWO, "sparkapplication", "/plateau/data", None, job)
    assert "&id" not in text and "*id" not in text  # yaml anchors and aliases
    assert "spark-submit" not in text  # the spark-operator submits it
    spec = yaml.safe_load(text)["spec"]
    for role in ("driver", "executor"):
        assert spec[role]["volumeMounts"] == [
            {"name": "plateau-data", "mountPath": "/plateau/data", "readOnly": True}
        ]
        assert "worker-1" in str(spec[role]["affinity"])
        assert spec[role]["coreRequest"] == "0.25" and spec[role]["memory"] == "512m"
    assert spec["executor"]["instances"] == 1
    assert spec["driver"]["serviceAccount"] == "plateau-spark"
    assert spec["driver"]["affinity"] is not spec["executor"]["affinity"]
    # a shared object dumps as itself, twice
    shared = {"a": 1}
    assert "&" not in kubeconf.dump({"x": shared, "y": shared})


def test_the_printed_advice_is_the_docs_advice() -> None:
    """docs/spark.md reads a volume's parquet topic with read_topic, and keeps
    format("plateau") for arrow topics and streams: the comments say the same."""
    advice = " ".join(kubeconf.comments(RWO, "/plateau/data"))
    assert 'plateau.spark.read_topic(spark, path="/plateau/data", topic=...)' in advice
    assert advice.index("read_topic") < advice.index('format("plateau")')
    docs = (ROOT / "docs" / "spark.md").read_text()
    assert "`plateau.spark.read_topic(spark, path=..., topic=...)`" in docs
    url = " ".join(kubeconf.url_comments(kubeconf.access_from_objects("ml", "a", NODE, False)))
    assert "plateau.spark.read_topic(spark, url=" in url and "read_topic(spark, url=" in docs


# --- sizing: the nodes' allocatable in, Spark's settings out -----------------------------

GiB = 2**30


def node(name: str, cpu: str, memory: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}  # fmt: skip


@pytest.mark.parametrize(
    ("quantity", "millis"), [("2", 2000), ("1500m", 1500), ("0.25", 250), ("16", 16000)]
)
def test_cpu_quantities(quantity: str, millis: int) -> None:
    assert kubesizing.cpu_millis(quantity) == millis


@pytest.mark.parametrize(
    ("quantity", "size"),
    [("4Gi", 4 * GiB), ("8010516Ki", 8010516 * 1024), ("2G", 2 * 10**9), ("1e9", 10**9),
     ("1048576", 2**20)],
)  # fmt: skip
def test_memory_quantities(quantity: str, size: int) -> None:
    assert kubesizing.memory_bytes(quantity) == size


def test_a_two_core_cluster_gets_small_requests_and_one_executor() -> None:
    s = kubesizing.choose([kubesizing.capacity_from_node(node("kind", "2", "8010516Ki"))])
    assert kubesizing.settings(s) == {
        "spark.executor.instances": "1",
        "spark.driver.memory": "512m",
        "spark.executor.memory": "512m",
        "spark.kubernetes.driver.request.cores": "0.25",
        "spark.kubernetes.executor.request.cores": "0.25",
    }
    assert not s.warn and "node kind (2 CPU, 7.6 GiB allocatable)" in s.note
    # the pods fit in half the node: 2 x 0.25 CPU, 2 x (512 + 384) MiB
    assert 2 * 250 <= 2000 / 2 and 2 * kubesizing.pod_memory_mib("512m") <= 7.6 * 1024 / 2


def test_a_big_cluster_gets_sparks_defaults_and_a_middle_one_between() -> None:
    big = [NodeCapacity(f"n{i}", 16000, 64 * GiB) for i in range(3)]
    s = kubesizing.choose(big)
    assert s.profile == "spark-defaults"
    assert (s.driver_cores, s.driver_memory, s.executor_memory) == ("1", "1g", "1g")
    assert s.instances == 2
    assert kubesizing.choose([NodeCapacity("m", 4000, 16 * GiB)]).profile == "medium"
    assert kubesizing.choose([NodeCapacity("m", 4000, 6 * GiB)]).profile == "small"
    tiny = kubesizing.choose([NodeCapacity("t", 800, 4 * GiB)])
    assert (tiny.profile, tiny.driver_cores, tiny.instances) == ("tiny", "0.1", 1)
    too_small = kubesizing.choose([NodeCapacity("pi", 1000, 2 * GiB)])
    assert too_small.warn and "may stay Pending" in too_small.note


def test_pinned_pods_are_sized_for_their_host_alone() -> None:
    nodes = [NodeCapacity("big", 32000, 128 * GiB), NodeCapacity("small", 2000, 8 * GiB)]
    assert kubesizing.choose(nodes).profile == "spark-defaults"
    assert kubesizing.choose(nodes, host="small").profile == "small"
    missing = kubesizing.choose(nodes, host="gone")
    assert missing.warn and missing.profile == "small" and "gone" in missing.note


def test_cordoned_and_tainted_nodes_hold_no_spark_pod() -> None:
    cordoned = kubesizing.capacity_from_node(node("c", "64", "256Gi", unschedulable=True))
    tainted = kubesizing.capacity_from_node(
        node("cp", "64", "256Gi", taints=[{"key": "node-role.kubernetes.io/control-plane",
                                           "effect": "NoSchedule"}])
    )  # fmt: skip
    worker = kubesizing.capacity_from_node(node("w", "2", "8Gi"))
    assert not cordoned.schedulable and not tainted.schedulable and worker.schedulable
    assert kubesizing.choose([cordoned, tainted, worker]).profile == "small"
    assert kubesizing.choose([]).warn


def test_overrides_win_and_bad_ones_are_refused() -> None:
    given = kubesizing.overrides(instances=3, executor_memory="2g", driver_cores="500m")
    assert given == {"spark.executor.instances": "3", "spark.executor.memory": "2g",
                     "spark.kubernetes.driver.request.cores": "500m"}  # fmt: skip
    assert kubesizing.sparkapplication(given) == {
        "executor": {"instances": 3, "memory": "2g"},
        "driver": {"coreRequest": "500m"},
    }
    for bad in ({"driver_memory": "1.5g"}, {"executor_memory": "lots"},
                {"executor_cores": "0"}, {"driver_cores": "-1"}, {"instances": 0}):  # fmt: skip
        with pytest.raises(kubesizing.SizingError):
            kubesizing.overrides(**bad)


def test_what_the_pods_request_is_taken_and_only_the_rest_counts() -> None:
    def pod(node: str, phase: str, cpu: str, memory: str, init_cpu: str = "0") -> dict[str, Any]:
        c = {"resources": {"requests": {"cpu": cpu, "memory": memory}}}
        i = {"resources": {"requests": {"cpu": init_cpu}}}
        return {"spec": {"nodeName": node, "containers": [c, c], "initContainers": [i]},
                "status": {"phase": phase}}  # fmt: skip

    used = kubesizing.pod_requests([
        pod("kind", "Running", "500m", "1Gi"),  # two containers: 1 CPU, 2 GiB
        pod("kind", "Succeeded", "4", "8Gi"),  # finished: holds nothing
        pod("kind", "Pending", "100m", "0", init_cpu="2"),  # its init container: 2 CPU
        {"spec": {"containers": [{}]}, "status": {"phase": "Pending"}},  # not bound
    ])  # fmt: skip
    assert used == {"kind": (3000, 2 * GiB)}
    free = NodeCapacity("kind", 4000, 8 * GiB, requested=(3000, 2 * GiB))
    assert free.budget() == (800.0, 6 * 1024 * 0.8)
    assert kubesizing.choose([free]).profile == "small"
    busy = NodeCapacity("kind", 2000, 8 * GiB, requested=(1700, 2 * GiB))
    s = kubesizing.choose([busy])
    assert s.profile == "tiny" and "1.7 CPU, 2.0 GiB requested by its pods" in s.note
    full = NodeCapacity("kind", 2000, 8 * GiB, requested=(2000, 2 * GiB))
    assert kubesizing.choose([full]).warn
