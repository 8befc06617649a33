"""Shared pieces of the benchmarks: data, data directories, disk bandwidth, sampling.

Nothing here imports ``plateau``: the benchmarks talk to a real node over
loopback HTTP, like any client would, and start it as a subprocess
(``testkit.nodeproc.NodeProcess``, as the tests do) so that its CPU, memory and
I/O are measured apart from the clients'.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import json
import math
import os
import random
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pyarrow as pa
import pyarrow.ipc as ipc

from plateau.protocol import ARROW_FILE

MiB = 1024 * 1024
GiB = 1024 * MiB

KEY_BYTES = 16
VALUE_BYTES = 100

# A small vocabulary: "text-like" values compress the way log lines or
# feature names do (zstd gets several x), unlike random bytes.
_VOCABULARY = """
the a of and to in is for on with as by at from this that be are was it not or
user event click view page session error warning info debug request response
model score feature label train infer batch epoch loss accuracy latency ms ok
GET POST /api/v1/items /api/v1/users status=200 status=404 region=eu region=us
device=mobile device=desktop country=DE country=FR country=US true false null
"""
_WORDS = _VOCABULARY.split()


def log(msg: str) -> None:
    """Progress for humans goes to stderr; stdout's last line is the JSON result."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def drop_page_cache() -> None:
    """Write back dirty pages, then drop every clean cached page of the machine (root only),
    so that the next read comes from the disk."""
    os.sync()
    DROP_CACHES.write_text("3\n")


def add_node_env(ap: argparse.ArgumentParser) -> None:
    """``--node-env KEY=VALUE`` (repeatable): extra environment for the node under test."""
    ap.add_argument(
        "--node-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the node (repeatable), e.g. MALLOC_ARENA_MAX=2 or "
        "PLATEAU_STORAGE__SEALER_NICE=10",
    )


def node_env(ap: argparse.ArgumentParser, values: list[str]) -> dict[str, str]:
    """The ``--node-env`` values as a mapping; a value without ``=`` is a usage error (exit 2)."""
    bad = [v for v in values if "=" not in v or v.startswith("=")]
    if bad:
        ap.error(f"--node-env: expected KEY=VALUE, got {', '.join(map(repr, bad))}")
    return dict(v.split("=", 1) for v in values)


def handle_signals() -> None:
    """SIGTERM and SIGINT raise in the main thread, so ``finally`` stops the node we started.

    (SIGINT is set explicitly: a shell starts background jobs with it ignored.)
    """

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def median_known(values: list[float | None]) -> float | None:
    """The median of the values measured (``None``: not measured), or ``None`` if none were."""
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def pair_ratios(
    top: list[dict[str, Any]], bottom: list[dict[str, Any]], key: str
) -> list[float | None]:
    """``top[i][key] / bottom[i][key]`` for each pair of runs, to 3 places (``None`` where
    either is 0); runs are compared pair by pair because the machine drifts between pairs."""
    pairs = zip(top, bottom, strict=True)
    return [round(t[key] / b[key], 3) if t[key] and b[key] else None for t, b in pairs]


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result, sort_keys=False), flush=True)


# --- data --------------------------------------------------------------------


def _fixed_width_binary(data: bytes, width: int, rows: int) -> pa.Array:
    """A ``binary`` array of ``rows`` values of ``width`` bytes each, built from one buffer."""
    offsets = array.array("i", range(0, width * (rows + 1), width)).tobytes()
    return pa.Array.from_buffers(
        pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _text_values(rows: int, rng: random.Random) -> bytes:
    out = bytearray()
    words = _WORDS
    for _ in range(rows):
        line = " ".join(rng.choices(words, k=24)).encode()
        while len(line) < VALUE_BYTES:
            line += b" " + rng.choice(words).encode()
        out += line[:VALUE_BYTES]
    return bytes(out)


def make_table(rows: int, compressible: bool, seed: int, start_ms: int) -> pa.Table:
    """``rows`` rows of about 128 bytes: int64 ``time``, 16-byte ``key``, 100-byte ``value``.

    Random mode: key and value are random bytes (incompressible). Compressible
    mode: keys come from 1,000 distinct ``key-NNNNNNNNNNN`` strings and values
    are text from a small vocabulary.
    """
    rng = random.Random(seed)
    times = pa.array(range(start_ms, start_ms + rows), pa.int64())
    if compressible:
        keys = b"".join(b"key-%012d" % rng.randrange(1000) for _ in range(rows))
        values = _text_values(rows, rng)
    else:
        keys = rng.randbytes(KEY_BYTES * rows)
        values = rng.randbytes(VALUE_BYTES * rows)
    key = pa.Array.from_buffers(pa.binary(KEY_BYTES), rows, [None, pa.py_buffer(keys)])
    value = _fixed_width_binary(values, VALUE_BYTES, rows)
    return pa.table({"time": times, "key": key, "value": value})


def arrow_file_body(table: pa.Table) -> bytes:
    """An uncompressed Arrow IPC *file*, as ``plateau.client`` sends it."""
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    body: bytes = sink.getvalue().to_pybytes()
    return body


def make_bodies(count: int, rows: int, compressible: bool) -> list[bytes]:
    """``count`` distinct bodies, generated before any timed phase."""
    now = int(time.time() * 1000)
    return [
        arrow_file_body(make_table(rows, compressible, seed=i, start_ms=now + i * rows))
        for i in range(count)
    ]


# --- disk --------------------------------------------------------------------


def default_data_root() -> Path:
    return Path(tempfile.gettempdir())


def measure_fsync_bandwidth(
    directory: Path, max_bytes: int = 4 * GiB, max_seconds: float = 5.0, chunk: int = 4 * MiB
) -> float:
    """Sequential writes of ``chunk`` bytes, each followed by fsync, in ``directory``.

    Stops after ``max_bytes`` or ``max_seconds``; the file is deleted afterwards.
    Returns MB/s in 10**6 bytes per second, as disks are rated.
    """
    data = random.Random(42).randbytes(chunk)
    path = directory / f".bench-fsync-{os.getpid()}.tmp"
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    started = time.perf_counter()
    try:
        while written < max_bytes and time.perf_counter() - started < max_seconds:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
            written += chunk
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return written / elapsed / 1e6


def dir_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).stat().st_size
    return total


# --- the data directory ------------------------------------------------------------


# A benchmark's node holds and seals far more data than a test's: longer than
# ``NodeProcess``'s defaults to become ready and to stop.
NODE_START_S = 60.0
NODE_STOP_S = 90.0


def make_data_dir(given: Path | None, prefix: str) -> tuple[Path, Path | None]:
    """The node's data directory and, if we created it, the temp root to delete at the end."""
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        return given, None
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=default_data_root()))
    data = root / "data"
    data.mkdir()
    return data, root


def cleanup(root: Path | None) -> None:
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


# --- sampling --------------------------------------------------------------------


def _tree(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return [proc]


@dataclass
class Usage:
    cpu_s: float
    write_bytes: int
    read_bytes: int


def usage(pid: int) -> Usage:
    """CPU seconds and I/O bytes of ``pid`` and its children, now."""
    cpu = 0.0
    wb = rb = 0
    for p in _tree(psutil.Process(pid)):
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            cpu += t.user + t.system
            io = p.io_counters()
            wb += io.write_bytes
            rb += io.read_bytes
    return Usage(cpu, wb, rb)


def system_busy_s() -> float:
    """CPU seconds all processes of the machine spent busy (user, system, irq...), now."""
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


def self_cpu_s() -> float:
    """CPU seconds of this (client) process, all threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _rss_parts(pid: int) -> tuple[int, int]:
    """(anonymous, file-backed + shmem) resident bytes of one process, from /proc."""
    anon = other = 0
    try:
        with Path(f"/proc/{pid}/status").open() as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1]) * 1024
                elif line.startswith(("RssFile:", "RssShmem:")):
                    other += int(line.split()[1]) * 1024
    except OSError:
        pass
    return anon, other


@dataclass
class RssSampler:
    """Samples the RSS of ``pid`` plus children every ``interval`` seconds in a thread.

    Also keeps the peaks of the anonymous part (heap, Arrow buffers) and of the
    file-backed part (memory-mapped segment files, shared libraries), since
    the kernel can drop the latter under pressure.
    """

    pid: int
    interval: float = 0.1
    peak_bytes: int = 0
    peak_anon_bytes: int = 0
    peak_file_bytes: int = 0
    samples: int = 0
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (monotonic, rss), ~1/s
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> int:
        rss = anon = other = 0
        for p in _tree(psutil.Process(self.pid)):
            with contextlib.suppress(psutil.Error):
                rss += p.memory_info().rss
                a, o = _rss_parts(p.pid)
                anon += a
                other += o
        self.peak_bytes = max(self.peak_bytes, rss)
        self.peak_anon_bytes = max(self.peak_anon_bytes, anon)
        self.peak_file_bytes = max(self.peak_file_bytes, other)
        self.samples += 1
        now = time.monotonic()
        if not self.timeline or now - self.timeline[-1][0] >= 1.0:
            self.timeline.append((now, rss))
        return rss

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(psutil.Error):
                self.sample()

    def start(self) -> RssSampler:
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def peak_mb(self) -> float:
        return self.peak_bytes / MiB

    def timeline_mb(self, since: float = 0.0, every: float = 2.0) -> str:
        """``t+Ns:MB`` pairs for the log, one per ``every`` seconds."""
        out: list[str] = []
        last = -every
        for t, rss in self.timeline:
            if t < since or t - since - last < every:
                continue
            last = t - since
            out.append(f"{last:.0f}s:{rss / MiB:.0f}")
        return " ".join(out)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (0 for an empty one)."""
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def scrape_metrics(url: str) -> dict[str, float]:
    """``/metrics`` as {'name{labels}': value}, summed over nothing; {} if unavailable."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=10.0).text
    except httpx.HTTPError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        with contextlib.suppress(ValueError):
            out[name] = float(value)
    return out


def histogram_delta(
    before: dict[str, float], after: dict[str, float], name: str, labels: str = ""
) -> dict[str, float]:
    """Count, mean and a bucket-based p99 (upper bound of the bucket) between two scrapes."""

    def get(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    sel = f"{{{labels}}}" if labels else ""
    count = get(f"{name}_count{sel}")
    total = get(f"{name}_sum{sel}")
    buckets: list[tuple[float, float]] = []
    prefix = f"{name}_bucket{{"
    wanted = set(labels.split(",")) if labels else set()
    for key in after:
        if not key.startswith(prefix):
            continue
        # the exporter's label order varies (``le`` first or last): compare as a set
        parts = set(key[len(prefix) : -1].split(","))
        bound = next((p[4:-1] for p in parts if p.startswith('le="')), None)
        if bound is not None and parts - {f'le="{bound}"'} == wanted:
            buckets.append((float("inf") if bound == "+Inf" else float(bound), get(key)))
    buckets.sort()
    p99 = max_over = 0.0
    for le, cumulative in buckets:
        if count and cumulative >= 0.99 * count and not p99:
            p99 = le
        if count and cumulative < count:
            max_over = le
    return {
        "count": count,
        "mean_ms": total / count * 1000 if count else 0.0,
        "p99_le_ms": p99 * 1000,
        "max_over_ms": max_over * 1000,  # the slowest one took longer than this
    }


def create_topic(url: str, topic: str, config: dict[str, Any]) -> dict[str, Any]:
    """``PUT /admin/topics/{topic}``, then the resolved config from ``GET``."""
    with httpx.Client(base_url=url, timeout=30.0) as c:
        r = c.put(f"/admin/topics/{topic}", json=config)
        if r.status_code >= 300:
            raise RuntimeError(f"PUT /admin/topics/{topic}: {r.status_code} {r.text}")
        g = c.get(f"/admin/topics/{topic}")
        if g.status_code != 200:
            raise RuntimeError(f"GET /admin/topics/{topic}: {g.status_code} {g.text}")
        resolved: dict[str, Any] = g.json()
        return resolved


def disk_budget(data_dir: Path, wanted: int) -> tuple[int, int]:
    """(retention max_bytes, node capacity) that fit the free space of ``data_dir``."""
    free = shutil.disk_usage(data_dir).free
    budget = max(256 * MiB, min(wanted, int(free * 0.5)))
    capacity = max(budget * 2, int(free * 0.8))
    return budget, capacity


def append_round_robin(
    url: str, topic: str, bodies: list[bytes], requests: int, partitions: int, clients: int
) -> float:
    """Append ``requests`` bodies, request ``k`` to partition ``k % partitions`` with body
    ``k % len(bodies)``, from ``clients`` threads; 429s are retried. Returns the seconds taken."""
    counter = iter(range(requests))
    lock = threading.Lock()
    errors: list[str] = []

    def writer() -> None:
        with httpx.Client(base_url=url, timeout=60.0) as c:
            while True:
                with lock:
                    k = next(counter, None)
                if k is None or errors:
                    return
                while True:
                    r = c.post(
                        f"/topic/{topic}/partition/{k % partitions}",
                        content=bodies[k % len(bodies)],
                        headers={"content-type": ARROW_FILE},
                    )
                    if r.status_code != 429:
                        break
                    time.sleep(0.05)
                if r.status_code != 200:
                    errors.append(f"append: {r.status_code} {r.text[:300]}")
                    return

    started = time.perf_counter()
    threads = [threading.Thread(target=writer, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    return time.perf_counter() - started
