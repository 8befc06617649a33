"""The journey a platform team takes, and README.md's Kubernetes walkthrough, as one module.

The README's shell blocks marked ``<!-- journey: NAME -->`` run here in order with bash,
from the repository's root, with ``KUBECONFIG`` and ``PATH`` from ``tools/demo env``:

1. ``tools/demo up`` from a clean cluster state (``tools/demo down --keep-cluster`` first):
   the producer's rows acknowledged, topic ``clicks`` archived to the S3 server in the
   namespace (``Archived`` Current, every record's segment an object in the bucket), the
   Spark job's read of its whole history (archive, then volume) equal to what was
   acknowledged;
2. the walkthrough's blocks again, as a GitOps tool re-applies: ``kubectl apply -f
   examples/`` says ``unchanged`` for every object, and no status churns for 15 s;
3. a Spark streaming job, then the producer for a minute at a steady rate through the
   node's Service with its token, counting acknowledged rows;
4. the example Spark job on Kubernetes (cluster mode, the chart's ServiceAccount,
   ``plateau spark-conf``'s settings) over the node's volume, read-only, then over its
   URL: count and sum equal what was acknowledged;
5. the streaming job's totals equal what was acknowledged once ingest stopped;
6. a retention change applied as YAML: usage within the new budget, oldest first, shown
   in the topic's status within 10 s, while the archive still starts at index 0;
7. ``tools/demo down``: topics, node, S3 server, volumes, namespace, release: nothing left.

Each step prints one JSON line with its time and figures. The steps are tests of their
own, in order; a step after a failed one is skipped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kube import ROOT, Kube, restricted_template, spark_submit
from tests.e2e.operator import condition

README = ROOT / "README.md"
DEMO = ROOT / "tools" / "demo"
NS = "my-team"
NODE = "ingest"
POD = f"plateau-{NODE}-0"
URL = f"http://plateau-{NODE}.{NS}.svc:3030"
RETENTION_BYTES = 4 << 20  # the README's retention block: maxBytes 4Mi
STATUS_WITHIN = 10.0  # seconds from the apply to the status showing the new usage
PRODUCE_SECONDS = 60  # examples/jobs/producer.yaml
ARCHIVED = "clicks"  # examples/plateautopic-clicks.yaml: archive.enabled
# examples/plateaunode.yaml's spec.archive (bucket plateau-archive, prefix plateau), as
# the S3 server of examples/archive/seaweedfs.yaml keeps it
BUCKET_DIR = "/buckets/plateau-archive/plateau/clicks"
ARCHIVE_CLAIM = "seaweedfs-data"  # examples/archive/seaweedfs.yaml

# What the steps found, for the ones after them.
state: dict[str, Any] = {}


def blocks() -> dict[str, str]:
    """README.md's shell blocks marked ``<!-- journey: NAME -->``, by name."""
    found = re.findall(r"<!-- journey: ([\w-]+) -->\n```sh\n(.*?)```", README.read_text(), re.S)
    return dict(found)


def readme(name: str, kubeconfig: str, timeout: float = 900) -> str:
    """Runs the README's block ``name`` with bash as a reader would, in the repository's
    root, after ``eval "$(tools/demo env)"`` (``demo-*`` blocks run as written)."""
    block = blocks()[name]
    prelude = "" if name.startswith("demo-") else 'eval "$(tools/demo env)"\n'
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", prelude + block], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"README block {name!r} failed ({proc.returncode}):\n{out[-4000:]}"
    return out


def emit(step: str, t0: float, **figures: Any) -> None:
    print(json.dumps({"step": step, "seconds": round(time.monotonic() - t0, 1), **figures}))


def json_lines(text: str, key: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{") and key in line]


@pytest.fixture
def team(kube: Kube) -> Kube:
    return Kube(kube.kubeconfig, kube.kubectl_path, NS)


@pytest.fixture(autouse=True)
def in_order(request: pytest.FixtureRequest) -> None:
    """A step after a failed one is skipped (each builds on what the steps before left)."""
    if state.get("failed"):
        pytest.skip(f"an earlier step failed: {state['failed']}")
    state["failed"] = request.node.name  # cleared when the step passes


def passed() -> None:
    state.pop("failed", None)


def test_1_demo_up(team: Kube, kubeconfig: str) -> None:
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    clean = subprocess.run([str(DEMO), "down", "--keep-cluster"], capture_output=True, text=True,
                           env=env, timeout=900, check=False)  # fmt: skip
    assert clean.returncode == 0, clean.stderr[-3000:]
    assert not team.exists("namespace", NS)
    t0 = time.monotonic()
    out = readme("demo-up", kubeconfig, timeout=2400)
    assert "What to look at next" in out or "look at next" in out, out[-3000:]
    listed = team("get", "plateau")
    assert "ingest" in listed and "inference-logs" in listed and "clicks" in listed, listed
    (produced,) = json_lines(team.logs("job/producer"), '"done"')
    assert produced["acknowledged"] == produced["produced"] > 0
    state["before"] = {t: produced["topics"][t] for t in produced["topics"]}
    spark = json_lines(team.logs("spark-job-driver"), '"topic"')
    # the Spark job read clicks' whole history (archive, then volume): each row once
    clicks = produced["topics"][ARCHIVED]
    assert spark and (spark[-1]["rows"], spark[-1]["sum_latency_ms"]) == (
        clicks["rows"], clicks["sum_latency_ms"]), spark  # fmt: skip
    archive = archive_shown(team)
    emit("1 tools/demo up", t0, producer=produced, spark_job=spark[-1],
         archived_segments=archive["uploadedSegments"])  # fmt: skip
    passed()


def bucket_objects(team: Kube, partition: str) -> list[tuple[int, int]]:
    """The (first, last) index spans of the partition's objects in the bucket, sorted, as
    the S3 server lists them (``weed shell`` in its pod)."""
    out = team("exec", "-i", "deploy/seaweedfs", "--", "weed", "shell",
               stdin=f"fs.ls {BUCKET_DIR}/partition={partition}\n")  # fmt: skip
    return sorted((int(a), int(b)) for a, b in re.findall(r"(\d{20})-(\d{20})\.parquet", out))


def archive_shown(team: Kube) -> dict[str, Any]:
    """What ``tools/demo up`` says to look at: the archived topic's status shows the
    archive Current with every record archived, and the bucket holds each partition's
    segments from index 0 on, without a gap. The S3 server keeps them on a volume."""
    topic = team.get("plateautopic", ARCHIVED)
    assert condition(topic, "Archived") == ("True", "Current"), topic["status"]
    archive, used = topic["status"]["archive"], topic["status"]["usage"]
    assert archive["lagSegments"] == 0 and archive["required"] is True, archive
    for p, span in archive["partitions"].items():
        assert (span["start"], span["end"]) == (0, used["partitions"][p]["end"]), (p, archive)
        objects = bucket_objects(team, p)
        assert objects and objects[0][0] == 0 and objects[-1][1] + 1 == span["end"], objects
        assert all(b[0] == a[1] + 1 for a, b in pairwise(objects)), objects
    assert team.get("pvc", ARCHIVE_CLAIM)["status"]["phase"] == "Bound"
    return dict(archive)


def resource_versions(ns: Kube) -> dict[str, str]:
    items = ns.get("plateaunodes")["items"] + ns.get("plateautopics")["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in items}


def test_2_reapplied_as_gitops_changes_nothing(team: Kube, kubeconfig: str) -> None:
    t0 = time.monotonic()
    for name in ("env", "install", "apply"):
        readme(name, kubeconfig)
    before = resource_versions(team)
    again = team("apply", "-f", str(ROOT / "examples")).strip().splitlines()
    assert again and all(line.endswith(" unchanged") for line in again), again
    time.sleep(15)
    after = resource_versions(team)
    assert after == before, "no status churn while no data flows"
    emit("2 re-applied", t0, objects=len(again), resource_versions_unchanged_for_seconds=15)
    passed()


def test_3_producer_and_5_stream(team: Kube, kubeconfig: str) -> None:
    t0 = time.monotonic()
    readme("stream", kubeconfig)
    # live before ingest starts: it has summed what the topic already held
    team.wait_for(
        "the streaming job's first batch", lambda: '"batch"' in team.logs("job/spark-stream"), 300
    )
    t1 = time.monotonic()
    readme("produce", kubeconfig, timeout=900)
    log = team.logs("job/producer")
    (report,) = json_lines(log, '"done"')
    progress = json_lines(log, '"seconds"')
    assert report["acknowledged"] == report["produced"] > 0
    assert report["unknown"] == report["failed"] == 0
    assert report["seconds"] >= PRODUCE_SECONDS
    # steady: every 10 s interval near the nominal rate (2000 rows/s a topic)
    counts = [sum(p["acknowledged"].values()) for p in progress if "done" not in p]
    rates = [(b - a) / 10 for a, b in zip([0, *counts], counts, strict=False)]
    nominal = 2000 * len(report["topics"])
    assert rates and min(rates) >= 0.7 * nominal, rates
    emit("3 producer", t1, produced=report["produced"], acknowledged=report["acknowledged"],
         rows_per_second=report["rows_per_second"], interval_rates=rates)  # fmt: skip
    state["produced"] = report["topics"]
    (stream,) = json_lines(team.logs("job/spark-stream"), '"sum_latency_ms"')
    expected = expected_totals("inference_logs")
    assert (stream["rows"], stream["sum_latency_ms"]) == expected
    emit("5 streaming job", t0, read_by_spark=stream["rows"], acknowledged=expected[0],
         batches=stream["batches"])  # fmt: skip
    passed()


def expected_totals(topic: str) -> tuple[int, int]:
    """Rows and sum of latency_ms the producers (tools/demo up's and step 3's) were
    acknowledged in ``topic``."""
    runs = [state["before"][topic], state["produced"][topic]]
    return sum(r["rows"] for r in runs), sum(r["sum_latency_ms"] for r in runs)


def test_4_spark_on_kubernetes_path_and_url(team: Kube, kubeconfig: str, tmp_path: Path) -> None:
    t0 = time.monotonic()
    image = demo_env(kubeconfig)["PLATEAU_SPARK_IMAGE"]
    expected = expected_totals("clicks")
    # the clicks topic seals every 10 s: a volume read sees every row once sealed
    team.wait_for("clicks sealed", lambda: sealed(team, "clicks") == expected[0], 60)
    # path mode: the README's block (spark-conf, the restricted template, spark-submit)
    out = readme("spark", kubeconfig)
    (report,) = json_lines(out, '"topic"')
    driver = team.get("pod", "spark-job-driver")
    mounts = driver["spec"]["containers"][0]["volumeMounts"]
    assert any(m["mountPath"] == "/plateau/data" and m.get("readOnly") for m in mounts)
    assert driver["spec"]["serviceAccountName"] == "plateau-spark"
    assert driver["spec"]["nodeName"] == team.get("pod", POD)["spec"]["nodeName"]
    assert (report["rows"], report["sum_latency_ms"]) == expected, report
    path_seconds = time.monotonic() - t0
    job = ["--topic", "clicks", "--column", "latency_ms", "--print-sum"]
    url_conf = plateau(kubeconfig, "spark-conf", "--node", NODE, "--namespace", NS, "--mode", "url")
    url_conf += " " + " ".join(
        f"--conf spark.kubernetes.{role}.podTemplateFile={restricted_template(tmp_path / 'r.yaml')}"
        for role in ("driver", "executor")
    )
    report_url, logs = spark_submit(
        team, image, "journey-url", url_conf.split(), ["--url", URL, *job]
    )
    assert (report_url["rows"], report_url["sum_latency_ms"]) == expected, report_url
    assert "reading through format('plateau')" not in logs  # the JVM reader, on the classpath
    emit("4 spark job", t0, acknowledged=expected[0], read_by_spark_path=report["rows"],
         read_by_spark_url=report_url["rows"], path_seconds=round(path_seconds, 1))  # fmt: skip
    for driver_pod in ("spark-job-driver", "journey-url"):
        team.run("delete", "pod", driver_pod, "--wait=false", check=False)
    passed()


def demo_env(kubeconfig: str) -> dict[str, str]:
    out = subprocess.run([str(DEMO), "env"], capture_output=True, text=True, check=True,
                         env={**os.environ, "KUBECONFIG": kubeconfig})  # fmt: skip
    found = re.findall(r"^export (\w+)=(\S+)$", out.stdout, re.M)
    return {k: v for k, v in found}


def plateau(kubeconfig: str, *args: str) -> str:
    env = {**os.environ, "KUBECONFIG": kubeconfig}
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "plateau"), *args], capture_output=True,
                          text=True, env=env, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def usage(team: Kube, topic: str) -> dict[str, Any]:
    return dict((team.get("plateautopic", topic).get("status") or {}).get("usage") or {})


def sealed(team: Kube, name: str) -> int:
    """Rows of the node's sealed segments in topic ``name`` (from inside its pod)."""
    code = (
        "import pathlib;from plateau.protocol import snapshot;"
        "s=snapshot.decode(pathlib.Path('/data',snapshot.SNAPSHOT_FILE).read_bytes());"
        f"t=s.topics.get({name!r});"
        "print(sum(g.rows for p in t.partitions.values() for g in p.segments) if t else 0)"
    )
    out = team.run("exec", POD, "-c", "node", "--", "python", "-c", code, check=False)
    return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else -1


def test_6_retention_change(team: Kube, kubeconfig: str) -> None:
    before = usage(team, "clicks")
    assert before["bytes"] > RETENTION_BYTES, before
    t0 = time.monotonic()
    readme("retention", kubeconfig)
    t_apply = time.monotonic()
    after = team.wait_for(
        "the status within the new budget",
        lambda: (
            u if (u := usage(team, "clicks")).get("bytes", 1 << 62) <= RETENTION_BYTES else None
        ),
        60,
        interval=0.5,
    )
    shown = time.monotonic() - t_apply
    archive = team.get("plateautopic", ARCHIVED)["status"]["archive"]
    for p, was in before["partitions"].items():
        now = after["partitions"][p]
        assert now["end"] == was["end"], "the newest rows stay"
        assert now["start"] > was["start"], "the oldest went first"
        # ...from the node's disk only: the archive keeps the whole history
        assert archive["partitions"][p]["start"] == 0, archive
    assert shown <= STATUS_WITHIN, f"the status showed the new usage after {shown:.1f}s"
    emit("6 retention", t0, bytes_before=before["bytes"], bytes_after=after["bytes"],
         budget=RETENTION_BYTES, status_seconds=round(shown, 1))  # fmt: skip
    passed()


def test_7_demo_down(team: Kube, kube: Kube, kubeconfig: str) -> None:
    def claims_of_the_team() -> list[str]:
        pvs = kube.get("pv", namespaced=False)["items"]
        return [pv["spec"]["claimRef"]["name"] for pv in pvs
                if (pv["spec"].get("claimRef") or {}).get("namespace") == NS]  # fmt: skip

    assert ARCHIVE_CLAIM in claims_of_the_team(), "the S3 server's volume, before"
    t0 = time.monotonic()
    readme("demo-down", kubeconfig)
    assert not kube.exists("namespace", NS)
    assert not kube.exists("namespace", "plateau-system")
    left = kube("get", "plateaunodes,plateautopics", "-A", "-o", "name", namespaced=False)
    assert not left.strip(), left
    # tools/demo down waited for them: the node's and the S3 server's volumes
    assert not claims_of_the_team()
    emit("7 tools/demo down", t0)
    passed()
