"""The sealer's threads: arrow seals run side by side, Parquet encodings at most two at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from plateau.protocol.topic_config import TopicConfigRequest
from plateau.storage import sealing
from plateau.storage.engine import SEALER_THREADS
from tests.conftest import EngineFactory
from tests.unit.conftest import append_retrying, wait_for


def rows(lo: int, n: int) -> pa.Table:
    return pa.table({"x": pa.array(range(lo, lo + n), pa.int64())})


class Overlap:
    """Calls the real function, slowed by ``delay`` so calls overlap; counts the most at once."""

    def __init__(self, real: Callable[..., Any], delay: float) -> None:
        self.real = real
        self.delay = delay
        self.most = 0
        self._running = 0
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self._running += 1
            self.most = max(self.most, self._running)
        try:
            time.sleep(self.delay)
            return self.real(*args, **kwargs)
        finally:
            with self._lock:
                self._running -= 1


def test_parquet_encodings_are_capped_and_every_segment_seals_without_a_stall(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 partitions roll Parquet segments at once through 4 sealer threads: never more than
    ``REWRITES_AT_ONCE`` encode together, and every row ends up sealed and readable (a
    stall fails ``wait_for``). The real ``write_sealed`` runs, slowed so that seals overlap."""
    assert SEALER_THREADS > sealing.REWRITES_AT_ONCE
    probe = Overlap(sealing.write_sealed, 0.02)  # type: ignore[attr-defined]
    monkeypatch.setattr(sealing, "write_sealed", probe)
    e = make_engine()
    config = {"partitions": 8, "segment": {"format": "parquet", "max_rows": 100}}
    e.put_topic("t", TopicConfigRequest.model_validate(config))
    writers = [
        threading.Thread(
            target=lambda p=p: [
                append_retrying(e, "t", str(p), rows(i * 100, 100)) for i in range(10)
            ]
        )
        for p in range(8)
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join(timeout=60)
        assert not w.is_alive(), "an append stalled behind the sealer"

    def sealed_rows() -> int:
        parts = e._topic("t").partitions.values()
        return sum(r.end_index - r.first_index for p in parts for r in p.sealed)

    wait_for(lambda: sealed_rows() >= 8 * 900, timeout=60)  # each partition's last may stay open
    assert 1 < probe.most <= sealing.REWRITES_AT_ONCE
    for p in range(8):
        got = e.read_partition("t", str(p), 0, 2000).table.column("x").to_pylist()
        assert got == list(range(1000))


def test_arrow_seals_run_on_every_sealer_thread(
    make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Arrow seals are waits (fsyncs, a rename): they are not capped with the Parquet ones."""
    probe = Overlap(sealing.rename_durably, 0.05)  # type: ignore[attr-defined]
    monkeypatch.setattr(sealing, "rename_durably", probe)
    e = make_engine()
    config = {"partitions": 8, "segment": {"format": "arrow", "max_rows": 100}}
    e.put_topic("t", TopicConfigRequest.model_validate(config))
    for i in range(3):
        for p in range(8):
            append_retrying(e, "t", str(p), rows(i * 100, 100))
    wait_for(lambda: all(len(p.sealed) >= 2 for p in e._topic("t").partitions.values()))
    assert probe.most > sealing.REWRITES_AT_ONCE
