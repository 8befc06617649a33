"""The Python client against a real node on loopback."""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from plateau.client import (
    AsyncPlateauClient,
    AuthError,
    BadRequestError,
    ConflictError,
    ConnectionFailed,
    NotFoundError,
    PlateauClient,
    RecordTooLargeError,
)
from plateau.protocol.values import RecordStatus, Span
from testkit.nodeproc import NodeProcess, metric_values


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One node for the tests that use topics of their own (starting a node takes seconds)."""
    proc = NodeProcess(tmp_path_factory.mktemp("shared") / "data", token="test-token").start()
    yield proc
    proc.stop()


def client_for(node: NodeProcess) -> PlateauClient:
    return PlateauClient(node.url, token=node.token)


def data(rows: int, offset: int = 0, width: int = 20) -> pa.Table:
    return pa.table(
        {
            "seq": pa.array(range(offset, offset + rows), pa.int64()),
            "text": [f"{i:0{width}d}" for i in range(offset, offset + rows)],
        }
    )


def read_partition(
    client: PlateauClient, topic: str, partition: str, start: int = 0, page_size: int = 1000
) -> pa.Table:
    tables = [page.table for page in client.read_all(topic, partition, start, page_size)]
    return pa.concat_tables(tables) if tables else pa.table({})


def test_append_read_round_trip(node: NodeProcess) -> None:
    table = pa.table(
        {
            "i": pa.array([1, None, 3], pa.int32()),
            "s": ["a", "bé", None],
            "nested": [{"x": 1.5, "tags": ["a"]}, None, {"x": -2.0, "tags": []}],
            "b": [b"\x00", b"", None],
        }
    )
    with client_for(node) as client:
        assert client.append("rt", "0", table) == Span(0, 3)
        assert client.append("rt", "0", table) == Span(3, 6)
        page = client.read("rt", "0", start=1, page_size=2)
        assert page.span == Span(1, 3) and page.status == RecordStatus.RECORD_LIMITED
        assert page.table.select(table.column_names).to_pylist() == table.slice(1, 2).to_pylist()
        got = read_partition(client, "rt", "0", page_size=4)
        assert got.select(table.column_names).to_pylist() == table.to_pylist() * 2
        assert "time" in got.column_names  # added by the node on arrival
        assert client.topics() == ["rt"]
        info = client.topic("rt")
        assert info.partitions == {"0": Span(0, 6)} and info.bytes > 0
        end = client.read("rt", "0", start=6)
        assert end.table.num_rows == 0 and end.status == RecordStatus.ALL


def test_append_row_dicts_and_batches(shared: NodeProcess) -> None:
    with client_for(shared) as client:
        assert client.append("rows", "p", [{"a": 1}, {"a": 2, "b": "x"}]) == Span(0, 2)
        batch = pa.record_batch({"a": [3], "b": ["y"]})
        assert client.append("rows", "p", batch) == Span(2, 3)
        rows = read_partition(client, "rows", "p").select(["a", "b"]).to_pylist()
        assert rows == [{"a": 1, "b": None}, {"a": 2, "b": "x"}, {"a": 3, "b": "y"}]


@pytest.fixture
def small_node(tmp_path: Path) -> Iterator[NodeProcess]:
    proc = NodeProcess(
        tmp_path / "data", token="test-token", env={"PLATEAU_SERVER__MAX_REQUEST_BYTES": "200000"}
    ).start()
    yield proc
    proc.stop()


def test_413_splits_and_every_row_lands_once_in_order(small_node: NodeProcess) -> None:
    table = data(30_000, width=40)  # about 1.7 MB as Arrow: many times the 200 kB limit
    with client_for(small_node) as client:
        assert client.append("big", "0", data(5)) == Span(0, 5)
        assert client.append("big", "0", table) == Span(5, 30_005)
        got = read_partition(client, "big", "0", start=5, page_size=10_000)
        assert got.column("seq").to_pylist() == list(range(30_000))
        assert got.column("text").to_pylist() == table.column("text").to_pylist()
        # the limit is learned: a second append is split before it is sent
        assert client._state.max_request_bytes == 200_000
        assert client.append("big", "0", table) == Span(30_005, 60_005)


def test_single_row_over_the_limit_is_refused_and_nothing_written(
    small_node: NodeProcess,
) -> None:
    with client_for(small_node) as client:
        client.append("huge", "0", data(1))
        table = pa.table({"seq": [1, 2], "text": ["x" * 300_000, "y"]})
        with pytest.raises(RecordTooLargeError, match="single row"):
            client.append("huge", "0", table)
        assert client.topic("huge").partitions["0"] == Span(0, 1)


def test_iterate_across_partitions_to_the_end(shared: NodeProcess) -> None:
    sizes = {"a": 2500, "b": 10, "c": 1200}
    with client_for(shared) as client:
        client.put_topic("it", partitions=2)  # partitions "0" and "1" exist, empty
        for name, count in sizes.items():
            client.append("it", name, data(count, offset=1_000_000 * ord(name)))
        pages = list(client.iterate("it", page_size=700))
        assert pages[-1].status == RecordStatus.ALL
        assert pages[-1].cursor == {**sizes, "0": 0, "1": 0}
        seen = [v for page in pages for v in page.table.column("seq").to_pylist()]
        expected = [1_000_000 * ord(n) + i for n, c in sizes.items() for i in range(c)]
        assert sorted(seen) == expected  # every row exactly once
        for name in sizes:  # and in index order within a partition
            own = [v for v in seen if v // 1_000_000 == ord(name)]
            assert own == sorted(own)

        only_b = list(client.iterate("it", partition_filter=["b"]))
        assert sum(p.table.num_rows for p in only_b) == 10

        resumed = list(client.iterate("it", cursor={"a": 2400, "b": 10, "c": 1200}))
        assert sum(p.table.num_rows for p in resumed) == 100


def test_iterate_follow_sees_new_rows(shared: NodeProcess) -> None:
    with client_for(shared) as client:
        client.append("live", "0", data(3))
        pages = client.iterate("live", follow=True, poll_interval=0.05)
        first = next(pages)
        assert first.table.column("seq").to_pylist() == [0, 1, 2]
        client.append("live", "0", data(2, offset=3))
        second = next(pages)
        assert second.table.column("seq").to_pylist() == [3, 4]
        assert second.cursor == {"0": 5}
        pages.close()


def test_time_filter_is_passed_through(shared: NodeProcess) -> None:
    table = pa.table({"time": pa.array([1000, 2000, 3000], pa.int64()), "v": [1, 2, 3]})
    with client_for(shared) as client:
        client.append("timed", "0", table)
        page = client.read("timed", "0", 0, time_start=1500, time_end="1970-01-01T00:00:02.5Z")
        assert page.table.column("v").to_pylist() == [2]
        pages = list(client.iterate("timed", time_start=2500))
        assert [v for p in pages for v in p.table.column("v").to_pylist()] == [3]


def test_admin_round_trip(shared: NodeProcess) -> None:
    with client_for(shared) as client:
        created = client.put_topic(
            "adm",
            partitions=2,
            max_bytes=64 * 2**20,
            max_age_seconds=3600,
            segment_format="arrow",
            segment_max_rows=5000,
            segment_max_age_seconds=2.5,
        )
        assert created.partitions == 2
        client.put_topic("adm", max_age_seconds=None)  # only this changes
        got = client.get_topic("adm")
        assert got.partitions == 2
        assert got.retention.max_bytes == 64 * 2**20 and got.retention.max_age_seconds is None
        assert got.segment.format == "arrow" and got.segment.max_rows == 5000
        assert client.node_info().allocated_bytes >= 64 * 2**20
        with pytest.raises(ConflictError):
            client.put_topic("adm", max_bytes=2**62)
        with pytest.raises(BadRequestError):
            client.put_topic("adm", segment_format="csv")
        client.delete_topic("adm")
        with pytest.raises(NotFoundError):
            client.get_topic("adm")
        with pytest.raises(NotFoundError):
            client.delete_topic("adm")


def test_errors_carry_the_nodes_message(shared: NodeProcess) -> None:
    with PlateauClient(shared.url) as anonymous:
        with pytest.raises(AuthError) as info:
            anonymous.append("t", "0", data(1))
        assert info.value.status == 401 and info.value.message
    with client_for(shared) as client, pytest.raises(NotFoundError, match="nope"):
        client.read("nope", "0", 0)
    with client_for(shared) as client, pytest.raises(BadRequestError):
        client.append("Bad Name", "0", data(1))


def test_unreachable_node(node: NodeProcess) -> None:
    url = node.url
    node.stop()
    with PlateauClient(url, timeout=2) as client, pytest.raises(ConnectionFailed, match=url):
        client.append("t", "0", data(1))


def test_async_client(node: NodeProcess) -> None:
    async def scenario() -> tuple[Span, list[int], list[str]]:
        async with AsyncPlateauClient(node.url, token=node.token) as client:
            span = await client.append("aio", "0", data(1500))
            seen = [
                v
                async for page in client.iterate("aio", page_size=1000)
                for v in page.table.column("seq").to_pylist()
            ]
            return span, seen, await client.topics()

    span, seen, topics = asyncio.run(scenario())
    assert span == Span(0, 1500) and seen == list(range(1500)) and topics == ["aio"]


def busy_rejections(node: NodeProcess) -> float:
    rejected = metric_values(node.url, "plateau_rejected_appends_total")
    return rejected.get((("reason", "busy"),), 0.0)


@pytest.mark.slow
def test_busy_node_is_retried_and_nothing_is_lost(node: NodeProcess) -> None:
    """Tiny segments and concurrent writers make the node shed load (429); the client's
    retries must turn that into every row stored exactly once."""
    batch = 5000
    with client_for(node) as client:
        client.put_topic("shed", segment_max_rows=2000, segment_format="parquet")
        sent: list[tuple[int, int]] = []
        errors: list[Exception] = []

        def writer(w: int, appends: int) -> None:
            try:
                for i in range(appends):
                    table = pa.table(
                        {"w": [w] * batch, "i": [i] * batch, "pad": ["x" * 100] * batch}
                    )
                    client.append("shed", str(w % 2), table)
                    sent.append((w, i))
            except Exception as exc:
                errors.append(exc)

        rounds = 0
        while busy_rejections(node) == 0 and rounds < 5:
            threads = [
                threading.Thread(target=writer, args=(rounds * 10 + w, 25)) for w in range(4)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            rounds += 1
        assert not errors
        assert busy_rejections(node) > 0, "the node never shed load: the test proved nothing"
        stored: list[tuple[int, int]] = []
        for partition in ("0", "1"):
            for page in client.read_all("shed", partition, page_size=10_000):
                columns = page.table.select(["w", "i"]).to_pydict()
                stored += zip(columns["w"], columns["i"], strict=True)
        counts = collections.Counter(stored)
        assert set(counts) == set(sent) and set(counts.values()) == {batch}
