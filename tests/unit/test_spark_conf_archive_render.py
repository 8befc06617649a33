"""``plateau spark-conf``'s S3A settings for a node's archive, from the PlateauNode the API
server returns: endpoint, path style, region, TLS from the endpoint's scheme, the keys by
reference to the node's own Secret (never their values), and the archive's s3a:// url,
in all three formats (tests/integration/test_spark_conf_cli.py runs the command)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from plateau.spark.kube import conf as kubeconf
from plateau.spark.kube import job as kubejob
from plateau.spark.kube.archive_conf import archive_from_node, archive_settings

ARCHIVE: dict[str, Any] = {
    "endpoint": "http://seaweedfs.storage.svc:8333",
    "bucket": "plateau-archive",
    "prefix": "prod",
    "region": "us-east-1",
    "pathStyle": True,
    "credentialsSecret": {"name": "s3-keys", "accessKeyIdKey": "AWS_ACCESS_KEY_ID",
                          "secretAccessKeyKey": "AWS_SECRET_ACCESS_KEY"},
}  # fmt: skip
NODE: dict[str, Any] = {
    "metadata": {"name": "a", "namespace": "ml"},
    "spec": {"storage": {"size": "1Gi"}, "archive": ARCHIVE},
    "status": {"endpoint": "http://plateau-a.ml.svc:3030", "tokenSecret": "plateau-a-token"},
}
EXPECTED = {
    "spark.hadoop.fs.s3a.endpoint": "http://seaweedfs.storage.svc:8333",
    "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
    "spark.hadoop.fs.s3a.path.style.access": "true",
    "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
    "spark.kubernetes.driver.secretKeyRef.AWS_ACCESS_KEY_ID": "s3-keys:AWS_ACCESS_KEY_ID",
    "spark.kubernetes.executor.secretKeyRef.AWS_ACCESS_KEY_ID": "s3-keys:AWS_ACCESS_KEY_ID",
    "spark.kubernetes.driver.secretKeyRef.AWS_SECRET_ACCESS_KEY": "s3-keys:AWS_SECRET_ACCESS_KEY",
    "spark.kubernetes.executor.secretKeyRef.AWS_SECRET_ACCESS_KEY": "s3-keys:AWS_SECRET_ACCESS_KEY",
    "spark.kubernetes.driverEnv.PLATEAU_ARCHIVE": "s3a://plateau-archive/prod",
    # the S3A connector is not on Spark's own classpath in plateau's image (driver memory)
    "spark.driver.extraClassPath": "/opt/plateau/s3a-jars/*",
    "spark.executor.extraClassPath": "/opt/plateau/s3a-jars/*",
}


def test_the_archive_of_a_node_as_s3a_settings() -> None:
    a = archive_from_node("ml", "a", NODE)
    assert a is not None and archive_settings(a) == EXPECTED
    assert archive_from_node("ml", "a", {"spec": {"storage": {}}}) is None
    assert archive_from_node("ml", "hand", None) is None  # a StatefulSet: no PlateauNode


def test_tls_region_and_style_follow_the_spec() -> None:
    aws = {**ARCHIVE, "prefix": "", "region": "eu-west-1", "pathStyle": False}
    del aws["endpoint"]  # AWS for the region: TLS, no endpoint
    a = archive_from_node("ml", "a", {"spec": {"archive": aws}})
    assert a is not None
    got = archive_settings(a)
    assert "spark.hadoop.fs.s3a.endpoint" not in got
    assert got["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert got["spark.hadoop.fs.s3a.path.style.access"] == "false"
    assert got["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert got["spark.kubernetes.driverEnv.PLATEAU_ARCHIVE"] == "s3a://plateau-archive"
    tls = archive_from_node("ml", "a", {"spec": {"archive": {**ARCHIVE,
                            "endpoint": "https://s3.example.com"}}})  # fmt: skip
    assert tls is not None
    assert archive_settings(tls)["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"


def test_every_format_of_both_modes_carries_the_archive() -> None:
    a = archive_from_node("ml", "a", NODE)
    job = kubejob.Job("ml", "k8s://https://10.0.0.1:6443", None)
    access = kubeconf.access_from_objects("ml", "a", NODE, statefulset_exists=False)
    place = kubeconf.VolumePlacement("ml", "a", "data-plateau-a-0", ("ReadWriteOnce",), "w1")

    def url(fmt: str) -> str:
        return kubeconf.render_url(access, fmt, job, a)

    def path(fmt: str) -> str:
        return kubeconf.render(place, fmt, "/plateau/data", None, job, a)

    texts: dict[str, Callable[[str], str]] = {"url": url, "path": path}
    for mode, render in texts.items():
        pairs = [line.removeprefix("--conf ").split("=", 1) for line in render("conf").splitlines()]
        conf = {k: v for k, v in pairs}
        assert EXPECTED.items() <= conf.items(), mode
        props = render("properties")
        assert "# archive of ml/a: s3a://plateau-archive/prod" in props
        assert "keys: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY of Secret s3-keys" in props
        spec = yaml.safe_load(render("sparkapplication"))["spec"]
        assert spec["hadoopConf"]["fs.s3a.path.style.access"] == "true"
        assert spec["hadoopConf"]["fs.s3a.endpoint"] == "http://seaweedfs.storage.svc:8333"
        ref = {"secretKeyRef": {"name": "s3-keys", "key": "AWS_SECRET_ACCESS_KEY"}}
        for role in ("driver", "executor"):
            env = {e["name"]: e for e in spec[role]["env"]}
            assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == ref, (mode, role)
        env = {e["name"]: e for e in spec["driver"]["env"]}
        assert env["PLATEAU_ARCHIVE"]["value"] == "s3a://plateau-archive/prod"
        if mode == "url":  # the node's own env entries are kept, the archive's appended
            assert "PLATEAU_URL" in env and "PLATEAU_TOKEN" in env
    # without an archive, nothing of S3A
    plain = kubeconf.render_url(access, "conf", job)
    assert "s3a" not in plain and "AWS_" not in plain
