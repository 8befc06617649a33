"""A real S3 server on loopback: SeaweedFS (``weed server -s3``), for tests and benchmarks.

Never a mock: the archive's tests need an S3 that refuses wrong keys, loses its
connections when stopped and keeps its objects across a restart. ``weed`` is
built from the Go module proxy by ``tools/cluster-build --only seaweedfs`` and
found through ``PLATEAU_WEED`` or that build's cache.

Identities (``-s3.config``): ``ADMIN`` may do everything, ``READER`` may only
read and list (a read-only bucket, as the archive's fault tests need it); any
other key is refused (403), so wrong credentials fail as they would on AWS.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

ROOT = Path(__file__).resolve().parent.parent
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Keys:
    access_key: str
    secret_key: str

    def env(self) -> dict[str, str]:
        """The standard AWS variables, as the node and Spark read them."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
        }


ADMIN = S3Keys("plateau-admin", "plateau-admin-secret")
READER = S3Keys("plateau-reader", "plateau-reader-secret")


def weed_binary() -> Path:
    """``PLATEAU_WEED``, else the cached build (``tools/cluster-build --only seaweedfs``)."""
    given = os.environ.get("PLATEAU_WEED")
    if given:
        return Path(given)
    out = subprocess.run(
        [str(ROOT / "tools" / "cluster-build"), "--only", "seaweedfs"],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"cannot build seaweedfs: {out.stderr[-2000:]}")
    return Path(out.stdout.strip().splitlines()[-1]) / "weed"


def _port_pair() -> int:
    """A free port p whose p+10000 is free too (SeaweedFS puts its gRPC port there)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for seaweedfs")


def _identities() -> dict[str, object]:
    def ident(name: str, keys: S3Keys, actions: list[str]) -> dict[str, object]:
        return {
            "name": name,
            "credentials": [{"accessKey": keys.access_key, "secretKey": keys.secret_key}],
            "actions": actions,
        }

    return {
        "identities": [
            ident("admin", ADMIN, ["Admin", "Read", "Write", "List", "Tagging"]),
            ident("reader", READER, ["Read", "List"]),
        ]
    }


class S3Server:
    """One ``weed server`` with master, volume, filer and S3 gateway, in ``data_dir``.

    ``stop()`` and ``start()`` again keep the data (the fault tests stop it for a
    minute); ``kill()`` is a real SIGKILL.

    ``start()`` returns once an object can be written: about 11 s on a fresh
    directory (the gateway answers after 2-3 s, but the filer takes a lock-ring
    member only after waiting ~7 s to confirm it has no peers, hard-coded in
    SeaweedFS 4.53); after a restart about 17 s (the master refuses writes for
    its 15 s topology warm-up). Share one server per module or session.
    """

    def __init__(self, data_dir: Path, binary: Path | None = None) -> None:
        self.data_dir = data_dir
        self.binary = binary or weed_binary()
        self.ports = {name: _port_pair() for name in ("master", "volume", "filer", "s3")}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / "weed.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    def start(self, timeout: float = 60.0) -> S3Server:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "s3.json"
        config.write_text(json.dumps(_identities()))
        p = self.ports
        args = [
            str(self.binary),
            "server",
            f"-dir={self.data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master'] + 10000}",
            "-master.volumeSizeLimitMB=256",
            # One master: a restart need not wait out raft's default 10 s election.
            "-master.electionTimeout=1s",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume'] + 10000}",
            "-volume.max=1000",  # auto (0: free space / 256 MB) allowed only ~9 buckets here
            "-filer",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer'] + 10000}",
            "-s3",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3'] + 10000}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={config}",
        ]
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Ready once an object can be written and listed: the gateway waits for the
        filer, a write for the master's leader and the first volumes, which are grown
        here rather than in the first test's upload."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"weed exited {self.proc.returncode}: {self.log_tail()}")
            try:
                fs = self.filesystem(ADMIN)
                fs.create_dir("plateau-ready-probe")
                with fs.open_output_stream("plateau-ready-probe/probe") as out:
                    out.write(b"ready")
                fs.get_file_info(pafs.FileSelector("plateau-ready-probe", allow_not_found=True))
                return
            except OSError as exc:
                last = exc
                time.sleep(0.3)
        raise RuntimeError(f"seaweedfs not ready in {timeout}s ({last}): {self.log_tail()}")

    def log_tail(self, nbytes: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-nbytes:].decode(errors="replace")
        except OSError:
            return ""

    def filesystem(self, keys: S3Keys = ADMIN) -> pafs.S3FileSystem:
        """pyarrow's S3 filesystem on this server (bucket creation allowed, for tests)."""
        return pafs.S3FileSystem(
            access_key=keys.access_key,
            secret_key=keys.secret_key,
            endpoint_override=self.endpoint.removeprefix("http://"),
            scheme="http",
            region=REGION,
            allow_bucket_creation=True,
            connect_timeout=2,
            request_timeout=10,
        )

    def create_bucket(self, name: str) -> str:
        self.filesystem(ADMIN).create_dir(name)
        return name

    def stop(self, grace: float = 2.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds.

        A clean SeaweedFS shutdown takes about 25 s (its servers' drain timers),
        which a fault test stopping it twice cannot afford. Nothing is lost by
        the kill: every acknowledged object is already in the volume files and
        the filer's log (written before the reply), and a restart replays them;
        tests/integration/test_s3server.py checks exactly that.
        """
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self, down_seconds: float = 0.0, timeout: float = 60.0) -> S3Server:
        """Stop, stay down ``down_seconds``, start again on the same ports with the same data.

        The start takes about 15-20 s, not 3: the restarted master refuses writes
        for three of its 5 s heartbeat pulses (its topology warm-up, fixed in
        SeaweedFS) until the volume server has reported its volumes again.
        """
        self.stop()
        if down_seconds > 0:
            time.sleep(down_seconds)
        return self.start(timeout)

    def shell(self, commands: str, timeout: float = 60.0) -> str:
        """Runs ``weed shell`` commands (one a line) against this server; returns its output."""
        p = self.ports
        out = subprocess.run(
            [
                str(self.binary),
                "shell",
                f"-master=127.0.0.1:{p['master']}",
                f"-filer=127.0.0.1:{p['filer']}",
            ],
            input=commands if commands.endswith("\n") else commands + "\n",
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(
                f"weed shell failed ({out.returncode}): {out.stdout[-2000:]} {out.stderr[-2000:]}"
            )
        return out.stdout

    def set_read_only(self, bucket: str, read_only: bool = True) -> None:
        """Makes ``bucket`` refuse writes (reads go on), as a full bucket does.

        This is SeaweedFS's own mechanism for a bucket over its quota
        (``s3.bucket.quota.enforce`` sets the same flag); a write is then refused
        with HTTP 500 InternalError, not 403, which is what the node will see.
        """
        flag = "-readOnly" if read_only else "-delete"
        self.shell(f"fs.configure -locationPrefix=/buckets/{bucket}/ {flag} -apply")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def remove(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.data_dir)
