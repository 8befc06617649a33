from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa

from plateau.protocol.errors import Busy
from plateau.protocol.values import Span
from plateau.storage.engine import Engine
from testkit.waiting import wait_until


def append_retrying(engine: Engine, topic: str, partition: str, table: pa.Table) -> Span:
    """Appends in a tight loop can outrun the sealer; a client retries 429 like this."""
    for _ in range(2000):
        try:
            return engine.append(topic, partition, table)
        except Busy:
            time.sleep(0.005)
    raise AssertionError("partition stayed busy")


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """An engine's background work (seals, retention), polled every 10 ms."""
    wait_until(predicate, "the engine's background work", timeout, interval=0.01)
