"""Stored pages of a sealed arrow segment: the file's own bytes, whole batches only, a codec
the reader decodes only, the next page read ahead within the cache's budget, and no stall
when many threads read and one closes the segment under them."""

from __future__ import annotations

import contextlib
import os
import random
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from plateau.storage.data.arrow_footer import record_batch_blocks
from plateau.storage.data.decoded_cache import DecodedCache
from plateau.storage.data.ipc_messages import CODEC_IDS
from plateau.storage.data.sealed_reader import SegmentReader
from plateau.storage.data.stored_batches import MAX_PENDING, StoredBatches

BATCH = 30
ROWS = 300
EVERY_CODEC = frozenset(CODEC_IDS.values())
TABLE = pa.table(
    {
        "time": pa.array(range(ROWS), pa.int64()),
        "model": pa.array([f"model-{i % 3}" for i in range(ROWS)]),
        "score": pa.array([i / 7 for i in range(ROWS)], pa.float64()),
        "blob": pa.array([os.urandom(i % 40) for i in range(ROWS)], pa.binary()),
    }
)


def _segment(path: Path, compression: str | None = None, table: pa.Table = TABLE) -> Path:
    options = ipc.IpcWriteOptions(compression=compression)
    with ipc.new_file(str(path), table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=BATCH)
    return path


def _decoded(stored: StoredBatches, schema: pa.Schema) -> pa.Table:
    batches = [
        ipc.read_record_batch(ipc.read_message(stored.data.slice(b.offset, b.length)), schema)
        for b in stored.blocks
    ]
    return pa.Table.from_batches(batches, schema)


@contextlib.contextmanager
def _reading(path: Path, cache: DecodedCache, threads: int = 2) -> Iterator[SegmentReader]:
    """A reader whose next pages are read ahead on ``threads`` threads; closed after."""
    with ThreadPoolExecutor(threads) as decoder:
        reader = SegmentReader(path, "arrow", cache, decoder=decoder)
        try:
            yield reader
        finally:
            reader.close()


def _file_bytes(path: Path, first: int, count: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        blocks = record_batch_blocks(fd)[first // BATCH : (first + count) // BATCH]
        begin = blocks[0].offset
        return os.pread(fd, blocks[-1].offset + blocks[-1].length - begin, begin)
    finally:
        os.close(fd)


@pytest.mark.parametrize("compression", [None, "lz4", "zstd"])
@pytest.mark.parametrize("direct", [False, True])
def test_whole_batches_are_the_files_bytes(
    tmp_path: Path, compression: str | None, direct: bool
) -> None:
    path = _segment(tmp_path / "s.arrow", compression)
    reader = SegmentReader(path, "arrow", DecodedCache(4 << 20), direct=direct)
    try:
        for first in range(0, ROWS, BATCH):
            for count in (BATCH, 2 * BATCH, 3 * BATCH):
                if first + count > ROWS:
                    continue
                stored = reader.stored(first, count, EVERY_CODEC)
                assert stored is not None, (first, count)
                assert stored.rows == count
                assert stored.data.to_pybytes() == _file_bytes(path, first, count)
                assert _decoded(stored, reader.schema).equals(TABLE.slice(first, count))
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("first", "count"),
    [(1, BATCH), (0, BATCH - 1), (0, BATCH + 1), (ROWS - BATCH, BATCH + 1), (0, 0), (ROWS, 1)],
)
def test_rows_that_are_not_whole_batches_are_not_stored(
    tmp_path: Path, first: int, count: int
) -> None:
    reader = SegmentReader(_segment(tmp_path / "s.arrow"), "arrow", DecodedCache(4 << 20))
    try:
        assert reader.stored(first, count, EVERY_CODEC) is None
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("compression", "codecs", "sent"),
    [
        ("lz4", frozenset(), False),
        ("lz4", frozenset({CODEC_IDS["zstd"]}), False),
        ("lz4", frozenset({CODEC_IDS["lz4"]}), True),
        ("zstd", frozenset({CODEC_IDS["lz4"]}), False),
        ("zstd", frozenset({CODEC_IDS["zstd"]}), True),
        (None, frozenset(), True),
    ],
)
def test_compressed_batches_go_only_to_readers_of_their_codec(
    tmp_path: Path, compression: str | None, codecs: frozenset[int], sent: bool
) -> None:
    cache = DecodedCache(4 << 20)
    with _reading(_segment(tmp_path / "s.arrow", compression), cache) as reader:
        assert (reader.stored(0, BATCH, codecs) is not None) is sent
        # refused before anything is read: nor is the next page read ahead for it
        assert (cache.stored_ahead > 0) is sent
        # refused or not, the rows read decoded are the same
        assert reader.read(0, BATCH).equals(TABLE.slice(0, BATCH))


def test_segments_with_dictionaries_are_read_decoded(tmp_path: Path) -> None:
    table = pa.table({"k": pa.array(["a", "b"] * 60).dictionary_encode()})
    reader = SegmentReader(_segment(tmp_path / "d.arrow", table=table), "arrow", DecodedCache(0))
    try:
        assert reader.stored(0, BATCH, EVERY_CODEC) is None
    finally:
        reader.close()


def test_the_next_page_is_read_ahead_within_the_budget(tmp_path: Path) -> None:
    path = _segment(tmp_path / "s.arrow")
    cache = DecodedCache(64 << 20)
    with _reading(path, cache) as reader:
        pages = [reader.stored(first, 2 * BATCH, frozenset()) for first in range(0, ROWS, 60)]
    assert all(p is not None for p in pages)
    got = pa.concat_tables(_decoded(p, reader.schema) for p in pages if p is not None)
    assert got.equals(TABLE)
    assert cache.stored_ahead == 0  # every page read ahead was taken, or dropped at close

    # no room in the budget: nothing is read ahead, and the pages are read all the same
    small = DecodedCache(1024)
    with _reading(path, small) as reader:
        for first in range(0, ROWS, BATCH):
            page = reader.stored(first, BATCH, frozenset())
            assert page is not None and page.rows == BATCH
            assert small.stored_ahead == 0


def test_pages_read_ahead_count_as_used_until_taken(tmp_path: Path) -> None:
    path = _segment(tmp_path / "s.arrow")
    cache = DecodedCache(64 << 20)
    with _reading(path, cache, threads=1) as reader:
        assert reader.stored(0, BATCH, frozenset()) is not None  # reads [30, 60) ahead
        ahead = len(_file_bytes(path, BATCH, BATCH))
        assert cache.stored_ahead == ahead
        assert cache.used >= ahead  # the node's memory budget sees it
        # readers elsewhere in the segment: each leaves one page ahead, at most MAX_PENDING
        for first in range(3 * BATCH, ROWS - BATCH, 2 * BATCH):
            assert reader.stored(first, BATCH, frozenset()) is not None
        assert 0 < cache.stored_ahead <= MAX_PENDING * 2 * ahead
    assert cache.stored_ahead == 0


@pytest.mark.timeout(120)
def test_many_readers_and_a_close_never_stall_nor_leak(tmp_path: Path) -> None:
    """Stress: 8 threads read random whole-batch pages (each read ahead on 2 threads) while
    one closes the reader part way. Every page read is the file's bytes; after the close,
    reads fail with the reader's error (never hang), and no read-ahead byte stays counted."""
    path = _segment(tmp_path / "s.arrow", "lz4")
    expected = {(f, n): _file_bytes(path, f, n) for f in range(0, ROWS, BATCH) for n in (30, 60)}
    cache = DecodedCache(8 << 20)
    errors: list[BaseException] = []
    closed = threading.Event()
    done = [0]
    lock = threading.Lock()  # guards done and errors; no I/O under it
    with ThreadPoolExecutor(2) as decoder:
        reader = SegmentReader(path, "arrow", cache, decoder=decoder)

        def read(seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(400):
                first, count = rng.choice([k for k in expected if k[0] + k[1] <= ROWS])
                try:
                    page = reader.stored(first, count, EVERY_CODEC)
                except ValueError as exc:
                    if closed.is_set():
                        continue  # the reader's own error: it is closed
                    with lock:
                        errors.append(exc)
                    return
                except BaseException as exc:
                    with lock:
                        errors.append(exc)
                    return
                if page is None or page.data.to_pybytes() != expected[(first, count)]:
                    with lock:
                        errors.append(AssertionError(f"wrong page at {first}+{count}"))
                    return
                with lock:
                    done[0] += 1

        threads = [threading.Thread(target=read, args=(i,), daemon=True) for i in range(8)]
        for t in threads:
            t.start()
        while True:
            with lock:
                if done[0] >= 800 or errors:
                    break
            threading.Event().wait(0.01)
        closed.set()
        reader.close()
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive(), "a reader stalled"
    assert not errors, errors[0]
    assert cache.stored_ahead == 0
