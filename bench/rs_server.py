"""plateau's Rust server as a benchmark subject, and partition reads both servers answer.

The binary comes from ``../shared/tools/build-plateau-rs`` (see bench/README.md).
It reads ``./plateau.toml`` from its working directory; each run gets its own
directory. Reads go through ``GET /topic/{t}/partition/{p}/records`` in Arrow,
the one read both servers answer alike: plateau puts a page's span in the
schema metadata rather than in a header, so a reader here advances by the rows
it got (both servers number a partition's records densely).
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.ipc as ipc

from clients import TransportError, open_client
from common import percentile, self_cpu_s, usage
from plateau.protocol import ACCEPT_ARROW_COMPRESSION_HEADER, ARROW_FILE

# plateau's default keeps 1 GiB a partition: a 15 s phase writes more, and reads
# and bytes-per-row want every row kept, so the runs raise it (nothing else changes)
RS_PARTITION_RETAIN = "1000GiB"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RsServer:
    proc: subprocess.Popen[bytes]
    url: str
    work: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def data_dir(self) -> Path:
        return self.work / "data"

    def log(self) -> str:
        try:
            return (self.work / "plateau-rs.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM (plateau closes its partitions, writing what it holds), then SIGKILL."""
        if self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_rs(binary: Path, work: Path, timeout: float = 30.0) -> RsServer:
    """Start ``binary`` in ``work`` (data in ``work/data``) on free loopback ports."""
    if not binary.is_file():
        raise FileNotFoundError(f"plateau-rs binary {binary} does not exist")
    port, metrics = free_port(), free_port()
    (work / "data").mkdir(parents=True)
    (work / "plateau.toml").write_text(
        f'data_path = "{work / "data"}"\n'
        f'[http]\nbind = "127.0.0.1:{port}"\n'
        f'[metrics]\nprometheus = "127.0.0.1:{metrics}"\n'
        f'[catalog.partition.retain]\nmax_bytes = "{RS_PARTITION_RETAIN}"\n'
    )
    with (work / "plateau-rs.log").open("wb") as log:
        proc = subprocess.Popen([str(binary)], cwd=work, stdout=log, stderr=subprocess.STDOUT)
    server = RsServer(proc, f"http://127.0.0.1:{port}", work)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"plateau-rs exited with {proc.returncode}: {server.log()}")
        try:
            if httpx.get(f"{server.url}/ok", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"plateau-rs did not start in {timeout}s: {server.log()}")


def spans(url: str, topic: str) -> dict[str, tuple[int, int]]:
    """``GET /topic/{t}``: each partition's readable [start, end), on both servers."""
    r = httpx.get(f"{url}/topic/{topic}", timeout=30.0)
    if r.status_code != 200:
        raise RuntimeError(f"GET /topic/{topic}: {r.status_code} {r.text[:300]}")
    return {p: (int(s["start"]), int(s["end"])) for p, s in r.json()["partitions"].items()}


@dataclass
class ReadResult:
    rows: int = 0
    pages: int = 0
    body_bytes: int = 0
    elapsed_s: float = 0.0
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    first_error: str | None = None

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def p99_ms(self) -> float:
        return percentile(sorted(x * 1000 for x in self.latencies), 99)


def _rows_in(body: bytes) -> int:
    if not body:
        return 0
    reader = ipc.open_file(pa.py_buffer(body))
    return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))


def read_partitions(
    kind: str,
    url: str,
    pid: int,
    topic: str,
    ranges: dict[str, tuple[int, int]],
    page_size: int,
) -> ReadResult:
    """One reader thread per partition reads its ``[start, end)`` in pages, in Arrow."""
    result = ReadResult()
    lock = threading.Lock()  # guards result's counters; taken after each page, never across I/O

    def reader(partition: str, start: int, end: int) -> None:
        client = open_client(kind, url)
        pos = start
        try:
            while pos < end:
                sent = time.perf_counter()
                try:
                    r = client.request(
                        "GET",
                        f"/topic/{topic}/partition/{partition}/records",
                        {"start": pos, "page_size": min(page_size, end - pos)},
                        b"",
                        # pyarrow decodes both codecs; plateau ignores the header
                        {"accept": ARROW_FILE, ACCEPT_ARROW_COMPRESSION_HEADER: "lz4_frame, zstd"},
                    )
                except TransportError as exc:
                    with lock:
                        result.first_error = result.first_error or f"read {partition}: {exc}"
                    return
                took = time.perf_counter() - sent
                rows = _rows_in(r.body) if r.status == 200 else 0
                with lock:
                    if r.status != 200 or rows == 0:
                        result.first_error = result.first_error or (
                            f"read {partition} at {pos}: HTTP {r.status} {r.body[:200]!r}"
                        )
                        return
                    result.rows += rows
                    result.pages += 1
                    result.body_bytes += len(r.body)
                    result.latencies.append(took)
                pos += rows
        finally:
            client.close()

    threads = [
        threading.Thread(target=reader, args=(p, s, e), name=f"reader-{p}", daemon=True)
        for p, (s, e) in sorted(ranges.items())
    ]
    server_before = usage(pid).cpu_s
    client_before = self_cpu_s()
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.elapsed_s = time.perf_counter() - started
    result.server_cpu_s = usage(pid).cpu_s - server_before
    result.client_cpu_s = self_cpu_s() - client_before
    return result
