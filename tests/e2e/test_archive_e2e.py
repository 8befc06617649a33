"""The object-storage archive on the real cluster, as examples/archive/ sets it up.

SeaweedFS runs in the namespace (its image from ``images/build --seaweedfs``), the
operator from the chart, a ``PlateauNode`` with ``spec.archive`` and a topic that keeps
4 MiB on the node's disk with ``archive.enabled`` (so ``required``). A producer writes
about five times that budget; the topic's status then shows the archive ``Current``
(lag 0) while the node holds at most the budget and no longer has the oldest indexes;
a Spark-on-Kubernetes job (``plateau spark-conf --mode url``'s settings, S3A included)
reads the whole history through ``read_topic(archive=...)``: its count and sum equal
what the producer was acknowledged, each index once.

Small on purpose (a few tens of MB, one Spark job): it runs in every CI run. On the
project's cluster the test builds and loads the SeaweedFS and Spark images itself; on a
cluster of yours (``KUBECONFIG``, kind) load them first (images/Dockerfile.seaweedfs,
images/Dockerfile.spark; names from ``PLATEAU_SEAWEEDFS_IMAGE`` and ``PLATEAU_SPARK_IMAGE``).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.kube import CLUSTER, ROOT, Kube, restricted_template, spark_submit
from tests.e2e.operator import condition, installed, node_topic

EXAMPLE = ROOT / "examples" / "archive"
JOB = Path(__file__).with_name("archive_job.py")
NODE = "archived"
POD = f"plateau-{NODE}-0"
TOPIC = "events"
BUDGET = 4 << 20  # examples/archive/plateaunode.yaml: retention.maxBytes 4Mi
DEFAULT_SEAWEEDFS_IMAGE = "localhost/plateau-seaweedfs:dev"  # examples/archive/seaweedfs.yaml
PRODUCE_BYTES = 5 * BUDGET  # Arrow bytes the producer writes (random hex: ~half that in Parquet)

# Runs in the node's pod: appends batches of rows numbered from FIRST to the topic's two
# partitions until TARGET Arrow bytes, waiting out ArchiveBehind (429: the budget is full
# of segments not archived yet); prints what was acknowledged.
PRODUCE = """
import json, os, secrets, sys, time
import pyarrow as pa
from plateau.client import PlateauClient
from plateau.client.errors import BusyError
topic, target, per_batch, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rows = total = shed = written = batches = 0
with PlateauClient("http://127.0.0.1:3030", token=os.environ["PLATEAU_AUTH__TOKEN"]) as c:
    while written < target:
        n = list(range(first + rows, first + rows + per_batch))
        t = pa.table({"n": n, "payload": [secrets.token_hex(128) for _ in n]})
        try:
            c.append(topic, str((first // per_batch + batches) % 2), t)
        except BusyError as exc:
            shed += 1
            time.sleep(exc.retry_after or 1.0)
            continue
        rows += per_batch; total += sum(n); written += t.nbytes; batches += 1
print(json.dumps({"rows": rows, "sum_n": total, "shed": shed, "arrow_bytes": written}))
"""


def build_and_load(*args: str) -> str:
    """``images/build ARGS`` imported into the local cluster; the image's name."""
    proc = subprocess.run([str(ROOT / "images" / "build"), *args], capture_output=True,
                          text=True, timeout=1800, check=False)  # fmt: skip
    assert proc.returncode == 0, f"images/build {' '.join(args)}: {proc.stderr[-3000:]}"
    archive = proc.stdout.strip().splitlines()[-1]
    load = subprocess.run([str(CLUSTER), "load-image", archive], capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert load.returncode == 0, load.stderr[-3000:]
    # <repo with / and : as _>_<tag>-<key>.oci.tar, as images/build names its archives
    tag = Path(archive).name.removesuffix(".oci.tar").rsplit("-", 1)[0].rsplit("_", 1)[1]
    repo = "localhost/plateau-spark" if "--spark" in args else "localhost/plateau-seaweedfs"
    return f"{repo}:{tag}"


def manifests(seaweedfs_image: str) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(EXAMPLE.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for d in docs:
        if d["kind"] == "Deployment":
            d["spec"]["template"]["spec"]["containers"][0]["image"] = seaweedfs_image
    return docs


def node_usage(ns: Kube) -> dict[str, Any]:
    """The topic's usage as the node itself reports it (its admin API, inside its pod)."""
    found = node_topic(ns, POD, TOPIC)
    assert found is not None, f"topic {TOPIC} missing on the node"
    return dict(found["usage"])


def archive_status(ns: Kube) -> dict[str, Any]:
    return dict((ns.get("plateautopic", TOPIC).get("status") or {}).get("archive") or {})


def emit(step: str, t0: float, **figures: Any) -> None:
    print(json.dumps({"step": step, "seconds": round(time.monotonic() - t0, 1), **figures}))


def test_archive_whole_history_through_spark(
    kube: Kube, ns: Kube, local_cluster: Path | None, tmp_path: Path
) -> None:
    t0 = time.monotonic()
    if local_cluster is not None:
        seaweedfs_image = build_and_load("--seaweedfs", "--content-tag")
        spark_image = build_and_load("--spark", "--content-tag")
    else:  # a cluster of the user's (kind): the images are loaded already, as README says
        seaweedfs_image = os.environ.get("PLATEAU_SEAWEEDFS_IMAGE", DEFAULT_SEAWEEDFS_IMAGE)
        spark_image = os.environ.get("PLATEAU_SPARK_IMAGE", "localhost/plateau-spark:dev")
    emit("archive images", t0, seaweedfs=seaweedfs_image, spark=spark_image)

    with installed(kube, f"spark.jobNamespaces={{{ns.namespace}}}"):
        try:
            check_archive(ns, tmp_path, seaweedfs_image, spark_image)
        finally:
            # while the operator runs: it removes its finalizers, so the namespace goes
            ns.run("delete", "plateautopic,plateaunode", "--all", "--timeout=120s", check=False)


def check_archive(ns: Kube, tmp_path: Path, seaweedfs_image: str, spark_image: str) -> None:
    t1 = time.monotonic()
    ns.apply(manifests(seaweedfs_image))
    ns.wait_for("the bucket", lambda: ns.get("job", "seaweedfs-bucket")
                .get("status", {}).get("succeeded"), 240)  # fmt: skip
    ns.wait_for("the node pod", lambda: ns.exists("pod", POD), 120)
    ns.wait_ready(f"pod/{POD}", timeout=240)
    ns.wait_for("the topic on the node", lambda: node_topic(ns, POD, TOPIC), 120)
    emit("archive set up", t1)

    # --- a producer writes several times the local budget, in rounds of one budget,
    # each followed by a look at what the node holds
    t2 = time.monotonic()
    acked = {"rows": 0, "sum_n": 0, "shed": 0, "arrow_bytes": 0}
    peak = 0
    for _ in range(PRODUCE_BYTES // BUDGET):
        out = ns("exec", POD, "-c", "node", "--", "python", "-c", PRODUCE, TOPIC,
                 str(BUDGET), "2000", str(acked["rows"]), timeout=600)  # fmt: skip
        for key, value in json.loads(out.strip().splitlines()[-1]).items():
            acked[key] += value
        peak = max(peak, node_usage(ns)["bytes"])
    emit("archive produce", t2, **acked, peak_node_bytes=peak)

    # --- the archive catches up; the node's disk holds the budget only
    t3 = time.monotonic()
    ns.wait_for(
        "Archived=True (Current) with no lag",
        lambda: (
            condition(ns.get("plateautopic", TOPIC), "Archived") == ("True", "Current")
            and archive_status(ns).get("lagSegments") == 0
        ),
        300,
    )
    # retention runs every 5 s (storage.retention_interval_seconds): the archived
    # segments over the budget leave the disk at its next run
    usage = ns.wait_for(
        "the node's usage within the budget",
        lambda: u if (u := node_usage(ns))["bytes"] <= BUDGET else None,
        60,
    )
    archived = archive_status(ns)
    assert archived["state"] == "Current" and archived["required"] is True, archived
    for p, span in archived["partitions"].items():
        local_start = usage["partitions"][p]["start"]
        # the oldest records left the disk, and the archive has them from index 0
        assert span["start"] == 0 and local_start > 0, (p, span, usage["partitions"][p])
    emit("archive current", t3, node_bytes=usage["bytes"], budget=BUDGET,
         uploaded=archived.get("uploadedSegments"))  # fmt: skip

    # --- Spark on Kubernetes reads the whole history: archive, then node
    t4 = time.monotonic()
    ns.run("create", "configmap", "archive-job", f"--from-file=archive_job.py={JOB}")
    template = tmp_path / "template.yaml"
    template.write_text(yaml.safe_dump({"spec": {
        "volumes": [{"name": "job", "configMap": {"name": "archive-job"}}],
        "containers": [{"name": "spark", "volumeMounts": [
            {"name": "job", "mountPath": "/opt/archive-job", "readOnly": True}]}],
    }}))  # fmt: skip
    restricted_template(template)
    conf = plateau_cli(ns.kubeconfig, "spark-conf", "--node", NODE, "--namespace",
                       ns.namespace, "--mode", "url").split()  # fmt: skip
    for role in ("driver", "executor"):
        conf += ["--conf", f"spark.kubernetes.{role}.podTemplateFile={template}"]
    url = f"http://plateau-{NODE}.{ns.namespace}.svc:3030"
    report, _ = spark_submit(ns, spark_image, "archive-read", conf, [TOPIC, url, "n"],
                             app="local:///opt/archive-job/archive_job.py")  # fmt: skip
    assert (report["rows"], report["sum_n"]) == (acked["rows"], acked["sum_n"]), report
    for p, (first, last, rows, distinct) in report["partitions"].items():
        assert first == 0 and rows == distinct == last + 1, (p, report["partitions"])
    emit("archive spark read", t4, rows=report["rows"], acknowledged=acked["rows"])
    ns.run("delete", "pod", "archive-read", "--wait=false", check=False)


def plateau_cli(kubeconfig: str, *args: str) -> str:
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "plateau"), *args], capture_output=True,
                          text=True, env={**os.environ, "KUBECONFIG": kubeconfig},
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
