from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.kubeapi import ROOT, KubeApi
from testkit.nodeproc import NodeProcess


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    """A real node on loopback with an empty data directory and a write token."""
    proc = NodeProcess(tmp_path / "data", token="test-token").start()
    yield proc
    proc.stop()


@pytest.fixture
def open_node(tmp_path: Path) -> Iterator[NodeProcess]:
    """A real node without any token configured."""
    proc = NodeProcess(tmp_path / "data").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApi]:
    """A real kube-apiserver (and etcd) with the project's CRDs installed, per test module."""
    api = KubeApi(Path(tmp_path_factory.mktemp("kubeapi"))).start()
    try:
        # server-side: strict field validation, so a malformed schema key fails here
        api.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        api.kubectl(
            "wait", "--for=condition=established", "--timeout=60s",
            "crd/plateaunodes.plateau.dev", "crd/plateautopics.plateau.dev",
        )  # fmt: skip
        yield api
    finally:
        api.stop()
