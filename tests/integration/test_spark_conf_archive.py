"""``plateau spark-conf`` for a PlateauNode with an archive, against a real kube-apiserver:
both modes add S3A's settings for the node's bucket and the keys by reference to the
node's own Secret (whose values never reach the output), and the SparkApplication's env
is one the API server accepts for a pod."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testkit.kubeapi import KubeApi

NS = "spark-archive"
KEYS = {"AWS_ACCESS_KEY_ID": "id-5ecret-value", "AWS_SECRET_ACCESS_KEY": "sk-5ecret-value"}
S3A = {
    "spark.hadoop.fs.s3a.endpoint": "http://seaweedfs.storage.svc:8333",
    "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
    "spark.hadoop.fs.s3a.path.style.access": "true",
    "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    "spark.kubernetes.driver.secretKeyRef.AWS_ACCESS_KEY_ID": "s3-keys:AWS_ACCESS_KEY_ID",
    "spark.kubernetes.executor.secretKeyRef.AWS_ACCESS_KEY_ID": "s3-keys:AWS_ACCESS_KEY_ID",
    "spark.kubernetes.driver.secretKeyRef.AWS_SECRET_ACCESS_KEY": "s3-keys:AWS_SECRET_ACCESS_KEY",
    "spark.kubernetes.executor.secretKeyRef.AWS_SECRET_ACCESS_KEY": "s3-keys:AWS_SECRET_ACCESS_KEY",
    "spark.kubernetes.driverEnv.PLATEAU_ARCHIVE": "s3a://plateau-archive/prod",
}


def cli(kube: KubeApi, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "from plateau.cli import main; main()", "spark-conf",
           "--kubeconfig", str(kube.kubeconfig), "--namespace", NS, "--no-sizing",
           *args]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    for value in KEYS.values():
        assert value not in out.stdout and value not in out.stderr
    return out


@pytest.fixture(scope="module")
def objects(kube: KubeApi) -> KubeApi:
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": NS}})  # fmt: skip
    kube.apply({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s3-keys", "namespace": NS}, "stringData": KEYS})  # fmt: skip
    node = {
        "apiVersion": "plateau.dev/v1alpha1", "kind": "PlateauNode",
        "metadata": {"name": "arch", "namespace": NS},
        "spec": {"storage": {"size": "1Gi"}, "archive": {
            "endpoint": "http://seaweedfs.storage.svc:8333", "bucket": "plateau-archive",
            "prefix": "prod", "credentialsSecret": {"name": "s3-keys"}}},
    }  # fmt: skip
    assert kube.apply(node).returncode == 0
    kube.kubectl("patch", "-n", NS, "plateaunode/arch", "--subresource=status", "--type=merge",
                 "-p", json.dumps({"status": {"hostNode": "worker-1"}}))  # fmt: skip
    kube.apply({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-plateau-arch-0", "namespace": NS},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    })  # fmt: skip
    return kube


@pytest.mark.parametrize("mode", ["path", "url"])
def test_both_modes_print_the_archives_s3a_settings(
    objects: KubeApi, tmp_path: Path, mode: str
) -> None:
    out = cli(objects, "--node", "arch", "--mode", mode, cwd=tmp_path)
    conf = dict(line.removeprefix("--conf ").split("=", 1) for line in out.stdout.splitlines())
    assert S3A.items() <= conf.items()
    assert "archive of spark-archive/arch: s3a://plateau-archive/prod" in out.stderr


def test_the_sparkapplication_env_is_a_pods_env(objects: KubeApi, tmp_path: Path) -> None:
    out = cli(objects, "--node", "arch", "--mode", "url", "--format", "sparkapplication",
              cwd=tmp_path)  # fmt: skip
    spec = yaml.safe_load(out.stdout)["spec"]
    assert spec["hadoopConf"]["fs.s3a.path.style.access"] == "true"
    for role in ("driver", "executor"):
        env = {e["name"]: e for e in spec[role]["env"]}
        assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
            "name": "s3-keys", "key": "AWS_ACCESS_KEY_ID"}  # fmt: skip
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"spark-{role}-archive-check", "namespace": NS},
               "spec": {"containers": [{"name": "spark", "image": "spark",
                                        "env": spec[role]["env"]}]}}  # fmt: skip
        objects.kubectl(
            "create", "--dry-run=server", "--validate=strict", "-f", "-", stdin=json.dumps(pod)
        )
