"""kubectl through subprocess, for the e2e tests (no Python dependency needed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "tools" / "cluster"
IN_CI = os.environ.get("CI", "").lower() == "true"
# The image every e2e pod runs. Built and imported by tools/cluster up here; on
# kind: docker build -f images/Dockerfile -t localhost/plateau:dev . && kind load docker-image ...
IMAGE = os.environ.get("PLATEAU_IMAGE", "localhost/plateau:dev")
# Nothing is ever pulled: images are loaded into the cluster before the tests.
PULL_POLICY = os.environ.get("PLATEAU_IMAGE_PULL_POLICY", "Never")
# The plateau image's user (images/Dockerfile).
UID = 10001
# Every test namespace enforces the Pod Security Standard `restricted`, as a
# hardened production namespace would: the tests prove the product runs there.
POD_SECURITY = "restricted"


class KubeError(RuntimeError):
    pass


def find_kubectl() -> str:
    """The pinned kubectl of tools/cluster-build if there is one, else kubectl on PATH."""
    if env := os.environ.get("KUBECTL"):
        return env
    # Linked by tools/cluster up from tools/cluster-build's cache.
    data = Path(os.environ.get("PLATEAU_CLUSTER_DATA", "/var/lib/plateau-cluster"))
    local = data / "bin" / "kubectl"
    if local.exists():
        return str(local)
    build = ROOT / "tools" / "cluster-build"
    if build.exists():
        proc = subprocess.run([str(build), "--check"], capture_output=True, text=True, check=False)
        candidate = Path(proc.stdout.strip()) / "kubectl"
        if proc.returncode == 0 and candidate.exists():
            return str(candidate)
    found = shutil.which("kubectl")
    if found:
        return found
    raise KubeError("kubectl not found: run tools/cluster-build or put kubectl on PATH")


@dataclass
class Kube:
    kubeconfig: str
    kubectl_path: str
    namespace: str = "default"
    created: list[str] = field(default_factory=list)

    def run(
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        timeout: float = 180,
        namespaced: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        cmd = [self.kubectl_path, "--kubeconfig", self.kubeconfig]
        if namespaced:
            cmd += ["--namespace", self.namespace]
        proc = subprocess.run(
            [*cmd, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise KubeError(
                f"kubectl {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}"
            )
        return proc

    def __call__(self, *args: str, **kwargs: Any) -> str:
        return self.run(*args, **kwargs).stdout

    def apply(self, manifest: dict[str, Any] | list[dict[str, Any]]) -> None:
        items = manifest if isinstance(manifest, list) else [manifest]
        body = {"apiVersion": "v1", "kind": "List", "items": items}
        self.run("apply", "-f", "-", stdin=json.dumps(body))

    def get(self, kind: str, *names: str, **kwargs: Any) -> Any:
        """``kubectl get`` as JSON; ``names`` may hold a name and flags (``-l``, selectors)."""
        return json.loads(self("get", kind, *names, "-o", "json", **kwargs))

    def wait_for(self, what: str, predicate: Any, timeout: float = 180, interval: float = 1) -> Any:
        """Polls predicate() until it returns a true value; returns it."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
            except KubeError as exc:
                last = exc
            else:
                if last:
                    return last
            time.sleep(interval)
        raise AssertionError(
            f"timed out after {timeout}s waiting for {what} (last: {last!r})\n{self.describe()}"
        )

    def pod_phase(self, name: str) -> str:
        return str(self.get("pod", name).get("status", {}).get("phase", ""))

    def wait_pod_done(self, name: str, timeout: float = 180) -> str:
        """Waits until the pod has Succeeded (or Failed); returns the phase."""
        return str(
            self.wait_for(
                f"pod {name} to finish",
                lambda: p if (p := self.pod_phase(name)) in ("Succeeded", "Failed") else "",
                timeout,
            )
        )

    def wait_ready(self, kind_name: str, timeout: float = 180) -> None:
        wait = f"--timeout={int(timeout)}s"
        self.run("wait", "--for=condition=Ready", kind_name, wait, timeout=timeout + 30)

    def exists(self, kind: str, name: str) -> bool:
        return self.run("get", kind, name, check=False).returncode == 0

    def logs(self, name: str, *args: str) -> str:
        return self("logs", name, *args)

    def describe(self) -> str:
        """Pods and recent events of the namespace, for failure messages."""
        try:
            pods = self("get", "pods,pvc", "-o", "wide", check=False, timeout=30)
            events = self("get", "events", "--sort-by=.lastTimestamp", check=False, timeout=30)
        except subprocess.TimeoutExpired:
            return ""
        return f"--- pods\n{pods}\n--- events\n{events[-3000:]}"


def new_namespace(kube: Kube, prefix: str, pod_security: str = POD_SECURITY) -> Kube:
    """A namespace of a unique name that enforces (and warns of) the Pod Security
    Standard ``pod_security``; its kubectl, once its default service account exists."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    labels = {f"pod-security.kubernetes.io/{mode}": pod_security for mode in ("enforce", "warn")}
    manifest = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": labels},
    }
    kube.run("create", "-f", "-", stdin=json.dumps(manifest), namespaced=False)
    # The namespace's default service account is made by the controller manager.
    ns = Kube(kube.kubeconfig, kube.kubectl_path, name)
    try:
        ns.wait_for(
            "the default service account", lambda: ns.exists("serviceaccount", "default"), 60
        )
    except AssertionError:
        # No test gets it, so no test's cleanup deletes it.
        kube.run("delete", "namespace", name, "--wait=false", namespaced=False, check=False)
        raise
    return ns


def pod(
    name: str,
    command: list[str],
    *,
    restart: str = "Never",
    volumes: list[dict[str, Any]] | None = None,
    mounts: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    ports: list[int] | None = None,
) -> dict[str, Any]:
    """A pod running the plateau image as its non-root user, `restricted`-compliant."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {"restartPolicy": restart, **pod_spec(command, volumes, mounts, env, ports)},
    }


def pod_spec(
    command: list[str],
    volumes: list[dict[str, Any]] | None = None,
    mounts: list[dict[str, Any]] | None = None,
    env: dict[str, str] | None = None,
    ports: list[int] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": IMAGE,
        "imagePullPolicy": PULL_POLICY,
        "command": command,
        "securityContext": restricted_container(),
        "volumeMounts": mounts or [],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
        "ports": [{"containerPort": p} for p in ports or []],
    }
    return {
        "terminationGracePeriodSeconds": 5,
        "securityContext": restricted_pod(UID),
        "containers": [container],
        "volumes": volumes or [],
    }


def restricted_pod(uid: int) -> dict[str, Any]:
    """A pod securityContext that the Pod Security Standard `restricted` admits."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_container() -> dict[str, Any]:
    """A container securityContext that the Pod Security Standard `restricted` admits."""
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


# --- Spark on Kubernetes (spark-submit in cluster mode from this machine) ----------
# The Spark image's user: Spark's own uid, as its images run (images/build --spark).
SPARK_UID = 185


def api_server(kubeconfig: str) -> str:
    """The API server's URL of the kubeconfig's current context (spark-submit's master)."""
    import yaml

    config: dict[str, Any] = yaml.safe_load(Path(kubeconfig).read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    return str(cluster["cluster"]["server"])


def restricted_template(path: Path) -> Path:
    """The pod template at ``path`` (made if absent) with the securityContext that Pod
    Security `restricted` asks of Spark's driver and executor pods: Spark sets none of its
    own and takes the first container of a template as the base of its own container."""
    import yaml

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


def spark_submit(
    ns: Kube,
    image: str,
    driver: str,
    conf: list[str],
    job: list[str],
    service_account: str = "plateau-spark",
    app: str = "local:///opt/plateau/examples/spark_job.py",
) -> tuple[dict[str, Any], str]:
    """``app`` (examples/spark_job.py) by spark-submit in cluster mode with ``conf`` (last
    wins over the small defaults here): the report line of its driver and the driver's log."""
    import sys

    submit = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master", f"k8s://{api_server(ns.kubeconfig)}", "--deploy-mode", "cluster",
        "--name", driver,
        "--conf", f"spark.kubernetes.namespace={ns.namespace}",
        "--conf", f"spark.kubernetes.container.image={image}",
        "--conf", "spark.kubernetes.container.image.pullPolicy=IfNotPresent",
        "--conf", f"spark.kubernetes.authenticate.driver.serviceAccountName={service_account}",
        "--conf", f"spark.kubernetes.driver.pod.name={driver}",
        "--conf", "spark.executor.instances=1",
        "--conf", "spark.kubernetes.driver.request.cores=0.1",
        "--conf", "spark.kubernetes.executor.request.cores=0.1",
        "--conf", "spark.driver.memory=512m", "--conf", "spark.executor.memory=512m",
        "--conf", "spark.kubernetes.submission.waitAppCompletion=true",
        *conf,
        app,
        *job,
    ]  # fmt: skip
    ns.run("delete", "pod", driver, "--ignore-not-found", "--wait=true", check=False)
    # spark-submit finds its Spark through the python on PATH: the venv's
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "KUBECONFIG": ns.kubeconfig, "PATH": path}
    out = subprocess.run(submit, capture_output=True, text=True, env=env, timeout=900, check=False)
    assert ns.exists("pod", driver), f"spark-submit made no driver pod: {out.stderr[-3000:]}"
    logs = ns.logs(driver)
    assert ns.pod_phase(driver) == "Succeeded", f"{out.stderr[-3000:]}\n--- driver\n{logs[-4000:]}"
    report = json.loads(next(line for line in logs.splitlines() if line.startswith('{"topic"')))
    return dict(report), logs
