"""Reading archived segments back (``storage.archive.reads``) against a real S3 server
(SeaweedFS): rows by index across row groups, only the row groups and columns a read
needs fetched and each fetched once while cached (also by readers asking at the same
time), row groups outside a time range skipped by their statistics, an object expired at
the oldest end skipped (the start moves), one gone in the middle or an unreachable
server a clear 503.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from prometheus_client import REGISTRY

from plateau.protocol.archive import ArchivedSegment, segment_key
from plateau.storage.archive.history import ArchiveReads
from plateau.storage.archive.reads import ArchiveUnavailable
from plateau.storage.catalog.memory import BudgetSource, MemoryBudget
from plateau.storage.types import TimeRange
from testkit.nodeproc import free_port
from testkit.s3server import ADMIN, S3Server

T0 = 1_700_000_000_000
GROUP = 100  # rows per row group
_topics = itertools.count(1)


def _table(first: int, rows: int, timestamps: bool = False) -> pa.Table:
    times = [T0 + i for i in range(first, first + rows)]
    return pa.table(
        {
            "time": pa.array(times, pa.timestamp("ms", "UTC") if timestamps else pa.int64()),
            "v": pa.array(range(first, first + rows), pa.int64()),
            "s": pa.array([f"payload-{i:08d}" * 4 for i in range(first, first + rows)]),
        }
    )


class Archive:
    """Segments uploaded the way the node lays them out, and a reader over them."""

    def __init__(self, server: S3Server, bucket: str) -> None:
        self.fs = server.filesystem(ADMIN)
        self.root = f"{bucket}/pfx"
        self.topic = f"t{next(_topics)}"
        self.segments: list[ArchivedSegment] = []
        self.loads = 0

    def upload(self, first: int, rows: int, timestamps: bool = False) -> ArchivedSegment:
        key = segment_key(self.topic, "0", first, first + rows)
        sink = pa.BufferOutputStream()
        pq.write_table(_table(first, rows, timestamps), sink, row_group_size=GROUP)
        data = sink.getvalue().to_pybytes()
        with self.fs.open_output_stream(f"{self.root}/{key}") as out:
            out.write(data)
        seg = ArchivedSegment(
            partition="0",
            start=first,
            end=first + rows,
            min_time_ms=T0 + first,
            max_time_ms=T0 + first + rows - 1,
            bytes=len(data),
            key=key,
            etag=hashlib.md5(data).hexdigest(),  # a single-part upload's ETag
            archived_at=0.0,
        )
        self.segments.append(seg)
        return seg

    def load(self, topic: str) -> list[ArchivedSegment]:
        self.loads += 1
        return list(self.segments) if topic == self.topic else []

    def mark(self, topic: str, partition: str) -> int:
        return self.segments[-1].end if topic == self.topic and self.segments else -1

    def reads(self, cache_bytes: int = 64 << 20, fs: pafs.FileSystem | None = None) -> ArchiveReads:
        chosen = fs or self.fs
        return ArchiveReads(lambda: chosen, self.root, cache_bytes, self.load, self.mark)

    def fetched(self) -> float:
        value = REGISTRY.get_sample_value("plateau_archive_read_bytes_total", {"topic": self.topic})
        return value or 0.0

    def group_bytes(self, seg: ArchivedSegment, group: int, columns: tuple[str, ...]) -> int:
        with self.fs.open_input_file(f"{self.root}/{seg.key}") as f:
            rg = pq.ParquetFile(f).metadata.row_group(group)
        chunks = [rg.column(j) for j in range(rg.num_columns)]
        return sum(c.total_compressed_size for c in chunks if c.path_in_schema in columns)


@pytest.fixture(scope="module")
def bucket(s3server: S3Server) -> str:
    """One bucket for the module (each test its own topic under it): SeaweedFS grows
    volumes per bucket, and a bucket per test ran out of them on a small disk."""
    return s3server.create_bucket("archive-reads")


@pytest.fixture
def archive(s3server: S3Server, bucket: str) -> Archive:
    return Archive(s3server, bucket)


def test_rows_by_index_fetch_only_what_is_read_and_once(archive: Archive) -> None:
    seg = archive.upload(0, 1000)
    reads = archive.reads()
    run = reads.run(archive.topic, "0", local_start=1000)
    assert run is not None and run.start == 0
    file = run.open(seg)
    assert file is not None
    footer = archive.fetched()
    assert footer > 0  # the footer, fetched once
    got = file.read(50, 200, ("v",))
    assert got.column_names == ["v"] and got.column("v").to_pylist() == list(range(50, 250))
    after_first = archive.fetched()
    assert after_first - footer == sum(archive.group_bytes(seg, g, ("v",)) for g in (0, 1, 2))
    # groups 1 and 2 are cached: the next page fetches group 3 alone
    assert file.read(250, 100, ("v",)).column("v").to_pylist() == list(range(250, 350))
    assert archive.fetched() - after_first == archive.group_bytes(seg, 3, ("v",))
    whole = file.read(990, 50)  # past the end: what is there
    assert whole.column_names == ["time", "v", "s"] and whole.num_rows == 10
    assert run.open(seg) is not None and archive.fetched() > after_first  # footer kept


def test_row_groups_outside_a_time_range_are_skipped(archive: Archive) -> None:
    for timestamps in (False, True):
        seg = archive.upload(len(archive.segments) * 1000, 1000, timestamps)
        reads = archive.reads()
        run = reads.run(archive.topic, "0", local_start=seg.end)
        assert run is not None
        file = run.open(seg)
        assert file is not None
        base = seg.start
        wanted = TimeRange(T0 + base + 550, T0 + base + 720)
        assert file.next_match(0, wanted) == 500
        assert file.next_match(640, wanted) == 640
        assert file.next_match(800, wanted) == 1000  # nothing after: the segment's end


def test_an_object_expired_at_the_oldest_end_moves_the_start(archive: Archive) -> None:
    first, second, third = (archive.upload(i * 300, 300) for i in range(3))
    archive.fs.delete_file(f"{archive.root}/{first.key}")
    reads = archive.reads()
    run = reads.run(archive.topic, "0", local_start=900)
    assert run is not None and run.start == 0
    assert run.open(first) is None  # gone, nothing older: skipped
    moved = reads.run(archive.topic, "0", local_start=900)
    assert moved is not None and moved.start == second.start
    assert reads.reader.expired_below(archive.topic, "0") == first.end
    file = moved.open(third)
    assert file is not None and file.read(0, 3).column("v").to_pylist() == [600, 601, 602]


def test_objects_expiring_after_their_footer_was_read(archive: Archive) -> None:
    """Footers kept from before: the first row-group fetch finds the object gone. At the
    oldest end (with the next one gone too) the read is to be made again (the engine
    does) and skips both; in the middle it is a 503."""
    segs = [archive.upload(i * 300, 300) for i in range(4)]
    reads = archive.reads()
    run = reads.run(archive.topic, "0", local_start=1200)
    assert run is not None
    files = [run.open(s) for s in segs]
    for seg in (segs[0], segs[1], segs[3]):
        archive.fs.delete_file(f"{archive.root}/{seg.key}")
    first, _, third, fourth = files
    assert first is not None and third is not None and fourth is not None
    with pytest.raises(FileNotFoundError):  # ArchiveExpired: the engine reads again
        first.read(0, 10)
    assert reads.reader.expired_below(archive.topic, "0") == segs[1].end
    again = reads.run(archive.topic, "0", local_start=1200)
    assert again is not None and again.start == segs[2].start
    assert third.read(0, 2).column("v").to_pylist() == [600, 601]
    with pytest.raises(ArchiveUnavailable) as caught:
        fourth.read(0, 10)
    assert "hole" in caught.value.message and segs[3].key in caught.value.message


def test_an_object_gone_in_the_middle_is_an_error_naming_it(archive: Archive) -> None:
    first, second, _ = (archive.upload(i * 300, 300) for i in range(3))
    archive.fs.delete_file(f"{archive.root}/{second.key}")
    reads = archive.reads()
    run = reads.run(archive.topic, "0", local_start=900)
    assert run is not None
    with pytest.raises(ArchiveUnavailable) as caught:
        run.open(second)
    assert caught.value.status == 503 and second.key in caught.value.message
    assert "hole" in caught.value.message
    file = run.open(first)
    assert file is not None and file.read(0, 2).column("v").to_pylist() == [0, 1]


def test_an_unreachable_archive_is_a_clear_error(archive: Archive) -> None:
    seg = archive.upload(0, 300)
    nowhere = pafs.S3FileSystem(
        access_key=ADMIN.access_key,
        secret_key=ADMIN.secret_key,
        endpoint_override=f"127.0.0.1:{free_port()}",
        scheme="http",
        region="us-east-1",
        connect_timeout=1,
        request_timeout=2,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
    )
    run = archive.reads(fs=nowhere).run(archive.topic, "0", local_start=300)
    assert run is not None
    with pytest.raises(ArchiveUnavailable) as caught:
        run.open(seg)
    message = caught.value.message
    assert caught.value.status == 503 and seg.key in message and "cannot read" in message


def test_the_segment_list_is_loaded_again_only_when_more_was_archived(archive: Archive) -> None:
    archive.upload(0, 300)
    reads = archive.reads()
    for _ in range(3):
        run = reads.run(archive.topic, "0", local_start=300)
        assert run is not None and run.after(0)[-1].end == 300
    assert archive.loads == 1
    archive.upload(300, 300)  # archived, then removed locally: must be found
    run = reads.run(archive.topic, "0", local_start=600)
    assert run is not None and [s.end for s in run.after(0)] == [300, 600]
    assert archive.loads == 2
    assert reads.run(archive.topic, "0", local_start=0) is None  # nothing below the disk


def _concurrently(workers: int, job: Callable[[int], None]) -> None:
    """Run ``job`` on ``workers`` threads at once; a stall (a lock or a fetch waited on
    forever) fails instead of hanging the suite."""
    with ThreadPoolExecutor(workers) as pool:
        for future in [pool.submit(job, i) for i in range(workers)]:
            future.result(timeout=60)


def test_readers_at_once_share_each_fetch(archive: Archive) -> None:
    """Eight readers start on the same row groups together: each group is fetched once."""
    segs = [archive.upload(i * 1000, 1000) for i in range(2)]
    reads = archive.reads()
    run = reads.run(archive.topic, "0", local_start=2000)
    assert run is not None
    files = [run.open(s) for s in segs]
    before = archive.fetched()
    start = threading.Barrier(8)

    def job(worker: int) -> None:
        start.wait()
        rng = random.Random(worker)
        for _ in range(40):
            which = rng.randrange(2)
            offset = rng.randrange(1000)
            file = files[which]
            assert file is not None
            got = file.read(offset, 150, ("v", "s")).column("v").to_pylist()
            first = which * 1000 + offset
            assert got == list(range(first, min(first + 150, (which + 1) * 1000)))

    _concurrently(8, job)
    every_group = sum(
        archive.group_bytes(s, g, ("v", "s")) for s in segs for g in range(1000 // GROUP)
    )
    assert archive.fetched() - before <= every_group  # never one group twice


def test_a_small_cache_under_concurrent_readers_stays_correct(archive: Archive) -> None:
    """A cache holding about two row groups: readers evict each other's groups all the
    time, fetches overlap, results stay exact and nothing stalls."""
    seg = archive.upload(0, 2000)
    group_bytes = _table(0, GROUP).nbytes
    reads = archive.reads(cache_bytes=2 * group_bytes)
    run = reads.run(archive.topic, "0", local_start=2000)
    assert run is not None
    file = run.open(seg)
    assert file is not None
    marks = itertools.count()
    moving = ArchiveReads(
        lambda: archive.fs, archive.root, 0, archive.load, lambda t, p: next(marks)
    )

    def job(worker: int) -> None:
        rng = random.Random(100 + worker)
        for _ in range(30):
            offset = rng.randrange(2000)
            got = file.read(offset, 120).column("v").to_pylist()
            assert got == list(range(offset, min(offset + 120, 2000)))
            # the segment list's lock too: a mark that always moves reloads every time
            current = moving.run(archive.topic, "0", local_start=2000)
            assert current is not None and current.start == 0

    _concurrently(6, job)
    assert reads.reader.cached_bytes <= 2 * group_bytes


def test_the_archive_cache_is_a_part_of_the_memory_budget() -> None:
    mib = 1024 * 1024
    memory = MemoryBudget(BudgetSource(1000 * mib, "configured"), 100 * mib, 512 * mib)
    assert memory.archive_cache_limit == 125 * mib  # at most an eighth
    memory.reserve_bodies(100 * mib)
    parts = memory.parts()
    assert parts["archive_cache"]["limit"] == 125 * mib
    assert sum(p["limit"] for p in parts.values()) == 1000 * mib
    assert "archive_cache" not in MemoryBudget(BudgetSource(1000 * mib, "configured"), 0).parts()
