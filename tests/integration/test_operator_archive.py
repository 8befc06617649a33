"""The archive on a real kube-apiserver: the CRDs' rules refuse bad shapes with what to fix,
the operator's StatefulSet (read back from the API server) gives the node its archive
settings and its S3 keys only by reference, a change of spec.archive rolls the node, a
topic archived on a node without an archive is told so (not retried in a storm), and
a real node archiving to a real S3 server (SeaweedFS) shows as the Archived condition,
status.archive and the ARCHIVE-LAG column, with an Event."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from plateau.client import PlateauClient
from plateau.client.errors import NotFoundError
from testkit.kubeapi import ROOT, KubeApi
from testkit.nodeproc import NodeProcess
from testkit.operatorproc import (
    NODE_TOKEN,
    condition,
    events,
    get,
    running_operator,
    wait_until,
)
from testkit.s3server import ADMIN, REGION, S3Keys, S3Server

API = "plateau.dev/v1alpha1"
KEYS = "s3-keys"
_spaces = iter(range(1000))


def plateau_node(ns: str, name: str, archive: dict[str, Any] | None, url: str | None = None
                 ) -> dict[str, Any]:  # fmt: skip
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    spec: dict[str, Any] = {"storage": {"size": "10Gi"}}
    if url:
        meta["annotations"] = {"plateau.dev/endpoint": url}
        spec["auth"] = {"secretRef": {"name": "node-token"}}
    if archive is not None:
        spec["archive"] = archive
    return {"apiVersion": API, "kind": "PlateauNode", "metadata": meta, "spec": spec}


def topic(ns: str, name: str, node: str = "n", archive: dict[str, Any] | None = None,
          **spec: Any) -> dict[str, Any]:  # fmt: skip
    body: dict[str, Any] = {"nodeRef": {"name": node}, "retention": {"maxBytes": "1Gi"}, **spec}
    if archive is not None:
        body["archive"] = archive
    return {"apiVersion": API, "kind": "PlateauTopic",
            "metadata": {"name": name, "namespace": ns}, "spec": body}  # fmt: skip


def archive_spec(bucket: str = "plateau-archive", **more: Any) -> dict[str, Any]:
    return {"bucket": bucket, "credentialsSecret": {"name": KEYS}, **more}


# --- the CRDs' rules --------------------------------------------------------------------

BUCKET = "archive.bucket must be an S3 bucket name"


@pytest.mark.parametrize(
    ("archive", "message"),
    [
        (archive_spec("Plateau_Archive"), BUCKET),
        (archive_spec("ab"), BUCKET),
        (archive_spec("a..b"), BUCKET),
        (archive_spec("-abc"), BUCKET),
        (archive_spec("10.0.0.1"), BUCKET),
        (archive_spec("b" * 64), "Too long: may not be more than 63"),
        (archive_spec(prefix="/plateau"), "archive.prefix must be a key prefix"),
        (archive_spec(prefix="a//b"), "archive.prefix must be a key prefix"),
        (archive_spec(prefix="a b"), "archive.prefix must be a key prefix"),
        (archive_spec(endpoint="seaweedfs:8333"), "archive.endpoint must be an http://"),
        (archive_spec(endpoint="ftp://seaweedfs"), "archive.endpoint must be an http://"),
        (archive_spec(endpoint="http://k:s@seaweedfs"), "archive.endpoint must be an http://"),
        (archive_spec(region="EU West"), "archive.region must be a region name"),
        ({"bucket": "plateau-archive"}, "archive.credentialsSecret is required"),
        ({"credentialsSecret": {"name": KEYS}}, "spec.archive.bucket: Required value"),
        (archive_spec(credentialsSecret={"name": ""}), "spec.archive.credentialsSecret.name"),
    ],
)
def test_bad_node_archives_are_refused_with_what_to_fix(
    kube: KubeApi, archive: dict[str, Any], message: str
) -> None:
    r = kube.apply(plateau_node("default", "bad", archive))
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert "should match" not in r.stderr


def test_a_node_archive_is_defaulted(kube: KubeApi) -> None:
    archive = archive_spec("plateau.archive-1", prefix="prod/eu",
                           endpoint="https://s3.example.com")  # fmt: skip
    assert kube.apply(plateau_node("default", "good", archive)).returncode == 0
    got = get(kube, "pn", "good", "default")["spec"]["archive"]
    assert (got["region"], got["pathStyle"]) == ("us-east-1", True)
    assert got["credentialsSecret"] == {"name": KEYS, "accessKeyIdKey": "AWS_ACCESS_KEY_ID",
                                        "secretAccessKeyKey": "AWS_SECRET_ACCESS_KEY"}  # fmt: skip
    wide = kube.kubectl("get", "pn", "good", "-n", "default", "-o", "wide").stdout
    assert "plateau.archive-1" in wide  # the ARCHIVE column (priority 1)


def test_the_archive_example_is_accepted(kube: KubeApi) -> None:
    example = ROOT / "examples" / "archive" / "plateaunode.yaml"
    r = kube.kubectl("apply", "-n", "default", "-f", str(example), check=False)
    assert r.returncode == 0, r.stderr
    assert get(kube, "pt", "events", "default")["spec"]["archive"] == {"enabled": True}


@pytest.mark.parametrize(
    "archive",
    [{"required": True}, {"required": False}, {"enabled": False, "required": True}],
)
def test_required_without_enabled_is_refused(kube: KubeApi, archive: dict[str, Any]) -> None:
    r = kube.apply(topic("default", "bad-archive", archive=archive))
    assert r.returncode != 0, r.stderr
    assert "archive.required needs archive.enabled: true" in r.stderr, r.stderr


def test_topic_archive_is_defaulted_and_shown(kube: KubeApi) -> None:
    assert kube.apply(topic("default", "plain", archive={})).returncode == 0
    assert get(kube, "pt", "plain", "default")["spec"]["archive"] == {"enabled": False}
    on = topic("default", "archived", archive={"enabled": True, "required": False})
    assert kube.apply(on).returncode == 0
    header = kube.kubectl("get", "pt", "-n", "default").stdout.splitlines()[0].split()
    assert "ARCHIVE-LAG" in header
    wide = kube.kubectl("get", "pt", "-n", "default", "-o", "wide").stdout.splitlines()[0]
    assert "ARCHIVE" in wide.split()


# --- the operator ------------------------------------------------------------------------


@pytest.fixture
def ns(kube: KubeApi) -> str:
    name = f"archive-{next(_spaces)}"
    kube.kubectl("create", "namespace", name)
    return name


def secret(ns: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
            "stringData": data}  # fmt: skip


def container_env(sts: dict[str, Any]) -> dict[str, dict[str, Any]]:
    containers = sts["spec"]["template"]["spec"]["containers"]
    node = next(c for c in containers if c["name"] == "node")
    return {e["name"]: e for e in node["env"]}


def test_the_statefulset_takes_the_keys_by_reference_and_a_new_archive_rolls_it(
    kube: KubeApi, ns: str, tmp_path: Path
) -> None:
    values = {"AWS_ACCESS_KEY_ID": "id-never-copied", "AWS_SECRET_ACCESS_KEY": "sk-never-copied"}
    assert kube.apply(secret(ns, KEYS, values)).returncode == 0
    archive = archive_spec(endpoint="http://seaweedfs.storage.svc:8333", prefix="prod")
    with running_operator(kube, tmp_path / "operator.log") as op:
        assert kube.apply(plateau_node(ns, "n", archive)).returncode == 0
        sts = wait_until(lambda: get(kube, "statefulset", "plateau-n", ns), "the StatefulSet")
        env = container_env(sts)
        assert env["PLATEAU_STORAGE__ARCHIVE__URL"]["value"] == "s3://plateau-archive/prod"
        assert env["PLATEAU_STORAGE__ARCHIVE__ENDPOINT"]["value"] == archive["endpoint"]
        assert env["PLATEAU_STORAGE__ARCHIVE__REGION"]["value"] == "us-east-1"
        assert env["PLATEAU_STORAGE__ARCHIVE__PATH_STYLE"]["value"] == "true"
        for name in values:
            assert env[name] == {"name": name, "valueFrom": {"secretKeyRef": {
                "name": KEYS, "key": name}}}, op.tail()  # fmt: skip
        dumped = json.dumps(sts) + json.dumps(get(kube, "configmap", "plateau-n-config", ns))
        assert not any(v in dumped for v in values.values())  # never copied anywhere
        template = sts["metadata"]["annotations"]["plateau.dev/template-hash"]

        moved = copy.deepcopy(archive)
        moved["bucket"] = "plateau-archive-2"
        assert kube.apply(plateau_node(ns, "n", moved)).returncode == 0

        def rolled() -> dict[str, Any]:
            now = get(kube, "statefulset", "plateau-n", ns)
            url = container_env(now)["PLATEAU_STORAGE__ARCHIVE__URL"].get("value")
            return now if url == "s3://plateau-archive-2/prod" else {}

        now = wait_until(rolled, "the StatefulSet with the new bucket")
        assert now["metadata"]["annotations"]["plateau.dev/template-hash"] != template

        # a Secret or key that is not there: said, instead of a pod that cannot start
        lost = archive_spec(credentialsSecret={"name": KEYS, "secretAccessKeyKey": "sk"})
        assert kube.apply(plateau_node(ns, "lost", lost)).returncode == 0
        cond = wait_until(lambda: condition(get(kube, "pn", "lost", ns)).get("reason")
                          == "ArchiveSecretMissing" and condition(get(kube, "pn", "lost", ns)),
                          "ArchiveSecretMissing")  # fmt: skip
        assert f"Secret {KEYS!r} with key(s) sk not found" in cond["message"], cond
        assert kube.apply(secret(ns, KEYS, {**values, "sk": "x"})).returncode == 0
        wait_until(lambda: condition(get(kube, "pn", "lost", ns)).get("reason")
                   == "NotReady", "the keys found: waiting for the pod")  # fmt: skip


def ready_node(kube: KubeApi, ns: str, node: NodeProcess, archive: dict[str, Any] | None) -> None:
    """A PlateauNode the operator reaches at ``node`` (endpoint override), its StatefulSet
    said ready as its controller would once the pod runs (no kubelet here)."""
    assert kube.apply(secret(ns, "node-token", {"token": NODE_TOKEN})).returncode == 0
    assert kube.apply(plateau_node(ns, "n", archive, node.url)).returncode == 0
    sts = wait_until(lambda: get(kube, "statefulset", "plateau-n", ns), "the StatefulSet")
    status = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "currentReplicas": 1,
              "availableReplicas": 1, "currentRevision": "r1", "updateRevision": "r1",
              "observedGeneration": sts["metadata"]["generation"]}  # fmt: skip
    kube.kubectl("patch", "statefulset", "plateau-n", "-n", ns, "--subresource=status",
                 "--type=merge", "-p", json.dumps({"status": status}))  # fmt: skip
    wait_until(lambda: condition(get(kube, "pn", "n", ns)).get("status") == "True",
               "the node Ready")  # fmt: skip


@pytest.fixture
def bare_node(tmp_path: Path) -> Iterator[NodeProcess]:
    """A node as the operator runs it, without an archive."""
    env = {"PLATEAU_STORAGE__AUTO_CREATE_TOPICS": "false"}
    proc = NodeProcess(tmp_path / "bare", token=NODE_TOKEN, env=env).start()
    try:
        yield proc
    finally:
        proc.stop()


def test_a_topic_archived_on_a_node_without_an_archive_is_told_so(
    kube: KubeApi, ns: str, bare_node: NodeProcess, tmp_path: Path
) -> None:
    with running_operator(kube, tmp_path / "operator.log") as op:
        # the PlateauNode says archive, its node does not run with one yet (not rolled):
        # the node's 409 ArchiveNotConfigured
        ready_node(kube, ns, bare_node, archive_spec())
        kube.apply(topic(ns, "events", archive={"enabled": True}))
        ready = wait_until(lambda: condition(get(kube, "pt", "events", ns)).get("reason")
                           == "ArchiveNotConfigured" and condition(get(kube, "pt", "events", ns)),
                           "ArchiveNotConfigured from the node")  # fmt: skip
        assert ready["status"] == "False", op.tail()
        assert "has no spec.archive" in ready["message"] and "(the node: " in ready["message"]
        # a PlateauNode without spec.archive: said before the node is asked
        kube.apply(plateau_node(ns, "bare", None))
        kube.apply(topic(ns, "logs", node="bare", archive={"enabled": True}))
        ready = wait_until(lambda: condition(get(kube, "pt", "logs", ns)).get("reason")
                           == "ArchiveNotConfigured" and condition(get(kube, "pt", "logs", ns)),
                           "ArchiveNotConfigured from the PlateauNode")  # fmt: skip
        assert "PlateauNode 'bare' has no spec.archive" in ready["message"]
        warnings = [e for e in events(kube, ns, "events") if e["reason"] == "ArchiveNotConfigured"]
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
        with PlateauClient(bare_node.url, token=NODE_TOKEN) as client, pytest.raises(NotFoundError):
            client.get_topic("events")  # refused: nothing made on the node
        # the archive turned off: the topic syncs
        kube.apply(topic(ns, "events", archive={"enabled": False}))
        wait_until(lambda: condition(get(kube, "pt", "events", ns)).get("reason") == "Synced",
                   "events Synced without the archive")  # fmt: skip
        assert not condition(get(kube, "pt", "events", ns), "Archived")


@contextmanager
def archiving(tmp_path: Path, s3server: S3Server, bucket: str, keys: S3Keys
              ) -> Iterator[NodeProcess]:  # fmt: skip
    """A real node archiving to a real S3 server, as the operator's env would configure it."""
    env = {
        "PLATEAU_STORAGE__AUTO_CREATE_TOPICS": "false",
        "PLATEAU_STORAGE__ARCHIVE__URL": f"s3://{bucket}/plateau",
        "PLATEAU_STORAGE__ARCHIVE__ENDPOINT": s3server.endpoint,
        "PLATEAU_STORAGE__ARCHIVE__REGION": REGION,
        "PLATEAU_STORAGE__ARCHIVE__PATH_STYLE": "true",
        **keys.env(),
    }
    proc = NodeProcess(tmp_path / "archiving", token=NODE_TOKEN, env=env).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def archiving_node(tmp_path: Path, s3server: S3Server, s3bucket: str) -> Iterator[NodeProcess]:
    with archiving(tmp_path, s3server, s3bucket, ADMIN) as proc:
        yield proc


def test_the_archived_condition_and_lag_come_from_the_nodes_archive(
    kube: KubeApi, ns: str, archiving_node: NodeProcess, s3bucket: str, tmp_path: Path
) -> None:
    with running_operator(kube, tmp_path / "operator.log",
                          PLATEAU_OPERATOR_USAGE_SECONDS="1",
                          PLATEAU_OPERATOR_RESYNC_SECONDS="300") as op:  # fmt: skip
        # a resync of 5 minutes: the archive's progress comes from the usage poll
        ready_node(kube, ns, archiving_node, archive_spec(s3bucket, prefix="plateau"))
        kube.apply(topic(ns, "events", archive={"enabled": True}, segment={"maxAge": "1s"}))
        wait_until(lambda: condition(get(kube, "pt", "events", ns)).get("reason") == "Synced",
                   "events Synced")  # fmt: skip
        rows = 5000
        with PlateauClient(archiving_node.url, token=NODE_TOKEN) as client:
            client.append("events", "0", pa.table({"x": pa.array(range(rows), pa.int64())}))

        def archived() -> dict[str, Any]:
            obj = get(kube, "pt", "events", ns)
            span = ((obj.get("status") or {}).get("archive") or {}).get("partitions", {}).get("0")
            cond = condition(obj, "Archived")
            return obj if cond.get("status") == "True" and (span or {}).get("end") == rows else {}

        obj = wait_until(archived, "Archived=True with the whole span (from the poll)", 60.0)
        cond = condition(obj, "Archived")
        assert cond["reason"] == "Current", op.tail()
        assert f"s3://{s3bucket}/plateau" in cond["message"]
        shown = obj["status"]["archive"]
        assert shown["state"] == "Current" and shown["lagSegments"] == 0
        assert shown["lagSeconds"] == 0 and shown["partitions"]["0"]["start"] == 0
        assert shown["uploadedSegments"] >= 1 and shown["required"] is True
        printed = kube.kubectl("get", "pt", "events", "-n", ns).stdout.splitlines()
        header, row = printed[0].split(), printed[1].split()
        assert row[header.index("ARCHIVE-LAG")] == "0"
        noted = wait_until(lambda: [e for e in events(kube, ns, "events")
                                    if e["reason"] == "ArchiveCurrent"], "the Event")  # fmt: skip
        assert all(e["type"] == "Normal" for e in noted)


def test_keys_the_bucket_refuses_show_as_archived_false_unauthorized(
    kube: KubeApi, ns: str, tmp_path: Path, s3server: S3Server, s3bucket: str
) -> None:
    wrong = S3Keys("plateau-nobody", "not-a-secret")
    with (
        archiving(tmp_path, s3server, s3bucket, wrong) as node,
        running_operator(kube, tmp_path / "operator.log", PLATEAU_OPERATOR_USAGE_SECONDS="1") as op,
    ):
        ready_node(kube, ns, node, archive_spec(s3bucket, prefix="plateau"))
        kube.apply(topic(ns, "events", archive={"enabled": True}, segment={"maxAge": "1s"}))
        wait_until(lambda: condition(get(kube, "pt", "events", ns)).get("reason") == "Synced",
                   "events Synced")  # fmt: skip
        with PlateauClient(node.url, token=NODE_TOKEN) as client:
            client.append("events", "0", pa.table({"x": pa.array(range(100), pa.int64())}))
        cond = wait_until(lambda: condition(get(kube, "pt", "events", ns), "Archived").get(
            "reason") == "Unauthorized" and condition(get(kube, "pt", "events", ns), "Archived"),
            "Archived=False/Unauthorized", 60.0)  # fmt: skip
        assert cond["status"] == "False", op.tail()
        assert "credentialsSecret" in cond["message"]
        obj = get(kube, "pt", "events", ns)
        assert condition(obj)["status"] == "True"  # the topic itself is fine: data kept
        assert obj["status"]["archive"]["state"] == "Unauthorized"
        warned = wait_until(lambda: [e for e in events(kube, ns, "events")
                                     if e["reason"] == "ArchiveUnauthorized"],
                            "the Warning")  # fmt: skip
        assert warned[0]["type"] == "Warning"
