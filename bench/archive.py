"""Archive benchmark: a real node archiving a parquet topic to a real S3 server (SeaweedFS).

    python bench/archive.py [--pairs 3] [--duration 15] [--max-age 10] [--backlog-mb 2048]
        [--clients 4] [--partitions 4] [--rows-per-batch 10000] [--data-dir DIR]

Three measures, each a ratio or a bound within one run (issue 27):

1. ingest with archiving on against off: interleaved pairs of closed-loop phases
   (bench/ingest.py's writers at the node's full rate) on two parquet topics of
   one node, one archived, one not; the order flips every pair. After every phase
   the benchmark waits for the open segments to seal (``--max-age``) and, after an
   archived phase, for the archive to catch up, so that no phase pays for another.
2. archive lag at that rate, sampled every 0.5 s in the archived phases from
   ``GET /admin/topics/{t}``: the node's ``archive.lag_seconds`` (age of the oldest
   sealed segment not archived) and the age of the oldest record not archived
   (from the partitions' ``end`` and archived ``end``; includes its wait in the open
   segment), against ``--max-age`` + 10 s.
3. the uploader against a plain upload of the same files: a topic filled with
   archiving off, then switched on; seconds until every sealed segment is archived
   (verify, SQLite row and manifest object included), against pyarrow's
   ``S3FileSystem`` (the node's client, same settings: no background writes, 8 MiB
   writes, 4 files at once) uploading the topic's segment files, before and after.
4. that topic's full history through ``plateau.spark.read_topic(archive=...)`` against
   ``spark.read.parquet`` of the objects its manifest lists (bench/archive_spark.py).

The S3 server runs on the same machine (in production it is elsewhere): its data
goes to ``--s3-dir`` (tmpfs by default) so that it does not share the node's disk, and
in the ingest phases it runs on CPUs of its own (``--split-cpus``, cpuset cgroups): the
node and the load driver on CPU 0 in both phases, the server on the rest, and with it
the kernel's receive work for loopback (``lo``'s ``rps_cpus``, restored after), which
would otherwise run on the sending CPU, the node's. SeaweedFS
spends 5-8 CPU-seconds per GB it stores (three MD5 passes: the ETag, the chunk's
Content-MD5 and the volume server's check), close to a core at the node's rate, so
sharing the CPUs would measure the server more than the node; its CPU is reported
(``s3_server_cpu_cores``) either way.
Progress on stderr; the last stdout line is one JSON object (bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testkit

import httpx
import psutil
import pyarrow.fs as pafs

from common import (
    NODE_START_S,
    NODE_STOP_S,
    GiB,
    MiB,
    add_node_env,
    append_round_robin,
    cleanup,
    create_topic,
    disk_budget,
    emit,
    handle_signals,
    log,
    make_bodies,
    make_data_dir,
    node_env,
    percentile,
    scrape_metrics,
    usage,
)
from ingest import DISTINCT_BODIES, Phase, run_phase
from testkit.cpucg import CpuSet, loopback_receive_on
from testkit.nodeproc import NodeProcess
from testkit.s3server import ADMIN, REGION, S3Server

BUCKET = "bench"
PLAIN, ARCHIVED, BACKLOG = "plain", "archived", "backlog"
CHUNK = 8 * MiB  # what the node's store writes at once
UPLOAD_AT_ONCE = 4  # storage.archive.upload_concurrency's default
TARGETS = {"ingest_ratio": 0.85, "upload_ratio": 0.8, "lag_over_max_age_s": 10.0}


def topic_status(url: str, topic: str) -> dict[str, Any]:
    reply: dict[str, Any] = httpx.get(f"{url}/admin/topics/{topic}", timeout=30.0).json()
    return reply


def archive_of(url: str, topic: str) -> dict[str, Any]:
    usage: dict[str, Any] = topic_status(url, topic)["usage"]
    archive: dict[str, Any] = usage["archive"]
    archive["partitions"] = usage["partitions"]
    return archive


def wait_archived(url: str, topic: str, timeout: float) -> float:
    """Seconds until no sealed segment of ``topic`` waits for the archive."""
    started = time.monotonic()
    a: dict[str, Any] = {}
    while time.monotonic() - started < timeout:
        try:
            a = archive_of(url, topic)
        except httpx.TimeoutException:  # a node busy sealing may answer late: ask again
            continue
        if a["lag_segments"] == 0 and a["state"] == "Current":
            return time.monotonic() - started
        time.sleep(0.1)
    raise RuntimeError(f"{topic}: archive still behind after {timeout:.0f} s: {a}")


def refusals(url: str) -> dict[str, float]:
    """The node's refused appends so far, by reason (``plateau_rejected_appends_total``)."""
    prefix = "plateau_rejected_appends_total{"
    return {
        name[len(prefix) :].split('"')[1]: value
        for name, value in scrape_metrics(url).items()
        if name.startswith(prefix)
    }


class LagSampler:
    """Samples an archived topic's lag every ``interval`` seconds while ``on`` (a thread)."""

    def __init__(self, url: str, topic: str, interval: float = 0.5) -> None:
        self.url, self.topic, self.interval = url, topic, interval
        self.node_lag: list[float] = []  # archive.lag_seconds (since seal)
        self.record_lag: list[float] = []  # age of the oldest record not archived
        self._first_seen: dict[str, list[tuple[float, int]]] = {}  # partition: (t, end)
        self.on = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lag-sampler", daemon=True)

    def start(self) -> LagSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def begin(self) -> None:
        """An archived phase starts (the archive caught up before it): sample from here."""
        self._first_seen.clear()
        self.on.set()

    def _appended_at(self, partition: str, index: int, now: float) -> float:
        """When the partition's end first passed ``index``: the sample before that (at most
        ``interval`` early, so the lag errs long), else the phase's first sample."""
        seen = self._first_seen.get(partition, [])
        before = now
        for t, end in reversed(seen):
            if end <= index:
                return t
            before = t
        return before

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if not self.on.is_set():
                continue
            with contextlib.suppress(httpx.HTTPError, KeyError):
                now = time.monotonic()
                a = archive_of(self.url, self.topic)
                self.node_lag.append(float(a["lag_seconds"]))
                worst = 0.0
                for p, usage in a["partitions"].items():
                    end = int(usage["end"])
                    archived = (usage.get("archive") or {}).get("end") or 0
                    self._first_seen.setdefault(p, []).append((now, end))
                    if archived < end:
                        worst = max(worst, now - self._appended_at(p, archived, now))
                self.record_lag.append(worst)


def ingest_pairs(
    args: argparse.Namespace, node: NodeProcess, s3_pid: int, bodies: list[bytes]
) -> dict[str, Any]:
    sampler = LagSampler(node.url, ARCHIVED).start()
    pairs: list[dict[str, Any]] = []
    s3 = psutil.Process(s3_pid)
    groups: list[CpuSet] = []
    restore = contextlib.ExitStack()
    if args.split_cpus:  # the node and the load driver (this process's threads) on CPU 0
        why = CpuSet.available()
        if why:
            raise SystemExit(f"--split-cpus: {why} (--no-split-cpus runs without)")
        last = (os.cpu_count() or 2) - 1
        groups = [CpuSet("0"), CpuSet(f"1-{last}" if last > 1 else "1")]
        for pid in (node.pid, os.getpid()):
            groups[0].add(pid)
        groups[1].add(s3_pid)
        restore.enter_context(loopback_receive_on(range(1, last + 1)))
        log(f"CPU 0: the node and the load driver; CPUs {groups[1].cpus}: the S3 server and "
            "the kernel's receive work for loopback")  # fmt: skip
    try:
        for i in range(args.pairs):
            order = [(PLAIN, False), (ARCHIVED, True)]
            result: dict[str, Any] = {}
            for topic, archived in order if i % 2 == 0 else order[::-1]:
                s3_before = sum(s3.cpu_times()[:2])
                refused_before = refusals(node.url)
                reads_before = usage(node.pid).read_bytes
                sampler.begin() if archived else sampler.on.clear()
                phase: Phase = run_phase(
                    f"pair {i + 1} {'on' if archived else 'off'}",
                    "stdlib",
                    "parquet",
                    node.url,
                    node.pid,
                    bodies,
                    args.rows_per_batch,
                    args.clients,
                    args.partitions,
                    args.duration,
                    None,
                    topic=topic,
                )
                s3_cores = (sum(s3.cpu_times()[:2]) - s3_before) / phase.elapsed_s
                refused = {
                    reason: n - refused_before.get(reason, 0)
                    for reason, n in refusals(node.url).items()
                    if n > refused_before.get(reason, 0)
                }
                reads = (usage(node.pid).read_bytes - reads_before) / phase.elapsed_s / 1e6
                time.sleep(args.max_age + 1)  # the open segments seal by age
                drain = wait_archived(node.url, ARCHIVED, 300) if archived else None
                sampler.on.clear()
                result["on" if archived else "off"] = {
                    "rows_per_s": round(phase.rows_per_s),
                    "p99_ms": round(phase.p99_ms, 1),
                    "node_cpu_cores": round(phase.node_cpu_s / phase.elapsed_s, 2),
                    "node_cpu_us_per_row": round(phase.node_cpu_s / max(phase.rows, 1) * 1e6, 3),
                    "s3_server_cpu_cores": round(s3_cores, 2),
                    "node_write_mb_per_s": round(phase.node_write_bytes / phase.elapsed_s / 1e6),
                    "node_read_mb_per_s": round(reads),
                    "errors": phase.errors,
                    "rejected_429": phase.rejected_429,
                    "refused_by_reason": refused,
                    **({"drain_s": round(drain, 1)} if drain is not None else {}),
                }
            result["ratio"] = round(result["on"]["rows_per_s"] / result["off"]["rows_per_s"], 3)
            log(f"pair {i + 1}: {result}")
            pairs.append(result)
    finally:
        sampler.stop()
        for group in groups:
            group.remove()
        restore.close()
    on = statistics.median(p["on"]["rows_per_s"] for p in pairs)
    off = statistics.median(p["off"]["rows_per_s"] for p in pairs)
    node_lag, record_lag = sorted(sampler.node_lag), sorted(sampler.record_lag)
    bound = args.max_age + TARGETS["lag_over_max_age_s"]
    return {
        "ingest": {
            "pairs": pairs,
            "off_rows_per_s": round(off),
            "on_rows_per_s": round(on),
            "ratio": round(statistics.median(p["ratio"] for p in pairs), 3),
            "target": TARGETS["ingest_ratio"],
            "cpus_split": bool(groups),
        },
        "lag": {
            "samples": len(node_lag),
            "p50_s": round(percentile(node_lag, 50), 2),
            "p99_s": round(percentile(node_lag, 99), 2),
            "max_s": round(node_lag[-1] if node_lag else 0.0, 2),
            "record_p50_s": round(percentile(record_lag, 50), 2),
            "record_p99_s": round(percentile(record_lag, 99), 2),
            "record_max_s": round(record_lag[-1] if record_lag else 0.0, 2),
            "target_s": bound,
            "within_target": percentile(record_lag, 99) <= bound,
        },
    }


def read_manifest(server: S3Server, topic: str) -> dict[str, Any]:
    fs = server.filesystem()
    with fs.open_input_stream(f"{BUCKET}/pfx/{topic}/_plateau_archive.json") as f:
        doc: dict[str, Any] = json.loads(f.read())
    return doc


def plain_upload(server: S3Server, files: list[Path], prefix: str) -> float:
    """MB/s of pyarrow uploading ``files`` as the node's store does, 4 at once."""
    fs = pafs.S3FileSystem(
        access_key=ADMIN.access_key,
        secret_key=ADMIN.secret_key,
        endpoint_override=server.endpoint.removeprefix("http://"),
        scheme="http",
        region=REGION,
        background_writes=False,  # as the node's store
    )

    def one(path: Path) -> None:
        key = f"{BUCKET}/{prefix}/{path.parent.name}/{path.name}"
        with path.open("rb") as src, fs.open_output_stream(key) as out:
            while chunk := src.read(CHUNK):
                out.write(chunk)

    started = time.perf_counter()
    with ThreadPoolExecutor(UPLOAD_AT_ONCE) as pool:
        list(pool.map(one, files))
    return sum(p.stat().st_size for p in files) / (time.perf_counter() - started) / 1e6


def upload_throughput(
    args: argparse.Namespace, node: NodeProcess, server: S3Server, bodies: list[bytes]
) -> dict[str, Any]:
    create_topic(
        node.url,
        BACKLOG,
        {
            "partitions": args.partitions,
            "segment": {"format": "parquet", "max_age_seconds": 2},
            "retention": {"max_bytes": 4 * args.backlog_mb * MiB},
        },
    )
    per_request = len(bodies[0])  # about the parquet bytes of a body (random values)
    requests = max(args.partitions, args.backlog_mb * MiB // per_request)
    log(f"backlog: {requests} appends of {args.rows_per_batch} rows, archiving off")
    append_round_robin(node.url, BACKLOG, bodies, requests, args.partitions, args.clients)
    time.sleep(3)  # every open segment seals by age
    files = sorted((node.data_dir / "topics" / BACKLOG).glob("*/*.parquet"))
    size = sum(p.stat().st_size for p in files)
    log(f"backlog: {len(files)} segment files, {size / 1e6:.0f} MB")
    plain = [plain_upload(server, files, "plain-1")]
    log(f"plain upload: {plain[0]:.1f} MB/s")
    with httpx.Client(base_url=node.url, timeout=30.0) as c:
        c.put(f"/admin/topics/{BACKLOG}", json={"archive": {"enabled": True}}).raise_for_status()
    seconds = wait_archived(node.url, BACKLOG, 900)
    uploaded = archive_of(node.url, BACKLOG)["uploaded_segments"]
    uploader = size / seconds / 1e6
    log(f"uploader: {uploaded} segments in {seconds:.1f} s, {uploader:.1f} MB/s")
    plain.append(plain_upload(server, files, "plain-2"))
    log(f"plain upload again: {plain[1]:.1f} MB/s")
    return {
        "files": len(files),
        "bytes": size,
        "uploaded_segments": uploaded,
        "uploader_mb_per_s": round(uploader, 1),
        "plain_mb_per_s": [round(x, 1) for x in plain],
        "ratio": round(uploader / statistics.mean(plain), 3),
        "target": TARGETS["upload_ratio"],
    }


@contextlib.contextmanager
def node_and_s3(args: argparse.Namespace, data_dir: Path) -> Iterator[tuple[NodeProcess, S3Server]]:
    """A fresh S3 server (its data in ``--s3-dir``) and a node archiving to it; both removed
    after, so that each part of the run holds only its own objects in tmpfs."""
    data_dir.mkdir(parents=True, exist_ok=True)
    s3_root = Path(tempfile.mkdtemp(prefix="plateau-bench-s3-", dir=args.s3_dir))
    server = S3Server(s3_root / "s3")
    node: NodeProcess | None = None
    try:
        server.start()
        server.create_bucket(BUCKET)
        assert server.proc is not None
        log(f"S3 server (SeaweedFS) pid {server.proc.pid} on {server.endpoint}")
        _, capacity = disk_budget(data_dir, 3 * GiB)
        env = {**ADMIN.env(), "PLATEAU_STORAGE__ARCHIVE__ENDPOINT": server.endpoint}
        env.update(args.node_env)
        node_args = ["--capacity-bytes", str(capacity), "--archive-url", f"s3://{BUCKET}/pfx"]
        node = NodeProcess(data_dir, env=env, args=node_args)
        node.start(timeout=NODE_START_S)
        log(f"node pid {node.pid} on {node.url}")
        yield node, server
    finally:
        if node is not None:
            with contextlib.suppress(Exception):
                node.stop(timeout=NODE_STOP_S)
        server.kill()
        shutil.rmtree(s3_root, ignore_errors=True)
        shutil.rmtree(data_dir, ignore_errors=True)


def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    log(f"generating {DISTINCT_BODIES} bodies of {args.rows_per_batch} rows")
    bodies = make_bodies(DISTINCT_BODIES, args.rows_per_batch, compressible=False)
    budget, _ = disk_budget(data_dir, 3 * GiB)
    result: dict[str, Any] = {
        "format": "parquet",
        "partitions": args.partitions,
        "clients": args.clients,
        "duration_s": args.duration,
        "max_age_s": args.max_age,
    }
    if args.pairs:
        with node_and_s3(args, data_dir / "ingest") as (node, server):
            for topic, archived in ((PLAIN, False), (ARCHIVED, True)):
                config = {
                    "partitions": args.partitions,
                    "segment": {"format": "parquet", "max_age_seconds": args.max_age},
                    "retention": {"max_bytes": budget // 2},
                    "archive": {"enabled": archived},
                }
                create_topic(node.url, topic, config)
            assert server.proc is not None
            result.update(ingest_pairs(args, node, server.proc.pid, bodies))
    if args.backlog_mb:
        with node_and_s3(args, data_dir / "backlog") as (node, server):
            result["upload"] = upload_throughput(args, node, server, bodies)
            if args.spark_rounds:
                import archive_spark

                keys = [s["key"] for s in read_manifest(server, BACKLOG)["segments"]]
                result["spark"] = archive_spark.measure(
                    node.url, server.endpoint, BUCKET, "pfx", BACKLOG, keys, args.spark_rounds
                )
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3, help="off/on phase pairs (0: none) [3]")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds per phase [15]")
    ap.add_argument("--max-age", type=float, default=10.0, help="segment max age, s [10]")
    ap.add_argument(
        "--backlog-mb", type=int, default=2048, help="uploader and Spark part, MB (0: none) [2048]"
    )
    ap.add_argument("--clients", type=int, default=4, help="writer threads [4]")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rows-per-batch", type=int, default=10_000)
    ap.add_argument(
        "--spark-rounds",
        type=int,
        default=3,
        help="rounds of the Spark full-history read of the backlog (0: none) [3]",
    )
    ap.add_argument("--data-dir", type=Path, default=None, help="[a new temp dir, deleted after]")
    ap.add_argument(
        "--s3-dir",
        type=Path,
        default=Path("/dev/shm") if Path("/dev/shm").is_dir() else None,
        help="where the S3 server keeps its data [/dev/shm: off the node's disk, as a remote "
        "S3 would be]",
    )
    add_node_env(ap)
    ap.add_argument(
        "--split-cpus",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="in the ingest phases, the node and the load driver on CPU 0 and the S3 server on "
        "the others (cpuset cgroups) with loopback's receive work (lo's rps_cpus, restored "
        "after), as if the server ran elsewhere; --no-split-cpus: all "
        "share every CPU and the co-located server takes the node's CPU [on]",
    )
    ap.add_argument("--keep", action="store_true", help="keep the data dir and logs")
    args = ap.parse_args(argv)
    args.node_env = node_env(ap, args.node_env)
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    data_dir, temp_root = make_data_dir(args.data_dir, "plateau-bench-archive-")
    log(f"data dir {data_dir}")
    try:
        return run(args, data_dir)
    finally:
        if not args.keep:
            cleanup(temp_root)


if __name__ == "__main__":
    handle_signals()
    emit(main())
