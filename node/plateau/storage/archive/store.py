"""The archive's S3 client, behind the few calls the uploader and the readers make.

Narrow on purpose: ``put_file``, ``discard``, ``put_bytes``, ``verify``, ``open``
and ``check_bucket`` are all the node asks of object storage, so the client
under them (pyarrow's ``S3FileSystem`` today; boto3 or obstore are candidates)
can be swapped in this one module.

* Buckets are never created (``allow_bucket_creation`` stays off) and, since
  some servers (SeaweedFS) create a bucket on the first PUT into it anyway,
  ``check_bucket`` asks for it before uploads start and after each failure: a
  missing bucket is reported (``BucketNotFound``), not made.
* Credentials come from the AWS variables of the environment (the SDK's own
  chain) or, with ``credentials_file``, from that ini file's profile; the file
  is read again (``refresh``) after an authorization failure, so a rotated
  Kubernetes Secret takes effect without a restart.
* Errors are classified into the topic states the node reports
  (``classify``): refused credentials or a read-only bucket are
  ``Unauthorized``, a missing bucket ``BucketNotFound``, a refused or timed-out
  connection ``Unreachable``, anything else ``Behind`` with its message.

Lock: ``_lock`` guards only the filesystem handle (a leaf, never held across a
network call).
"""

from __future__ import annotations

import configparser
import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from plateau.protocol.archive import ArchiveState, ArchiveUrl
from plateau.storage.config import ArchiveSettings

CHUNK = 8 * 1024 * 1024  # bytes read from disk and handed to the upload stream at once
CONNECT_TIMEOUT = 2.0
REQUEST_TIMEOUT = 20.0
ATTEMPTS = 2  # the SDK's own retries per call; the uploader's backoff does the rest
META_FIRST = b"plateau.first_index"
META_END = b"plateau.end_index"
META_TOPIC = b"plateau.topic"
META_PARTITION = b"plateau.partition"

_UNAUTHORIZED = (
    "ACCESS_DENIED",
    "INVALID_ACCESS_KEY_ID",
    "SIGNATURE_DOES_NOT_MATCH",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "InvalidAccessKeyId",
    "EXPIRED_TOKEN",
    "FORBIDDEN",
)
_NO_BUCKET = ("NO_SUCH_BUCKET", "NoSuchBucket")
_UNREACHABLE = (
    "NETWORK_CONNECTION",
    "Could not connect",
    "Connection refused",
    "timed out",
    "Timeout",
    "curlCode: 28",
    "curlCode: 7",
    "curlCode: 6",
    "REQUEST_TIMEOUT",
    "Couldn't resolve host",
)


class ArchiveError(Exception):
    """An archive call failed; ``state`` is what the topic's status reports."""

    def __init__(self, state: ArchiveState, message: str) -> None:
        super().__init__(message)
        self.state: ArchiveState = state
        self.message = message


def classify(exc: BaseException) -> ArchiveError:
    """The topic state an S3 error stands for (see the module docstring)."""
    if isinstance(exc, ArchiveError):
        return exc
    text = str(exc)
    if any(code in text for code in _UNAUTHORIZED):
        return ArchiveError("Unauthorized", f"the archive refused the credentials: {text}")
    if any(code in text for code in _NO_BUCKET):
        return ArchiveError("BucketNotFound", f"the archive's bucket does not exist: {text}")
    if any(code in text for code in _UNREACHABLE):
        return ArchiveError("Unreachable", f"the archive's endpoint does not answer: {text}")
    return ArchiveError("Behind", text or type(exc).__name__)


@dataclass(frozen=True)
class Uploaded:
    """What ``put_file`` sent: its size."""

    size: int


def read_credentials(path: Path, profile: str) -> tuple[str, str, str | None]:
    """Access key, secret and session token of ``profile`` in an AWS credentials file."""
    parser = configparser.ConfigParser()
    if not parser.read(path):
        raise ArchiveError("Unauthorized", f"cannot read the credentials file {path}")
    section = profile if parser.has_section(profile) else f"profile {profile}"
    if not parser.has_section(section):
        raise ArchiveError("Unauthorized", f"{path} has no profile [{profile}]")
    get = parser[section].get
    key, secret = get("aws_access_key_id"), get("aws_secret_access_key")
    if not key or not secret:
        raise ArchiveError("Unauthorized", f"{path} [{profile}] lacks aws_access_key_id/secret")
    return key, secret, get("aws_session_token")


class Archive:
    """The node's archive: where it is (``url``) and a client for it (``fs``)."""

    def __init__(self, settings: ArchiveSettings) -> None:
        if not settings.url:
            raise ValueError("an archive needs storage.archive.url")
        self.settings = settings
        self.url = ArchiveUrl.parse(settings.url)
        self._lock = threading.Lock()  # the fs handle only: a leaf
        self._fs: pafs.S3FileSystem | None = None
        # an unreadable credentials file is reported by the uploads, never a crash at start
        with contextlib.suppress(ArchiveError):
            self._fs = self._make_fs()

    def _make_fs(self) -> pafs.S3FileSystem:
        s = self.settings
        scheme, endpoint = "https", None
        if s.endpoint:
            scheme, sep, rest = s.endpoint.partition("://")
            if not sep:
                scheme, rest = "https", s.endpoint
            endpoint = rest.rstrip("/")
        key = secret = token = None
        if s.credentials_file is not None:
            key, secret, token = read_credentials(s.credentials_file, s.profile)
        return pafs.S3FileSystem(
            access_key=key,
            secret_key=secret,
            session_token=token,
            region=s.region,
            scheme=scheme,
            endpoint_override=endpoint,
            force_virtual_addressing=not s.path_style,
            allow_bucket_creation=False,
            allow_bucket_deletion=False,
            connect_timeout=CONNECT_TIMEOUT,
            request_timeout=REQUEST_TIMEOUT,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS),
            background_writes=False,  # see put_file
        )

    @property
    def fs(self) -> pafs.S3FileSystem:
        """pyarrow's filesystem on the archive (paths are ``bucket/prefix/key``: ``path``)."""
        with self._lock:
            fs = self._fs
        if fs is None:
            self.refresh()  # raises ArchiveError while the credentials file is unreadable
            return self.fs
        return fs

    def refresh(self) -> None:
        """Build the client again, reading the credentials file anew (after a refusal)."""
        fs = self._make_fs()
        with self._lock:
            self._fs = fs

    def path(self, key: str) -> str:
        """The filesystem path of an archive key (relative to ``bucket/prefix``)."""
        return f"{self.url.root()}/{key}"

    def check_bucket(self) -> None:
        """Raise ``BucketNotFound`` unless the bucket exists (never creates it)."""
        try:
            info = self.fs.get_file_info(self.url.bucket)
        except OSError as exc:
            raise classify(exc) from exc
        if info.type == pafs.FileType.NotFound:
            raise ArchiveError(
                "BucketNotFound",
                f"bucket {self.url.bucket!r} does not exist; the node never creates buckets",
            )

    def put_file(self, key: str, path: Path, stop: threading.Event | None = None) -> Uploaded:
        """Upload ``path`` to ``key`` (multipart for large files).

        The file is memory-mapped and its pages handed to the client as they are
        (no read copy), and the client writes parts in the calling thread
        (``background_writes=False``): the uploader already runs several files at
        once, and Arrow's background parts cost 1.3 CPU-seconds per GB more here
        (docs/archive-client.md). The bytes are not hashed here: the client sends
        a CRC64-NVME of every part, which the server checks (a part that does not
        match is refused), and ``verify`` then records the server's ETag; a
        SHA-256 here cost 0.5 CPU-seconds per GB, a tenth of the node's ingest CPU.

        An upload once begun is finished, never cut short: S3 completes a
        multipart upload atomically, but pyarrow's stream, when a part failed,
        still completes the upload with the parts that went through on close.
        So a failed upload deletes the object at ``key`` (``discard``): the key
        is the segment's own and not yet recorded as archived, so nothing good
        is lost, and no reader listing the prefix meets a truncated file. A
        ``kill -9`` midway leaves an incomplete multipart upload, invisible to
        readers (the bucket's lifecycle rule removes its parts).
        """
        if stop is not None and stop.is_set():
            raise ArchiveError("Behind", "upload not started: the node is stopping")
        size = 0
        try:
            with (
                pa.memory_map(str(path)) as src,
                self.fs.open_output_stream(
                    self.path(key), metadata={"Content-Type": "application/vnd.apache.parquet"}
                ) as out,
            ):
                total = src.size()
                while size < total:
                    chunk = src.read_buffer(min(CHUNK, total - size))
                    out.write(chunk)
                    size += chunk.size
            # read once, for this upload: its pages (kept cached for it since the
            # append, see Partition.append) need not stay
            with path.open("rb") as f:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError as exc:
            self.discard(key)  # even a lost connection: the next part's may have completed it
            raise classify(exc) from exc
        return Uploaded(size)

    def discard(self, key: str) -> None:
        """Delete ``key`` after a failed or mismatched upload of it (best effort: a
        server that fails the upload may fail this too; the retry overwrites)."""
        with contextlib.suppress(OSError, ArchiveError):
            self.fs.delete_file(self.path(key))

    def put_bytes(self, key: str, data: bytes) -> None:
        """Replace ``key`` with ``data`` (one PUT: readers see the old or the new object)."""
        try:
            with self.fs.open_output_stream(
                self.path(key), metadata={"Content-Type": "application/json"}
            ) as out:
                out.write(data)
        except OSError as exc:
            raise classify(exc) from exc

    def open(self, key: str) -> pa.NativeFile:
        """A random-access file on the object: reads are ranged GETs."""
        try:
            return self.fs.open_input_file(self.path(key))
        except OSError as exc:
            raise classify(exc) from exc

    def verify(self, key: str, size: int, rows: int, span: tuple[int, int] | None) -> str:
        """Check an uploaded object against what was sent, reading only its footer, and
        return its ETag.

        The size must match, the Parquet footer must parse and hold ``rows``
        rows, and where the file carries plateau's span metadata it must be
        ``span``. Raises ``ArchiveError`` (state ``Behind``) on a mismatch.
        """
        try:
            with self.open(key) as f:
                headers = f.metadata()
                got = f.size()
                if got != size:
                    raise ArchiveError("Behind", f"{key}: sent {size} bytes, the archive has {got}")
                meta = pq.ParquetFile(f).metadata
        except (OSError, pa.ArrowInvalid) as exc:
            raise ArchiveError("Behind", f"{key}: footer unreadable after upload: {exc}") from exc
        etag: str = bytes(headers.get("ETag", b"")).decode(errors="replace").strip('"')
        if not etag:
            raise ArchiveError("Behind", f"{key}: the archive reported no ETag for it")
        if meta.num_rows != rows:
            raise ArchiveError("Behind", f"{key}: {meta.num_rows} rows in the footer, {rows} sent")
        kv = meta.metadata or {}
        if span is not None and META_FIRST in kv:
            found = (int(kv[META_FIRST]), int(kv[META_END]))
            if found != span:
                raise ArchiveError("Behind", f"{key}: footer names span {found}, not {span}")
        return etag
