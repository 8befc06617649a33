"""The archive store's uploads against a real S3 server (SeaweedFS): what a reader
listing the bucket sees when an upload fails midway (nothing at the key, not a
truncated object), and that a good upload is byte-exact and verified (size, footer),
recording the server's ETag.

The part failure is a real network fault: ``testkit.s3gate.Gate`` cuts the TCP
connection of every multipart part request before it reaches the server.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from plateau.storage.archive.store import Archive, ArchiveError
from plateau.storage.config import ArchiveSettings
from testkit.s3gate import Gate
from testkit.s3server import ADMIN, REGION, S3Server

SIZE = 24 << 20  # three parts of pyarrow's 10 MiB


@pytest.fixture
def keys_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ADMIN.env().items():
        monkeypatch.setenv(k, v)


def _archive(endpoint: str, root: str) -> Archive:
    return Archive(
        ArchiveSettings(url=f"s3://{root}", endpoint=endpoint, path_style=True, region=REGION)
    )


ROWS = SIZE // 1024


def _file(tmp_path: Path) -> Path:
    """A Parquet file of incompressible values (about SIZE bytes)."""
    path = tmp_path / "seg.parquet"
    values = pa.array([os.urandom(1024) for _ in range(ROWS)], pa.binary())
    pq.write_table(pa.table({"v": values}), path, compression="none")
    return path


@pytest.mark.usefixtures("keys_in_env")
def test_a_failed_part_leaves_no_object_at_the_key(
    s3server: S3Server, s3root: str, tmp_path: Path
) -> None:
    gate = Gate(s3server.ports["s3"])
    try:
        gate.cut_when = lambda line: line.startswith("PUT ") and "partNumber=2" in line
        archive = _archive(gate.endpoint, s3root)
        with pytest.raises(ArchiveError) as failed:
            archive.put_file("t/partition=0/a.parquet", _file(tmp_path))
        assert failed.value.state == "Unreachable", failed.value.message
        gate.cut_when = None
        listed = s3server.filesystem().get_file_info(
            pafs.FileSelector(s3root, recursive=True, allow_not_found=True)
        )
        assert not [f.path for f in listed if f.path.endswith(".parquet")]
    finally:
        gate.close()


@pytest.mark.usefixtures("keys_in_env")
def test_an_upload_is_byte_exact_and_verified_with_the_servers_etag(
    s3server: S3Server, s3root: str, tmp_path: Path
) -> None:
    path = _file(tmp_path)
    archive = _archive(s3server.endpoint, s3root)
    sent = archive.put_file("t/partition=0/b.parquet", path)
    data = path.read_bytes()
    assert sent.size == len(data)
    with s3server.filesystem().open_input_file(f"{s3root}/t/partition=0/b.parquet") as f:
        assert f.read() == data
        etag = f.metadata()["ETag"].decode().strip('"')
    assert etag and archive.verify("t/partition=0/b.parquet", len(data), ROWS, None) == etag
    with pytest.raises(ArchiveError, match="bytes"):  # the size is checked
        archive.verify("t/partition=0/b.parquet", len(data) + 1, 0, None)
