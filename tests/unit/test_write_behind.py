"""A sealed file written through ``publish`` starts its writeback as it is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from plateau.storage.data import durable_io
from plateau.storage.data.durable_io import WRITE_BEHIND_BYTES, WriteBehind, publish


def test_every_byte_arrives_and_writeback_starts_every_few_mib(tmp_path: Path) -> None:
    assert durable_io.SYNC_FILE_RANGE is not None  # glibc on Linux: the path under test
    data = os.urandom(5 * WRITE_BEHIND_BYTES + 12345)
    started: list[int] = []

    def write(f: BinaryIO) -> None:
        assert isinstance(f, WriteBehind)
        view = memoryview(data)
        for at in range(0, len(data), 100_000):  # pyarrow writes in pieces like these
            f.write(view[at : at + 100_000])
            started.append(f._started)

    size = publish(tmp_path / "seg.parquet", write, drop_pages=True)
    assert size == len(data)
    assert (tmp_path / "seg.parquet").read_bytes() == data
    assert not (tmp_path / "seg.parquet.tmp").exists()
    # writeback was started five times, each after WRITE_BEHIND_BYTES more were written
    steps = sorted(set(started) - {0})
    assert len(steps) == 5
    assert all(b - a >= WRITE_BEHIND_BYTES for a, b in zip([0, *steps], steps, strict=False))
