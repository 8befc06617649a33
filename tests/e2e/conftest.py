"""The e2e suite's cluster: KUBECONFIG if set (kind, any cluster), else the local
single-node cluster of tools/cluster, started for the e2e tests (package scope)
and stopped right after them (unless it was already running, or
PLATEAU_CLUSTER_KEEP is set). With CI=true nothing here skips: a cluster
that cannot be had fails the tests.

The suite runs only when asked (see ``e2e_asked``): starting the local cluster
installs Debian packages, builds Kubernetes and changes iptables, which a
newcomer running the tests as root must not get by surprise. Otherwise its tests
are deselected at collection (so ``--collect-only`` and a plain ``pytest`` never
reach a fixture) and one line says how to include them."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.kube import CLUSTER, IN_CI, Kube, KubeError, find_kubectl, new_namespace

LOCAL_KUBECONFIG = (
    Path(os.environ.get("PLATEAU_CLUSTER_DATA", "/var/lib/plateau-cluster")) / "kubeconfig"
)


# The first e2e test sets the cluster up: on a cold cache that builds the
# Kubernetes binaries and the image (minutes), more than the suite's default
# timeout allows. The tests' own waits stay bounded (kubectl waits of minutes).
E2E_TIMEOUT = 2400


# Set by tools/run-tests: 1 with --e2e (or CI=true), 0 without (it has said how already).
E2E_ENV = "PLATEAU_E2E"
NOT_ASKED = (
    "e2e: {n} cluster tests deselected (tests/e2e: builds Kubernetes, needs root, changes "
    "iptables); include them with tools/run-tests --e2e, or {env}=1, or KUBECONFIG=<a cluster>"
)


def e2e_asked() -> bool:
    """CI=true always runs the suite (never skips); else PLATEAU_E2E=1, or a KUBECONFIG
    the user set (a cluster of theirs: nothing is installed on this machine)."""
    flag = os.environ.get(E2E_ENV, "")
    if IN_CI or flag == "1":
        return True
    return flag != "0" and bool(os.environ.get("KUBECONFIG"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    ours = [item for item in items if here in item.path.parents]
    if ours and not e2e_asked():
        config.hook.pytest_deselected(items=ours)
        items[:] = [item for item in items if here not in item.path.parents]
        if os.environ.get(E2E_ENV) != "0":
            config.stash[_deselected] = len(ours)
        return
    for item in ours:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT))


_deselected = pytest.StashKey[int]()


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    """The one line that says how to include the deselected suite (after "collected")."""
    n = config.stash.get(_deselected, 0)
    return [NOT_ASKED.format(n=n, env=E2E_ENV)] if n else []


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"e2e cluster unavailable (CI=true never skips): {reason}", pytrace=False)
    pytest.skip(reason)


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@pytest.fixture(scope="package")
def local_cluster() -> Iterator[Path | None]:
    """The local cluster's kubeconfig when the tests use it, else None (KUBECONFIG set)."""
    if env := os.environ.get("KUBECONFIG"):
        # The local cluster itself, started by hand: used, and left running.
        yield LOCAL_KUBECONFIG if Path(env).resolve() == LOCAL_KUBECONFIG.resolve() else None
        return
    if os.geteuid() != 0:
        _unavailable("the local cluster (tools/cluster up) needs root; or set KUBECONFIG (kind)")
    already = subprocess.run([str(CLUSTER), "status"], capture_output=True, text=True, check=False)
    owned = already.returncode != 0
    proc = subprocess.run([str(CLUSTER), "up"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        subprocess.run([str(CLUSTER), "down"], capture_output=True, check=False)
        _unavailable(f"tools/cluster up failed (exit {proc.returncode}):\n{_tail(proc.stderr)}")
    try:
        yield Path(proc.stdout.strip().splitlines()[-1])
    finally:
        if owned and not os.environ.get("PLATEAU_CLUSTER_KEEP"):
            subprocess.run([str(CLUSTER), "down"], capture_output=True, check=False)


@pytest.fixture(scope="package")
def kubeconfig(local_cluster: Path | None) -> str:
    """Path of a kubeconfig for the cluster under test."""
    return str(local_cluster) if local_cluster else os.environ["KUBECONFIG"]


@pytest.fixture(scope="package")
def kube(kubeconfig: str) -> Kube:
    try:
        kube = Kube(kubeconfig, find_kubectl())
        kube.run("get", "--raw", "/readyz", namespaced=False, timeout=30)
    except (KubeError, subprocess.TimeoutExpired) as exc:
        _unavailable(f"no usable cluster at {kubeconfig}: {exc}")
    return kube


@pytest.fixture
def ns(kube: Kube, request: pytest.FixtureRequest) -> Iterator[Kube]:
    """A fresh namespace for one test, deleted after it (with its claims and volumes)."""
    prefix = request.node.name.removeprefix("test_").replace("_", "-")[:40].strip("-")
    space = new_namespace(kube, prefix)
    yield space
    space.run("delete", "namespace", space.namespace, "--wait=false", namespaced=False, check=False)
