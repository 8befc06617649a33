"""The test S3 server itself (testkit.s3server): what the archive's fault tests rely on.

A stop and restart keeps every object written before it (``stop()`` ends in SIGKILL
to be fast, so this is the check that nothing acknowledged is lost by that); wrong
keys, the read-only identity and a read-only ("full") bucket are refused as S3 would.
"""

from __future__ import annotations

import time

import pyarrow.fs as pafs
import pytest

from testkit.s3server import READER, S3Keys, S3Server


def _write(fs: pafs.S3FileSystem, path: str, data: bytes) -> None:
    with fs.open_output_stream(path) as out:
        out.write(data)


def test_buckets_are_fresh_and_named_for_s3(s3server: S3Server, s3bucket: str) -> None:
    assert 3 <= len(s3bucket) <= 63 and s3bucket == s3bucket.lower()
    fs = s3server.filesystem()
    assert fs.get_file_info(pafs.FileSelector(s3bucket, recursive=True)) == []


def test_restart_keeps_objects(s3server: S3Server, s3bucket: str) -> None:
    fs = s3server.filesystem()
    payload = bytes(range(256)) * 4096  # 1 MiB: a multipart upload
    _write(fs, f"{s3bucket}/a/one.bin", payload)
    started = time.monotonic()
    s3server.restart()
    assert time.monotonic() - started < 45  # stop() does not wait out the 25 s clean shutdown
    fs = s3server.filesystem()
    with fs.open_input_stream(f"{s3bucket}/a/one.bin") as got:
        assert got.read() == payload


def test_wrong_keys_and_reader_cannot_write(s3server: S3Server, s3bucket: str) -> None:
    with pytest.raises(OSError, match=r"ACCESS_DENIED|INVALID_ACCESS_KEY_ID"):
        _write(s3server.filesystem(S3Keys("nobody", "wrong")), f"{s3bucket}/x", b"x")
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        _write(s3server.filesystem(READER), f"{s3bucket}/x", b"x")


def test_read_only_bucket_refuses_writes_serves_reads(s3server: S3Server, s3bucket: str) -> None:
    fs = s3server.filesystem()
    _write(fs, f"{s3bucket}/kept", b"kept")
    s3server.set_read_only(s3bucket)
    try:
        with pytest.raises(OSError):
            _write(fs, f"{s3bucket}/refused", b"no")
        with fs.open_input_stream(f"{s3bucket}/kept") as got:
            assert got.read() == b"kept"
    finally:
        s3server.set_read_only(s3bucket, False)
    _write(fs, f"{s3bucket}/again", b"ok")
