"""The open segment's file written with O_DIRECT: the bytes on disk are the bytes appended.

Real files on the test's filesystem (ext4 here: O_DIRECT works; a filesystem
without it is covered by the fallback test with a flag it cannot take).
"""

from __future__ import annotations

import fcntl
import os
import random
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from plateau.storage.data.append_file import (
    NATIVE_COPY_BYTES,
    BufferedFile,
    DirectFile,
    StagingPool,
    open_append,
)
from plateau.storage.data.direct_io import ALIGN
from plateau.storage.data.ipc_file import IpcFileWriter
from plateau.storage.data.ipc_messages import as_sent, read_layout
from plateau.storage.recovery import read_open_file


def direct_file(path: Path, pool: StagingPool | None = None) -> DirectFile:
    f = open_append(path, direct=True, drop_pages=True)
    assert isinstance(f, DirectFile), "the test filesystem takes O_DIRECT (ext4, xfs)"
    if pool is not None:
        f._pool = pool
    return f


@pytest.mark.parametrize("staging", [64 * 1024, 1024 * 1024])
def test_appends_of_any_size_land_in_order_and_finish_cuts_the_padding(
    tmp_path: Path, staging: int
) -> None:
    """With a small staging buffer an append takes several writes; with a large one, its
    pieces past ``NATIVE_COPY_BYTES`` are copied by pyarrow (without the GIL), the rest in
    Python: the bytes land the same either way."""
    rng = random.Random(7)
    pool = StagingPool(size=staging, limit=2)
    f = direct_file(tmp_path / "seg", pool)
    expected = bytearray()
    sizes = [0, 1, 7, ALIGN - 1, 1, ALIGN, 3 * ALIGN + 5, 200_000, 64 * 1024, 13, 2_500_001, 5]
    assert max(sizes) // 3 > NATIVE_COPY_BYTES
    for size in sizes:
        pieces = [rng.randbytes(size // 3), b"", rng.randbytes(size - size // 3)]
        assert f.write([pa.py_buffer(pieces[0]), pieces[1], memoryview(pieces[2])]) == size
        expected += b"".join(pieces)
        on_disk = (tmp_path / "seg").read_bytes()
        # the data, then zeros to the end of its block: never more, never other bytes
        assert on_disk[: len(expected)] == expected
        assert len(on_disk) == -(-len(expected) // ALIGN) * ALIGN
        assert on_disk[len(expected) :] == bytes(len(on_disk) - len(expected))
    f.finish()
    os.close(f.fd)
    assert (tmp_path / "seg").read_bytes() == expected


def test_cut_goes_back_and_the_next_write_follows_the_cut(tmp_path: Path) -> None:
    f = direct_file(tmp_path / "seg")
    f.write([b"a" * 5000])
    f.write([b"b" * 3000])
    f.cut(5000)  # a failed append is taken back
    f.write([b"c" * 10])
    f.finish()
    os.close(f.fd)
    assert (tmp_path / "seg").read_bytes() == b"a" * 5000 + b"c" * 10


def test_padding_reads_as_the_end_of_the_stream_after_a_crash(tmp_path: Path) -> None:
    """Recovery reads an open file as a stream: the zero padding O_DIRECT leaves past the
    last batch (the file is never finished after a crash) must end it, not tear it."""
    schema = pa.schema([("time", pa.int64()), ("x", pa.float64())])
    f = direct_file(tmp_path / "seg.open")
    writer = IpcFileWriter(f, schema)
    batches = []
    for i in range(3):
        batch = pa.record_batch([pa.array([i] * 7, pa.int64()), pa.array([0.5] * 7)], schema=schema)
        message = pa.ipc.read_message(batch.serialize())
        layout = read_layout(message.metadata)
        writer.append([as_sent(message.metadata, message.body, layout, None)])
        batches.append(batch)
    os.close(f.fd)  # as the process dies: no footer, padding left
    size = (tmp_path / "seg.open").stat().st_size
    assert size % ALIGN == 0 and size > writer.position
    got_schema, got, end = read_open_file(tmp_path / "seg.open")
    assert got_schema == schema
    assert got == batches
    assert end == writer.position


def assert_appends_through_the_page_cache(path: Path) -> None:
    f = open_append(path, direct=True, drop_pages=True)
    assert isinstance(f, BufferedFile)
    f.write([b"y" * 5000])
    f.finish()
    os.close(f.fd)
    assert path.read_bytes() == b"y" * 5000


def test_a_filesystem_without_o_direct_gets_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tmpfs before Linux 6.6 refuses O_DIRECT at open with EINVAL (it creates the file
    first); ext4 never does, so the refusal is injected at ``os.open``, a fault that cannot
    be made for real here."""
    real_open = os.open

    def refusing_open(path: str, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_DIRECT:
            fd = real_open(path, flags & ~os.O_DIRECT, mode)  # tmpfs creates, then refuses
            os.close(fd)
            raise OSError(22, "Invalid argument")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", refusing_open)
    assert_appends_through_the_page_cache(tmp_path / "seg")


def test_a_filesystem_that_refuses_direct_writes_gets_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some filesystems take O_DIRECT at open and refuse the write (EINVAL); that refusal is
    injected at ``os.pwrite``, as ext4 takes both: the file must not fail its appends."""
    real_pwrite = os.pwrite

    def refusing_pwrite(fd: int, data: memoryview, offset: int) -> int:
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(22, "Invalid argument")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", refusing_pwrite)
    assert_appends_through_the_page_cache(tmp_path / "seg")


def test_many_writers_share_few_staging_buffers_without_a_stall(tmp_path: Path) -> None:
    """16 threads, 2 buffers: each thread's file gets exactly its bytes, and nobody waits
    forever for a buffer (a stall fails the join's timeout)."""
    pool = StagingPool(size=16 * 1024, limit=2)
    errors: list[BaseException] = []
    expected: dict[int, bytes] = {}

    def writer(i: int) -> None:
        try:
            rng = random.Random(i)
            f = direct_file(tmp_path / f"seg{i}", pool)
            data = bytearray()
            for _ in range(60):
                piece = rng.randbytes(rng.randrange(1, 40_000))
                f.write([piece])
                data += piece
            f.finish()
            os.close(f.fd)
            expected[i] = bytes(data)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a writer stalled waiting for a staging buffer"
    assert not errors, errors
    for i, data in expected.items():
        assert (tmp_path / f"seg{i}").read_bytes() == data
    assert pool._made <= 2
