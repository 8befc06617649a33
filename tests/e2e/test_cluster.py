"""The cluster is real: images, storage, Service networking and DNS, NetworkPolicy,
Pod Security admission, controllers, the kubelet and the API server, each proven
with real pods."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kube import CLUSTER, ROOT, Kube, new_namespace, pod, pod_spec


def test_pod_from_local_image_runs_to_completion(ns: Kube) -> None:
    script = "import os, pyarrow; print('plateau-e2e', os.getuid(), pyarrow.__version__)"
    ns.apply(pod("hello", ["python", "-c", script]))
    assert ns.wait_pod_done("hello") == "Succeeded", ns.logs("hello")
    out = ns.logs("hello").split()
    assert out[0] == "plateau-e2e"
    assert out[1] != "0", "the image runs as a non-root user"


def test_default_storage_class_claim_shared_read_only(ns: Kube) -> None:
    ns.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "data"},
            # No storageClassName: the cluster's default class provisions it.
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "64Mi"}},
            },
        }
    )
    claim = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    ns.apply(
        pod(
            "writer",
            ["sh", "-c", "echo written-by-writer > /data/hello.txt && cat /data/hello.txt"],
            volumes=claim,
            mounts=[{"name": "data", "mountPath": "/data"}],
        )
    )
    assert ns.wait_pod_done("writer") == "Succeeded", ns.logs("writer")
    pvc = ns.get("pvc", "data")
    assert pvc["status"]["phase"] == "Bound"
    pv = ns.get("pv", pvc["spec"]["volumeName"], namespaced=False)
    assert pv["spec"]["claimRef"]["name"] == "data"

    read_only = [{"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": True}}]
    check = (
        "cat /data/hello.txt; "
        "if (echo more >> /data/hello.txt) 2>/dev/null || touch /data/new 2>/dev/null; "
        "then echo WRITE-SUCCEEDED; else echo WRITE-REFUSED; fi"
    )
    ns.apply(
        pod(
            "reader",
            ["sh", "-c", check],
            volumes=read_only,
            mounts=[{"name": "data", "mountPath": "/data", "readOnly": True}],
        )
    )
    assert ns.wait_pod_done("reader") == "Succeeded", ns.logs("reader")
    assert ns.logs("reader").split() == ["written-by-writer", "WRITE-REFUSED"]


def test_pod_reaches_another_pod_through_a_service_by_dns_name(ns: Kube) -> None:
    serve = (
        "mkdir -p /tmp/www && echo hello-through-service > /tmp/www/index.html"
        " && exec python -m http.server 8080 --directory /tmp/www"
    )
    web = pod("web", ["sh", "-c", serve], ports=[8080])
    web["spec"]["containers"][0]["readinessProbe"] = {
        "httpGet": {"path": "/", "port": 8080},
        "periodSeconds": 1,
    }
    ns.apply(
        [
            web,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
            },
        ]
    )
    ns.wait_ready("pod/web")
    # a client retries as any would: a Ready pod's Service rules reach kube-proxy a moment
    # later, and until then the Service answers "no route to host" (seen once in CI)
    fetch = (
        "import sys, time, urllib.request\n"
        "deadline = time.monotonic() + 60\n"
        "for url in sys.argv[1:]:\n"
        "    while True:\n"
        "        try:\n"
        "            print(urllib.request.urlopen(url, timeout=10).read().decode().strip())\n"
        "            break\n"
        "        except OSError:\n"
        "            if time.monotonic() > deadline:\n"
        "                raise\n"
        "            time.sleep(1)\n"
    )
    urls = [f"http://web.{ns.namespace}.svc.cluster.local/", "http://web/"]
    ns.apply(pod("client", ["python", "-c", fetch, *urls]))
    assert ns.wait_pod_done("client") == "Succeeded", ns.logs("client")
    assert ns.logs("client").split() == ["hello-through-service"] * 2


def _pods(ns: Kube, selector: str) -> list[dict[str, Any]]:
    return list(json.loads(ns("get", "pods", "-l", selector, "-o", "json"))["items"])


def _running_ready(p: dict[str, Any]) -> bool:
    conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}
    running = p["status"].get("phase") == "Running" and conds.get("Ready") == "True"
    return running and "deletionTimestamp" not in p["metadata"]


def test_deployment_replaces_a_deleted_pod(ns: Kube) -> None:
    ns.apply(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "sleeper"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "sleeper"}},
                "template": {
                    "metadata": {"labels": {"app": "sleeper"}},
                    "spec": pod_spec(["sleep", "3600"]) | {"terminationGracePeriodSeconds": 1},
                },
            },
        }
    )
    ns.run("rollout", "status", "deployment/sleeper", "--timeout=180s", timeout=200)
    first = [p["metadata"]["name"] for p in _pods(ns, "app=sleeper") if _running_ready(p)]
    assert len(first) == 1
    ns.run("delete", "pod", first[0], "--wait=false")
    ns.wait_for(
        "a replacement pod",
        lambda: [
            p
            for p in _pods(ns, "app=sleeper")
            if _running_ready(p) and p["metadata"]["name"] != first[0]
        ],
    )


def test_pods_survive_a_kubelet_restart(ns: Kube, local_cluster: Path | None) -> None:
    if local_cluster is None:
        pytest.skip("restarting the kubelet needs the local cluster (KUBECONFIG points elsewhere)")
    ns.apply(pod("steady", ["sleep", "3600"], restart="Always"))
    ns.wait_ready("pod/steady")
    before = ns.get("pod", "steady")
    proc = subprocess.run(
        [str(CLUSTER), "restart-kubelet"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    ns.wait_for(
        "the node to be Ready again",
        lambda: all(
            c["status"] == "True"
            for n in ns.get("nodes", namespaced=False)["items"]
            for c in n["status"]["conditions"]
            if c["type"] == "Ready"
        ),
    )
    after = ns.get("pod", "steady")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    container_before = before["status"]["containerStatuses"][0]
    container_after = after["status"]["containerStatuses"][0]
    assert container_after["containerID"] == container_before["containerID"]
    assert container_after["restartCount"] == 0
    assert _running_ready(after)
    # The restarted kubelet also runs new pods.
    ns.apply(pod("after-restart", ["true"]))
    assert ns.wait_pod_done("after-restart") == "Succeeded"


def test_local_cluster_dns_answers_cluster_names_only(ns: Kube, local_cluster: Path | None) -> None:
    if local_cluster is None:
        pytest.skip("the local cluster's DNS policy (other clusters may forward upstream)")
    # Pods never reach off the machine: the bridge's forwarding rule is in place...
    rule = ["-t", "mangle", "-C", "FORWARD", "-i", "plateau0", "!", "-o", "plateau0", "-j", "DROP"]
    assert subprocess.run(["iptables", *rule], capture_output=True, check=False).returncode == 0
    # ...and the cluster DNS answers cluster names, and NXDOMAIN for anything else.
    lookup = (
        "import socket, sys\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        print(name, socket.gethostbyname(name))\n"
        "    except socket.gaierror as exc:\n"
        "        print(name, 'unresolved', exc.errno == socket.EAI_NONAME)\n"
    )
    names = ["kubernetes.default.svc.cluster.local", "kube-dns.kube-system", "example.com"]
    ns.apply(pod("lookup", ["python", "-c", lookup, *names]))
    assert ns.wait_pod_done("lookup") == "Succeeded", ns.logs("lookup")
    assert ns.logs("lookup").splitlines() == [
        "kubernetes.default.svc.cluster.local 10.96.0.1",
        "kube-dns.kube-system 10.96.0.10",
        "example.com unresolved True",
    ]


SERVE = (
    "mkdir -p /tmp/www && echo hello > /tmp/www/index.html"
    " && exec python -m http.server 8080 --directory /tmp/www"
)
# One HTTP GET: the status, or why there was none. 10 s: a pod's first packets can
# go out before the API server has its address (kube-network-policies then knows
# no source pod, and drops where a policy admits only some); TCP sends the SYN
# again after 1 s and 3 s.
FETCH = (
    "import sys, urllib.request\n"
    "try:\n"
    "    print(urllib.request.urlopen(sys.argv[1], timeout=10).status)\n"
    "except OSError as exc:\n"
    "    print('unreachable', exc)\n"
)


def _fetch(space: Kube, name: str, url: str) -> str:
    space.apply(pod(name, ["python", "-c", FETCH, url]))
    assert space.wait_pod_done(name) == "Succeeded", space.logs(name)
    return space.logs(name).strip()


def test_network_policy_admits_only_the_namespace_it_names(ns: Kube, kube: Kube) -> None:
    web = pod("web", ["sh", "-c", SERVE], ports=[8080])
    web["spec"]["containers"][0]["readinessProbe"] = {
        "httpGet": {"path": "/", "port": 8080},
        "periodSeconds": 1,
    }
    ns.apply(web)
    ns.wait_ready("pod/web")
    url = f"http://{ns.get('pod', 'web')['status']['podIP']}:8080/"
    allowed = new_namespace(kube, "netpol-allowed")
    other = new_namespace(kube, "netpol-other")
    try:
        # Without a policy any namespace reaches the server.
        assert _fetch(other, "before", url) == "200"
        ns.apply(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {"name": "only-allowed"},
                "spec": {
                    "podSelector": {"matchLabels": {"app": "web"}},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [
                                {
                                    "namespaceSelector": {
                                        "matchLabels": {
                                            "kubernetes.io/metadata.name": allowed.namespace
                                        }
                                    }
                                }
                            ]
                        }
                    ],
                },
            }
        )
        assert _fetch(allowed, "allowed", url) == "200"
        denied = _fetch(other, "denied", url)
        assert denied.startswith("unreachable"), denied
        # The kubelet's probes are the node's, not a namespace's: still admitted.
        assert _running_ready(ns.get("pod", "web"))
    finally:
        for space in (allowed, other):
            space.run("delete", "namespace", space.namespace, "--wait=false", namespaced=False)


def test_namespaces_enforce_pod_security_restricted(ns: Kube) -> None:
    labels = ns.get("namespace", ns.namespace, namespaced=False)["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    # The API server's PodSecurity admission refuses a pod that runs as root...
    root = pod("root", ["id", "-u"])
    root["spec"]["securityContext"] = {"runAsUser": 0}
    del root["spec"]["containers"][0]["securityContext"]
    proc = ns.run("create", "--dry-run=server", "-f", "-", stdin=json.dumps(root), check=False)
    assert proc.returncode != 0
    assert 'violates PodSecurity "restricted' in proc.stderr, proc.stderr
    # ...and admits the tests' own pods, which run as the image's user.
    ns.apply(pod("user", ["id", "-u"]))
    assert ns.wait_pod_done("user") == "Succeeded", ns.logs("user")
    assert ns.logs("user").strip() == "10001"


def _pid(component: str) -> str:
    run = Path(os.environ.get("PLATEAU_CLUSTER_RUN", "/run/plateau-cluster"))
    return (run / "pids" / component).read_text().strip()


def test_api_server_restart_keeps_pods_running(
    ns: Kube, kube: Kube, local_cluster: Path | None
) -> None:
    if local_cluster is None:
        pytest.skip(
            "restarting the API server needs the local cluster (KUBECONFIG points elsewhere)"
        )
    ns.apply(pod("steady", ["sleep", "3600"], restart="Always"))
    ns.wait_ready("pod/steady")
    before = ns.get("pod", "steady")
    server = _pid("kube-apiserver")
    proc = subprocess.run(
        [str(CLUSTER), "restart", "kube-apiserver"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert _pid("kube-apiserver") != server, "a new API server process"
    # restart returns once /readyz answers: no waiting here.
    assert ns("get", "--raw", "/readyz", namespaced=False, timeout=30).strip() == "ok"
    after = ns.get("pod", "steady")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    container_before = before["status"]["containerStatuses"][0]
    container_after = after["status"]["containerStatuses"][0]
    assert container_after["containerID"] == container_before["containerID"]
    assert container_after["restartCount"] == container_before["restartCount"]
    assert _running_ready(after)
    # The controllers are back (a new namespace gets its service account) and the
    # restarted server admits, schedules and runs new pods.
    fresh = new_namespace(kube, "after-api-restart")
    try:
        fresh.apply(pod("after-restart", ["true"]))
        assert fresh.wait_pod_done("after-restart") == "Succeeded"
    finally:
        fresh.run("delete", "namespace", fresh.namespace, "--wait=false", namespaced=False)


def test_up_after_a_killed_run_starts_empty(kube: Kube, local_cluster: Path | None) -> None:
    """A run killed without `down` (CI cancelled mid-test) left its etcd: the next
    `up` must not bring its objects back, whose finalizers nobody releases any more
    (they once failed the journey's demo-down check). Last in this module: it wipes
    the cluster, which the next modules get back empty and running."""
    if local_cluster is None:
        pytest.skip("killing the cluster's processes needs the local cluster")
    stale = new_namespace(kube, "killed-run")
    held = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "held", "finalizers": ["plateau.test/nobody-releases"]},
    }
    stale.apply(held)
    run = Path(os.environ.get("PLATEAU_CLUSTER_RUN", "/run/plateau-cluster"))
    for pid_file in (run / "pids").iterdir():
        if pid_file.suffix != ".match":
            subprocess.run(["kill", "-KILL", pid_file.read_text().strip()], check=False)
    status = subprocess.run([str(CLUSTER), "status"], capture_output=True, check=False)
    assert status.returncode != 0, "every process of the cluster was killed"
    proc = subprocess.run([str(CLUSTER), "up"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "an earlier run left" in proc.stderr, proc.stderr
    assert not kube.exists("namespace", stale.namespace)
    names = kube("get", "configmaps", "-A", "-o", "name", namespaced=False)
    assert "configmap/held" not in names.split()
    status = subprocess.run([str(CLUSTER), "status"], capture_output=True, check=False)
    assert status.returncode == 0, "up again, with nothing of the killed run"


def _images(ctr: list[str]) -> list[tuple[str, str]]:
    """(name, target digest) of every image record in the cluster's containerd."""
    out = subprocess.run([*ctr, "images", "ls"], capture_output=True, text=True, check=True)
    return [(f[0], f[2]) for f in (line.split() for line in out.stdout.splitlines()[1:]) if f]


def test_an_image_imported_again_under_its_name_leaves_nothing_behind(
    ns: Kube, local_cluster: Path | None, tmp_path: Path
) -> None:
    """An image replaced by a new one of the same name is garbage: its content goes,
    ID record too (``prune_unnamed``; cluster/runtime/README.md says what it cost)."""
    if local_cluster is None:
        pytest.skip("the local cluster's image store (tools/cluster load-image)")
    name = "localhost/plateau-e2e/replaced:1"
    archives = []
    for i in (1, 2):
        root = tmp_path / f"rootfs{i}"
        (root / "bin").mkdir(parents=True)
        shutil.copy("/bin/busybox", root / "bin" / "busybox")
        (root / "generation").write_text(f"{i} {os.urandom(8).hex()}\n")
        archive = tmp_path / f"replaced{i}.oci.tar"
        subprocess.run(
            [
                "python3",
                str(ROOT / "cluster" / "runtime" / "oci_archive.py"),
                str(root),
                str(archive),
                name,
                "--entrypoint",
                "/bin/busybox",
            ],
            check=True,
        )
        archives.append(archive)
    ctr = [str(CLUSTER), "ctr"]

    def load(archive: Path) -> None:
        proc = subprocess.run(
            [str(CLUSTER), "load-image", str(archive)], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, proc.stderr

    load(archives[0])
    (first,) = {digest for ref, digest in _images(ctr) if ref == name}
    spec = pod("old-image", ["/bin/busybox", "true"])
    spec["spec"]["containers"][0]["image"] = name
    ns.apply(spec)
    assert ns.wait_pod_done("old-image") == "Succeeded", ns.logs("old-image")
    ns.run("delete", "pod", "old-image", "--wait=true")

    load(archives[1])
    records = _images(ctr)
    assert [d for r, d in records if r == name] != [first], "the new image was not imported"
    assert not [r for r, d in records if d == first], (
        f"the replaced image is still recorded: {[r for r, d in records if d == first]}"
    )
    content = subprocess.run([*ctr, "content", "ls", "-q"], capture_output=True, text=True)
    assert first not in content.stdout.split(), "the replaced image's manifest was not collected"
    # and every record left has a name pointing at its image
    named = {d for r, d in records if not r.startswith("sha256:")}
    assert {d for r, d in records if r.startswith("sha256:")} <= named
    ours = {d for r, d in records if r == name}
    for ref, digest in records:  # the test's image, by its name and its ID
        if digest in ours:
            subprocess.run([*ctr, "images", "rm", "--sync", ref], capture_output=True, check=False)
