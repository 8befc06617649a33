"""A partition queues up to ``SEALING_QUEUE`` segments for the sealer before it sheds load.

The sealer's threads are held busy (``engine_with_sealers_held``), so the queue fills
for real; what users see is checked: which appends are stored and which get 429, the
rows readers get meanwhile, the order the segments are sealed in, and that deleting the
topic or closing the node with a full queue completes and leaves nothing behind.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from plateau.protocol.errors import Busy, NotFound
from plateau.protocol.topic_config import TopicConfigRequest
from plateau.storage.engine import Engine
from plateau.storage.partition import SEALING_QUEUE
from tests.conftest import EngineFactory
from tests.unit.conftest import wait_for
from tests.unit.test_memory_budget import engine_with_sealers_held

SEGMENT = 100


def rows(start: int) -> pa.Table:
    return pa.table({"v": pa.array(range(start, start + SEGMENT), pa.int64())})


def fill_queue(e: Engine) -> list[int]:
    """Segments of ``SEGMENT`` rows until the queue is full; the next roll gets 429."""
    e.put_topic("q", TopicConfigRequest.model_validate({"segment": {"max_rows": SEGMENT}}))
    starts = [e.append("q", "0", rows(i * SEGMENT)).start for i in range(SEALING_QUEUE + 1)]
    part = e._topic("q").partitions["0"]
    assert len(part.sealing) == SEALING_QUEUE and part.open is not None
    with pytest.raises(Busy, match="still being sealed") as refused:
        e.append("q", "0", rows(len(starts) * SEGMENT))
    assert refused.value.status == 429 and refused.value.retry_after
    return starts


def read_all(e: Engine) -> list[int]:
    out: list[int] = []
    while True:
        page = e.read_partition("q", "0", len(out), 1000)
        if page.table.num_rows == 0:
            return out
        out += page.table.column("v").to_pylist()


def test_appends_go_on_while_seals_queue_and_the_queue_seals_in_order(
    make_engine: EngineFactory,
) -> None:
    e, release = engine_with_sealers_held(make_engine, wait_s=0)
    try:
        starts = fill_queue(e)
        stored = len(starts) * SEGMENT
        assert starts == [i * SEGMENT for i in range(SEALING_QUEUE + 1)]
        assert read_all(e) == list(range(stored)), "queued segments are read like open ones"
        assert e.topic_usage("q").records == stored  # the refused append left nothing
    finally:
        release.set()
    part = e._topic("q").partitions["0"]
    wait_for(lambda: not part.sealing and len(part.view().sealed) == SEALING_QUEUE)
    sealed = part.view().sealed
    assert [(r.first_index, r.end_index) for r in sealed] == [
        (i * SEGMENT, (i + 1) * SEGMENT) for i in range(SEALING_QUEUE)
    ]
    assert e.append("q", "0", rows(stored)).start == stored  # room again
    assert read_all(e) == list(range(stored + SEGMENT))
    wait_for(lambda: e.memory.sealing == 0)  # that append rolled the third segment


def test_deleting_the_topic_with_a_full_queue_completes_and_frees_its_memory(
    make_engine: EngineFactory,
) -> None:
    e, release = engine_with_sealers_held(make_engine, wait_s=0)
    fill_queue(e)
    deleted = threading.Event()

    def delete() -> None:
        e.delete_topic("q")
        deleted.set()

    worker = threading.Thread(target=delete, daemon=True)
    worker.start()
    # it waits for the seal that the held sealer would run, never for the queued ones
    assert not deleted.wait(0.3)
    release.set()
    assert deleted.wait(10), "deleting the topic waited on the queue"
    with pytest.raises(NotFound):
        e.topic_usage("q")
    assert e.memory.segments == 0 and e.memory.sealing == 0
    assert not list((e.data_dir / "topics").glob("q/*/*"))
    e.close()
    e2 = make_engine()  # nothing of the queued segments is recovered
    assert "q" not in e2.topics()
    assert not list((e2.data_dir / "topics").glob("q/*/*"))


def test_closing_with_a_full_queue_seals_everything_and_a_restart_continues(
    make_engine: EngineFactory,
) -> None:
    e, release = engine_with_sealers_held(make_engine, wait_s=0)
    starts = fill_queue(e)
    release.set()
    e.close()
    e2 = make_engine()
    stored = len(starts) * SEGMENT
    assert read_all(e2) == list(range(stored))
    part = e2._topic("q").partitions["0"]
    assert [r.first_index for r in part.view().sealed] == starts
    assert e2.append("q", "0", rows(stored)).start == stored
