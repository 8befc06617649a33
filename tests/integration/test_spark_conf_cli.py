"""``plateau spark-conf`` against a real kube-apiserver: a PlateauNode the operator would
have made, a StatefulSet deployed without it, and the errors a user meets; ``--mode url``:
the read token referenced in the node's Secret (never printed), the node's address; and
for every job the kubeconfig's API server, the driver's ServiceAccount and requests sized
from the Node objects there (a 2-CPU node that holds the volume, two big ones)."""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testkit.kubeapi import KubeApi

NS = "spark-conf"


def cli(kube: KubeApi, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "from plateau.cli import main; main()", "spark-conf",
           "--kubeconfig", str(kube.kubeconfig), *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=60, check=False)


def claim(name: str, modes: list[str]) -> dict[str, object]:
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"accessModes": modes, "resources": {"requests": {"storage": "1Gi"}}},
    }  # fmt: skip


@pytest.fixture(scope="module")
def objects(kube: KubeApi) -> KubeApi:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    # no controller manager here: the service account pods are admitted with, by hand
    sa = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": NS},
    }
    kube.apply(sa)
    kube.apply({
        "apiVersion": "plateau.dev/v1alpha1", "kind": "PlateauNode",
        "metadata": {"name": "a", "namespace": NS}, "spec": {"storage": {"size": "1Gi"}},
    })  # fmt: skip
    kube.kubectl("patch", "-n", NS, "plateaunode/a", "--subresource=status", "--type=merge",
                 "-p", '{"status": {"hostNode": "worker-7"}}')  # fmt: skip
    kube.apply(claim("data-plateau-a-0", ["ReadWriteOnce"]))
    # a node deployed by hand: a StatefulSet "hand" with claim template "vol", and its pod
    sts = {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "hand", "namespace": NS},
        "spec": {
            "serviceName": "hand", "replicas": 1,
            "selector": {"matchLabels": {"app": "hand"}},
            "template": {"metadata": {"labels": {"app": "hand"}},
                         "spec": {"containers": [{"name": "n", "image": "plateau"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "vol"}, "spec": {
                "accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}],
        },
    }  # fmt: skip
    kube.apply(sts)
    kube.apply(claim("vol-hand-0", ["ReadWriteMany"]))
    # the Kubernetes nodes: the volume's host is small, the rest of the cluster big
    for name, cpu, memory in (("worker-7", "2", "8010516Ki"), ("big-1", "16", "64Gi"),
                              ("big-2", "16", "64Gi")):  # fmt: skip
        kube.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        amounts = {"cpu": cpu, "memory": memory, "pods": "110"}
        status = {"status": {"allocatable": amounts, "capacity": amounts}}
        kube.kubectl("patch", "node", name, "--subresource=status", "--type=merge",
                     "-p", json.dumps(status))  # fmt: skip
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "plateau-spark", "namespace": NS}})  # fmt: skip
    # worker-7 runs a pod that requests 1.5 of its 2 CPUs (bound there: no scheduler here)
    kube.apply({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "busy", "namespace": NS},
        "spec": {"nodeName": "worker-7", "containers": [{
            "name": "c", "image": "busy", "resources": {"requests": {"cpu": "1500m",
                                                                     "memory": "1Gi"}}}]},
    })  # fmt: skip
    return kube


def conf_of(out: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert out.returncode == 0, out.stderr
    return dict(line.removeprefix("--conf ").split("=", 1) for line in out.stdout.splitlines())


def test_conf_for_a_plateau_node(objects: KubeApi, tmp_path: Path) -> None:
    out = cli(objects, "--node", "a", "--namespace", NS, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    conf = dict(line.removeprefix("--conf ").split("=", 1) for line in out.stdout.splitlines())
    template = tmp_path / "plateau-a-pod-template.yaml"
    for role in ("driver", "executor"):
        prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.plateau-data"
        assert conf[f"{prefix}.options.claimName"] == "data-plateau-a-0"
        assert conf[f"{prefix}.mount.path"] == "/plateau/data"
        assert conf[f"{prefix}.mount.readOnly"] == "true"
        assert conf[f"spark.kubernetes.{role}.podTemplateFile"] == str(template)
    assert conf["spark.kubernetes.namespace"] == NS
    assert "worker-7" in out.stderr
    assert 'plateau.spark.read_topic(spark, path="/plateau/data", topic=...)' in out.stderr
    pod = yaml.safe_load(template.read_text())
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["worker-7"]
    # the API server itself accepts the template's affinity (strict field validation)
    full = copy.deepcopy(pod)
    full["metadata"] = {"name": "spark-template-check", "namespace": NS}
    full["spec"]["containers"] = [{"name": "spark", "image": "spark"}]
    objects.kubectl(
        "create", "--dry-run=server", "--validate=strict", "-f", "-", stdin=yaml.safe_dump(full)
    )


def test_properties_and_sparkapplication(objects: KubeApi, tmp_path: Path) -> None:
    out = cli(objects, "--node", "a", "--namespace", NS, "--format", "properties",
              "--mount-path", "/mnt/p", "--pod-template-out", str(tmp_path / "t.yaml"),
              cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    props = dict(
        line.split("=", 1) for line in out.stdout.splitlines() if line and not line.startswith("#")
    )
    assert (
        props["spark.kubernetes.executor.volumes.persistentVolumeClaim.plateau-data.mount.path"]
        == "/mnt/p"
    )
    assert props["spark.kubernetes.driver.podTemplateFile"] == str(tmp_path / "t.yaml")
    out = cli(
        objects, "--node", "a", "--namespace", NS, "--format", "sparkapplication", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "&id" not in out.stdout and "*id" not in out.stdout  # plain YAML
    assert "read_topic(spark, path=" in out.stdout
    spec = yaml.safe_load(out.stdout)["spec"]
    assert spec["volumes"] == [
        {
            "name": "plateau-data",
            "persistentVolumeClaim": {"claimName": "data-plateau-a-0", "readOnly": True},
        }
    ]
    for role in ("driver", "executor"):
        assert spec[role]["volumeMounts"] == [
            {"name": "plateau-data", "mountPath": "/plateau/data", "readOnly": True}
        ]
        assert "worker-7" in str(spec[role]["affinity"])


def test_statefulset_without_operator_and_a_shared_volume(objects: KubeApi, tmp_path: Path) -> None:
    out = cli(objects, "--node", "hand", "--namespace", NS, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "options.claimName=vol-hand-0" in out.stdout
    assert "podTemplateFile" not in out.stdout  # ReadWriteMany: any Kubernetes node
    assert "no affinity needed" in out.stderr
    assert not list(tmp_path.glob("*.yaml"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node", "nope", "--namespace", NS], "no PlateauNode or StatefulSet named 'nope'"),
        (["--node", "a", "--namespace", NS, "--format", "json"], "--format must be one of"),
        (["--node", "a"], "Missing option '--namespace'"),
    ],
)
def test_errors_exit_2_and_write_nothing(
    objects: KubeApi, tmp_path: Path, args: list[str], message: str
) -> None:
    out = cli(objects, *args, cwd=tmp_path)
    assert out.returncode == 2
    assert message in out.stderr and out.stderr.startswith("error:")
    assert out.stdout == "" and not list(tmp_path.iterdir())


def test_unreachable_api_server(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:9"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
    }))  # fmt: skip
    cmd = [sys.executable, "-c", "from plateau.cli import main; main()", "spark-conf",
           "--node", "a", "--namespace", NS, "--kubeconfig", str(config)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2 and "cannot reach the API server" in out.stderr, out.stderr


# --mode url: the tokens are in Secrets the command must name and never print
SECRETS = {
    "plateau-a-token": {"token": "a-write-5ecret", "readToken": "a-read-5ecret"},
    "team-b-tokens": {"token": "b-write-5ecret", "readToken": "b-read-5ecret"},
}
VALUES = [v for data in SECRETS.values() for v in data.values()]
VALUES += [base64.b64encode(v.encode()).decode() for v in list(VALUES)]
B_URL = f"http://plateau-b.{NS}.svc:3030"


@pytest.fixture(scope="module")
def url_objects(objects: KubeApi) -> KubeApi:
    for name, data in SECRETS.items():
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS},
                  "stringData": data}  # fmt: skip
        assert objects.apply(secret).returncode == 0
    # "b": its status names a Secret of another name (the operator's status.tokenSecret);
    # no claim and no pod: url mode needs neither
    node = {
        "apiVersion": "plateau.dev/v1alpha1", "kind": "PlateauNode",
        "metadata": {"name": "b", "namespace": NS}, "spec": {"storage": {"size": "1Gi"}},
    }  # fmt: skip
    assert objects.apply(node).returncode == 0, "PlateauNode b"
    status = {"status": {"endpoint": B_URL, "tokenSecret": "team-b-tokens"}}
    objects.kubectl("patch", "-n", NS, "plateaunode/b", "--subresource=status", "--type=merge",
                    "-p", json.dumps(status))  # fmt: skip
    return objects


def secret_keys(kube: KubeApi, name: str) -> set[str]:
    out = kube.kubectl("get", "secret", "-n", NS, name, "-o", "json")
    return set(json.loads(out.stdout)["data"])


def assert_secret_free(out: subprocess.CompletedProcess[str], cwd: Path) -> None:
    assert out.returncode == 0, out.stderr
    for value in VALUES:
        assert value not in out.stdout and value not in out.stderr
    assert not list(cwd.iterdir())  # no pod template, nothing written


def test_url_mode_conf_follows_status_token_secret(url_objects: KubeApi, tmp_path: Path) -> None:
    out = cli(url_objects, "--node", "b", "--namespace", NS, "--mode", "url", cwd=tmp_path)
    assert_secret_free(out, tmp_path)
    conf = dict(line.removeprefix("--conf ").split("=", 1) for line in out.stdout.splitlines())
    assert {k: v for k, v in conf.items() if "PLATEAU" in k} == {
        "spark.kubernetes.driver.secretKeyRef.PLATEAU_TOKEN": "team-b-tokens:readToken",
        "spark.kubernetes.executor.secretKeyRef.PLATEAU_TOKEN": "team-b-tokens:readToken",
        "spark.kubernetes.driverEnv.PLATEAU_URL": B_URL,
    }
    assert conf["spark.kubernetes.namespace"] == NS
    assert not any("volumes" in key or "podTemplateFile" in key for key in conf)
    assert "readToken" in secret_keys(url_objects, "team-b-tokens")  # what it names exists
    assert "Secret team-b-tokens" in out.stderr and B_URL in out.stderr


def test_url_mode_properties_falls_back_to_the_operators_names(
    url_objects: KubeApi, tmp_path: Path
) -> None:
    """ "a"'s status has no tokenSecret nor endpoint (an operator not yet past its first
    reconcile): the names the operator gives."""
    out = cli(url_objects, "--node", "a", "--namespace", NS, "--mode", "url",
              "--format", "properties", cwd=tmp_path)  # fmt: skip
    assert_secret_free(out, tmp_path)
    props = dict(
        line.split("=", 1) for line in out.stdout.splitlines() if line and not line.startswith("#")
    )
    assert (
        props["spark.kubernetes.driver.secretKeyRef.PLATEAU_TOKEN"] == "plateau-a-token:readToken"
    )
    assert (
        props["spark.kubernetes.executor.secretKeyRef.PLATEAU_TOKEN"] == "plateau-a-token:readToken"
    )
    assert props["spark.kubernetes.driverEnv.PLATEAU_URL"] == f"http://plateau-a.{NS}.svc:3030"
    assert not any("volumes" in key or "podTemplateFile" in key for key in props)
    assert "# read token: key readToken of Secret plateau-a-token" in out.stdout


def test_url_mode_sparkapplication_env_is_a_valid_secret_ref(
    url_objects: KubeApi, tmp_path: Path
) -> None:
    out = cli(url_objects, "--node", "b", "--namespace", NS, "--mode", "url",
              "--format", "sparkapplication", cwd=tmp_path)  # fmt: skip
    assert_secret_free(out, tmp_path)
    assert "&id" not in out.stdout and "*id" not in out.stdout
    spec = yaml.safe_load(out.stdout)["spec"]
    assert "volumes" not in spec and "affinity" not in spec["driver"]
    ref = {"name": "team-b-tokens", "key": "readToken"}
    token = {"name": "PLATEAU_TOKEN", "valueFrom": {"secretKeyRef": ref}}
    assert spec["driver"]["env"] == [{"name": "PLATEAU_URL", "value": B_URL}, token]
    assert spec["driver"]["serviceAccount"] == "plateau-spark"
    assert spec["executor"]["env"] == [token]
    # the API server itself accepts the env as a pod's (strict field validation)
    for role in ("driver", "executor"):
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"spark-{role}-env-check", "namespace": NS},
               "spec": {"containers": [{"name": "spark", "image": "spark",
                                        "env": spec[role]["env"]}]}}  # fmt: skip
        url_objects.kubectl(
            "create", "--dry-run=server", "--validate=strict", "-f", "-", stdin=json.dumps(pod)
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node", "hand", "--mode", "url"], "--mode url needs a PlateauNode"),
        (["--node", "nope", "--mode", "url"], "no PlateauNode named 'nope'"),
        (["--node", "b", "--mode", "volume"], "--mode must be one of path, url"),
        (["--node", "b", "--mode", "url", "--pod-template-out", "t.yaml"], "--pod-template-out"),
    ],
)
def test_url_mode_errors(
    url_objects: KubeApi, tmp_path: Path, args: list[str], message: str
) -> None:
    out = cli(url_objects, *args, "--namespace", NS, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and out.stderr.startswith("error:")
    assert out.stdout == "" and not list(tmp_path.iterdir())


# --- what every job gets: spark.master, the driver's account, sizing from the Nodes -------

TINY = {
    "spark.executor.instances": "1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    "spark.kubernetes.driver.request.cores": "0.1",
    "spark.kubernetes.executor.request.cores": "0.1",
}
SMALL = {
    "spark.executor.instances": "1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    "spark.kubernetes.driver.request.cores": "0.25",
    "spark.kubernetes.executor.request.cores": "0.25",
}
DEFAULTS = {
    "spark.executor.instances": "2",
    "spark.driver.memory": "1g",
    "spark.executor.memory": "1g",
    "spark.kubernetes.driver.request.cores": "1",
    "spark.kubernetes.executor.request.cores": "1",
}


def test_job_settings_name_the_api_server_the_account_and_fit_the_nodes(
    objects: KubeApi, tmp_path: Path
) -> None:
    # path mode pins every pod to the volume's host, worker-7 (2 CPU, 1.5 requested by the
    # pod there): sized for what is left of it alone
    out = cli(objects, "--node", "a", "--namespace", NS, cwd=tmp_path)
    conf = conf_of(out)
    assert conf["spark.master"] == f"k8s://{objects.server}"  # the kubeconfig's server
    assert conf["spark.submit.deployMode"] == "cluster"
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == "plateau-spark"
    assert conf["spark.kubernetes.submission.waitAppCompletion"] == "true"
    assert TINY.items() <= conf.items()
    assert "node worker-7 (2 CPU, 7.6 GiB allocatable; 1.5 CPU, 1.0 GiB requested" in out.stderr
    assert "warning" not in out.stderr  # plateau-spark exists in the namespace
    # url mode runs anywhere: the cluster's two big nodes get Spark's own defaults
    url = conf_of(cli(objects, "--node", "a", "--namespace", NS, "--mode", "url", cwd=tmp_path))
    assert DEFAULTS.items() <= url.items() and url["spark.master"] == conf["spark.master"]
    # the sizes given win; --no-sizing prints only those
    out = cli(objects, "--node", "a", "--namespace", NS, "--mode", "url", "--executor-instances",
              "3", "--driver-memory", "2g", "--service-account", "etl", cwd=tmp_path)  # fmt: skip
    given = conf_of(out)
    assert given["spark.executor.instances"] == "3" and given["spark.driver.memory"] == "2g"
    assert given["spark.executor.memory"] == "1g"  # sized
    assert given["spark.kubernetes.authenticate.driver.serviceAccountName"] == "etl"
    assert f"no ServiceAccount {NS}/etl" in out.stderr
    out = cli(objects, "--node", "a", "--namespace", NS, "--mode", "url", "--no-sizing",
              "--executor-memory", "3g", cwd=tmp_path)  # fmt: skip
    bare = conf_of(out)
    assert bare["spark.executor.memory"] == "3g"
    assert not {k for k in DEFAULTS if k != "spark.executor.memory"} & set(bare)
    # the properties file carries the same keys, spark.master included
    out = cli(objects, "--node", "a", "--namespace", NS, "--mode", "url", "--format",
              "properties", cwd=tmp_path)  # fmt: skip
    props = dict(
        line.split("=", 1) for line in out.stdout.splitlines() if line and not line.startswith("#")
    )
    assert props == url


def test_sizing_without_the_right_to_list_nodes_falls_back_and_says_so(
    objects: KubeApi, tmp_path: Path
) -> None:
    """A user who may read the PlateauNode, not the cluster's Nodes: small sizes, a warning."""
    objects.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "analyst", "namespace": NS}})  # fmt: skip
    objects.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "analyst", "namespace": NS},
        "rules": [{"apiGroups": ["plateau.dev"], "resources": ["plateaunodes"], "verbs": ["get"]}],
    })  # fmt: skip
    objects.apply({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "analyst", "namespace": NS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "analyst"},
        "subjects": [{"kind": "ServiceAccount", "name": "analyst", "namespace": NS}],
    })  # fmt: skip
    token = objects.kubectl("create", "token", "analyst", "-n", NS).stdout.strip()
    config = tmp_path / "analyst.kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "analyst",
        "clusters": [{"name": "c", "cluster": {"server": objects.server,
                                               "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "analyst", "context": {"cluster": "c", "user": "analyst"}}],
        "users": [{"name": "analyst", "user": {"token": token}}],
    }))  # fmt: skip
    cmd = [sys.executable, "-c", "from plateau.cli import main; main()", "spark-conf", "--node",
           "b", "--namespace", NS, "--mode", "url", "--kubeconfig", str(config)]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    conf = conf_of(out)
    assert SMALL.items() <= conf.items()
    assert "cannot list the Kubernetes nodes" in out.stderr and "403" in out.stderr
    assert conf["spark.master"] == f"k8s://{objects.server}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--driver-memory", "1.5g"], "not a Spark memory size: '1.5g'"),
        (["--executor-request-cores", "0"], "a CPU request must be above 0"),
        (["--executor-request-cores", "two"], "not a CPU quantity: 'two'"),
        (["--executor-instances", "0"], "--executor-instances"),
    ],
)
def test_bad_sizes_exit_2_and_write_nothing(
    objects: KubeApi, tmp_path: Path, args: list[str], message: str
) -> None:
    out = cli(objects, "--node", "a", "--namespace", NS, *args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error:") and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert out.stdout == "" and not list(tmp_path.iterdir())


def test_no_kubeconfig_exits_2(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "from plateau.cli import main; main()", "spark-conf",
           "--node", "a", "--namespace", NS, "--kubeconfig", str(tmp_path / "none")]  # fmt: skip
    env = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False, env=env)
    assert out.returncode == 2 and out.stderr.startswith("error: no Kubernetes configuration")
    assert len(out.stderr.strip().splitlines()) == 1
