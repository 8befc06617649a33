from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from plateau.protocol.errors import Busy
from plateau.protocol.values import Span
from plateau.storage.config import StorageSettings
from plateau.storage.engine import Engine

EngineFactory = Callable[..., Engine]


@pytest.fixture
def make_engine(tmp_path: Path) -> Iterator[EngineFactory]:
    """Engines on ``tmp_path/data``; all closed at the end of the test."""
    engines: list[Engine] = []

    def make(**kwargs: object) -> Engine:
        settings = StorageSettings(data_dir=tmp_path / "data", **kwargs)  # type: ignore[arg-type]
        engine = Engine(settings)
        engines.append(engine)
        return engine

    yield make
    for e in engines:
        e.close()


def append_retrying(engine: Engine, topic: str, partition: str, table: pa.Table) -> Span:
    """Appends in a tight loop can outrun the sealer; a client retries 429 like this."""
    for _ in range(2000):
        try:
            return engine.append(topic, partition, table)
        except Busy:
            time.sleep(0.005)
    raise AssertionError("partition stayed busy")


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.01)
    raise AssertionError("condition not met in time")
