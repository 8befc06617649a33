from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nodeproc import NodeProcess


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
