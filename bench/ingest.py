"""Ingest benchmark: writer clients append Arrow batches over HTTP to a real node.

    python bench/ingest.py --format arrow|parquet [--compressible] [--duration 20]
        [--clients/--writers 4] [--partitions 4] [--rows-per-batch 10000] [--rate ROWS_PER_S]
        [--half-rate-check] [--data-dir DIR] [--durability fsync|relaxed]
        [--memory-limit BYTES] [--baseline-partitions 4] [--baseline-clients 4]

With ``--partitions`` other than ``--baseline-partitions`` a baseline phase runs
first on its own topic (4 partitions, 4 writers), so the wide run is compared
with it in the same invocation (``scaling_ratio``). ``--memory-limit`` runs the
node in a memory cgroup of that size, as a pod, so it takes its memory budget
from it; the result has the peak RSS against the budget.

Progress goes to stderr; the last stdout line is one JSON object (see
bench/README.md for every field).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testkit.memcg, testkit.nodeproc

import httpx

from clients import CLIENTS, Reply, TransportError, open_client
from common import (
    NODE_START_S,
    NODE_STOP_S,
    GiB,
    MiB,
    RssSampler,
    add_node_env,
    cleanup,
    create_topic,
    dir_size,
    disk_budget,
    emit,
    handle_signals,
    histogram_delta,
    log,
    make_bodies,
    make_data_dir,
    measure_fsync_bandwidth,
    node_env,
    percentile,
    scrape_metrics,
    self_cpu_s,
    system_busy_s,
    usage,
)
from plateau.protocol import ARROW_FILE, RETRY_AFTER_HEADER
from plateau.storage.config import StorageSettings
from testkit.memcg import MemoryCgroup
from testkit.nodeproc import NodeProcess

TOPIC = "bench"
BASELINE_TOPIC = "bench-baseline"
NODE_OVERHEAD_BYTES = StorageSettings().memory_overhead_bytes
DISTINCT_BODIES = 32
SLOW_S = 0.1  # appends slower than this are reported as stalls on stderr


@dataclass
class ClientStats:
    rows: int = 0
    requests: int = 0
    rejected_429: int = 0
    busy: collections.Counter[str] = field(default_factory=collections.Counter)  # 429s by cause
    errors: int = 0
    first_error: str | None = None
    latencies: list[float] = field(default_factory=list)  # from the intended send time
    service: list[float] = field(default_factory=list)  # from the actual send time
    slow: list[tuple[float, float]] = field(default_factory=list)  # (intended time, latency)
    last_done: float = 0.0


STAGES = ("body", "queue", "decode", "encode", "write", "durable")
"""The node's ``plateau_append_stage_seconds`` labels, in the order an append meets them."""


def stage_fields(phase: Phase, suffix: str) -> dict[str, dict[str, float]]:
    """Mean and bucket p99 of each append stage: where the latency of ``phase`` went."""
    return {
        f"stage_mean_ms{suffix}": {k: round(v["mean_ms"], 2) for k, v in phase.stages.items()},
        f"stage_p99_le_ms{suffix}": {k: round(v["p99_le_ms"], 2) for k, v in phase.stages.items()},
    }


@dataclass
class Phase:
    name: str
    target_rows_per_s: float | None
    rows: int
    elapsed_s: float
    rows_per_s: float
    requests: int
    rejected_429: int
    busy: dict[str, int]
    errors: int
    first_error: str | None
    p50_ms: float
    p99_ms: float
    max_ms: float
    service_p99_ms: float
    node_cpu_s: float
    node_write_bytes: int
    client_cpu_s: float
    other_cpu_s: float
    fsync: dict[str, float]
    seal: dict[str, float]
    stages: dict[str, dict[str, float]]
    retention_deleted: float
    full_gc: dict[str, float]  # the node's generation-2 collections (each holds the GIL)

    def summary(self) -> str:
        return (
            f"{self.name}: {self.rows_per_s:,.0f} rows/s, {self.requests} requests, "
            f"p50 {self.p50_ms:.1f} ms, p99 {self.p99_ms:.1f} ms, max {self.max_ms:.1f} ms, "
            f"429s {self.rejected_429}{_causes(self.busy)}, errors {self.errors}, "
            f"node CPU {self.node_cpu_s / self.elapsed_s:.2f} cores, "
            f"client CPU {self.client_cpu_s / self.elapsed_s:.2f} cores, "
            f"other processes {self.other_cpu_s / self.elapsed_s:.2f} cores, "
            f"node writes {self.node_write_bytes / self.elapsed_s / 1e6:.0f} MB/s; "
            f"{self.fsync['count']:.0f} fsyncs (mean {self.fsync['mean_ms']:.1f} ms, "
            f"p99 <= {self.fsync['p99_le_ms']:.0f} ms, "
            f"slowest > {self.fsync['max_over_ms']:.0f} ms), "
            f"{self.seal['count']:.0f} seals "
            f"(mean {self.seal['mean_ms']:.0f} ms, slowest > {self.seal['max_over_ms']:.0f} ms), "
            f"{self.retention_deleted:.0f} segments deleted by retention, "
            f"{self.full_gc['count']:.0f} full collections "
            f"(mean {self.full_gc['mean_ms']:.1f} ms, "
            f"slowest > {self.full_gc['max_over_ms']:.0f} ms)"
        )


def _retry_after(response: Reply) -> float:
    try:
        return float(response.header(RETRY_AFTER_HEADER) or "0.1")
    except ValueError:
        return 0.1


def _client_loop(
    kind: str,
    index: int,
    clients: int,
    url: str,
    bodies: list[bytes],
    rows_per_body: int,
    partitions: int,
    start_at: float,
    deadline: float,
    interval: float | None,
    sequences: list[Iterator[int]],
    stats: ClientStats,
    topic: str = TOPIC,
    partition_prefix: str = "",
) -> None:
    """One writer: closed loop (next request when the last is answered) or open loop.

    ``partition_prefix``: partitions are named ``{prefix}0``... (plateau's Rust
    server, which ingest_vs_rs.py also drives, refuses digit-only names).
    """
    headers = {"content-type": ARROW_FILE}
    paths = [f"/topic/{topic}/partition/{partition_prefix}{p}" for p in range(partitions)]
    client = open_client(kind, url)
    try:
        k = 0
        # open loop: clients are staggered evenly over one interval
        scheduled = start_at + (interval * index / clients if interval else 0.0)
        time.sleep(max(0.0, start_at - time.perf_counter()))
        while True:
            if interval is not None:
                if scheduled >= deadline:
                    break
                delay = scheduled - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                intended = scheduled
                scheduled += interval
            else:
                intended = time.perf_counter()
                if intended >= deadline:
                    break
            part = (index + k) % partitions
            k += 1
            # each partition cycles through its own bodies: with 32 bodies and 4 partitions a
            # body comes back after 8 batches (80,000 rows, 10 MB), beyond a Parquet row group
            # and zstd's window, so random data stays incompressible in sealed files too
            body = bodies[(next(sequences[part]) * partitions + part) % len(bodies)]
            path = paths[part]
            sent = time.perf_counter()
            try:
                r = client.request("POST", path, {}, body, headers)
            except TransportError as exc:
                stats.errors += 1
                stats.first_error = stats.first_error or str(exc)
                time.sleep(0.1)
                continue
            done = time.perf_counter()
            stats.requests += 1
            stats.last_done = done
            if r.status == 200:
                stats.rows += rows_per_body
                stats.latencies.append(done - intended)
                if done - intended > SLOW_S:
                    stats.slow.append((intended, done - intended))
                stats.service.append(done - sent)
            elif r.status == 429:
                stats.rejected_429 += 1
                stats.busy[_busy_cause(r.body)] += 1
                if interval is None:
                    # honour Retry-After briefly: a real client backs off, but a 1 s
                    # pause per rejection would measure the pause, not the node
                    time.sleep(min(_retry_after(r), 0.1))
            else:
                stats.errors += 1
                stats.first_error = stats.first_error or f"HTTP {r.status}: {r.body[:300]!r}"
                time.sleep(0.1)
    finally:
        client.close()


BUSY_CAUSES = {
    "append bodies": "bodies",  # server.inflight: the in-flight body budget
    "open segments hold": "open_segments",  # the memory budget's open-segment part
    "still being sealed": "partition_sealing",  # the partition's previous seal not done
    "append slots": "queue_timeout",  # server.append_queue_timeout_ms: waited too long
}


def _busy_cause(body: bytes) -> str:
    """Which of the node's load-shedding limits a 429 came from (its message says)."""
    text = body.decode(errors="replace")
    return next((cause for key, cause in BUSY_CAUSES.items() if key in text), "other")


def _causes(busy: dict[str, int]) -> str:
    return f" ({', '.join(f'{k} {v}' for k, v in sorted(busy.items()))})" if busy else ""


def _stalls(slow: list[tuple[float, float]], start_at: float) -> str:
    """Slow appends grouped by the second (of the phase) they were meant to start in."""
    groups: dict[int, list[float]] = {}
    for intended, latency in slow:
        groups.setdefault(int(intended - start_at), []).append(latency)
    wall0 = time.time() - (time.perf_counter() - start_at)
    return ", ".join(
        f"t={sec}s ({time.strftime('%H:%M:%S', time.localtime(wall0 + sec))}): "
        f"{len(lat)} (worst {max(lat) * 1000:.0f} ms)"
        for sec, lat in groups.items()
    )


def run_phase(
    name: str,
    client: str,
    fmt: str,
    url: str,
    node_pid: int,
    bodies: list[bytes],
    rows_per_body: int,
    clients: int,
    partitions: int,
    duration: float,
    rate: float | None,
    topic: str = TOPIC,
    partition_prefix: str = "",
) -> Phase:
    interval = clients * rows_per_body / rate if rate else None
    stats = [ClientStats() for _ in range(clients)]
    sequences = [itertools.count() for _ in range(partitions)]  # next() is atomic in CPython
    start_at = time.perf_counter() + 0.2
    deadline = start_at + duration
    threads = [
        threading.Thread(
            target=_client_loop,
            args=(
                client,
                i,
                clients,
                url,
                bodies,
                rows_per_body,
                partitions,
                start_at,
                deadline,
                interval,
            ),
            kwargs={
                "sequences": sequences,
                "stats": stats[i],
                "topic": topic,
                "partition_prefix": partition_prefix,
            },
            name=f"writer-{i}",
            daemon=True,
        )
        for i in range(clients)
    ]
    target = f" at {rate:,.0f} rows/s (open loop)" if rate else " (closed loop, unlimited)"
    log(f"{name}: {clients} clients, {duration:.0f} s{target}")
    metrics_before = scrape_metrics(url)
    node_before = usage(node_pid)
    client_before = self_cpu_s()
    system_before = system_busy_s()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = max([s.last_done for s in stats] + [time.perf_counter()])
    node_after = usage(node_pid)
    metrics_after = scrape_metrics(url)
    client_cpu = self_cpu_s() - client_before
    system_cpu = system_busy_s() - system_before
    elapsed = end - start_at
    rows = sum(s.rows for s in stats)
    lat = sorted(x * 1000 for s in stats for x in s.latencies)
    service = sorted(x * 1000 for s in stats for x in s.service)
    phase = Phase(
        name=name,
        target_rows_per_s=rate,
        rows=rows,
        elapsed_s=elapsed,
        rows_per_s=rows / elapsed if elapsed > 0 else 0.0,
        requests=sum(s.requests for s in stats),
        rejected_429=sum(s.rejected_429 for s in stats),
        busy=dict(sum((s.busy for s in stats), collections.Counter())),
        errors=sum(s.errors for s in stats),
        first_error=next((s.first_error for s in stats if s.first_error), None),
        p50_ms=percentile(lat, 50),
        p99_ms=percentile(lat, 99),
        max_ms=lat[-1] if lat else 0.0,
        service_p99_ms=percentile(service, 99),
        node_cpu_s=node_after.cpu_s - node_before.cpu_s,
        node_write_bytes=node_after.write_bytes - node_before.write_bytes,
        client_cpu_s=client_cpu,
        fsync=histogram_delta(metrics_before, metrics_after, "plateau_fsync_seconds"),
        seal=histogram_delta(
            metrics_before, metrics_after, "plateau_seal_seconds", f'format="{fmt}"'
        ),
        stages={
            stage: histogram_delta(
                metrics_before, metrics_after, "plateau_append_stage_seconds", f'stage="{stage}"'
            )
            for stage in STAGES
        },
        retention_deleted=sum(
            v - metrics_before.get(k, 0.0)
            for k, v in metrics_after.items()
            if k.startswith("plateau_retention_deleted_segments_total{")
        ),
        other_cpu_s=max(0.0, system_cpu - client_cpu - (node_after.cpu_s - node_before.cpu_s)),
        full_gc=histogram_delta(
            metrics_before, metrics_after, "plateau_gc_pause_seconds", 'generation="2"'
        ),
    )
    log(phase.summary())
    stalls = _stalls(sorted(x for s in stats for x in s.slow), start_at)
    if stalls:
        log(f"{name}: appends over {SLOW_S * 1000:.0f} ms, by second of the phase: {stalls}")
    if phase.first_error:
        log(f"{name}: first error: {phase.first_error}")
    return phase


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--format", choices=["arrow", "parquet"], default="arrow")
    ap.add_argument("--compressible", action="store_true", help="text-like values")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per phase [20]")
    ap.add_argument("--clients", "--writers", type=int, default=4, help="writer threads [4]")
    ap.add_argument(
        "--baseline-partitions",
        type=int,
        default=4,
        help="with other --partitions, a first phase on this many partitions to compare [4]",
    )
    ap.add_argument("--baseline-clients", type=int, default=4, help="its writers [4]")
    ap.add_argument(
        "--memory-limit",
        type=int,
        default=None,
        help="run the node in a memory cgroup of this many bytes (needs root)",
    )
    ap.add_argument(
        "--client",
        choices=CLIENTS,
        default="stdlib",
        help="writers' HTTP client: stdlib (http.client, cheap) or httpx [stdlib]",
    )
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rows-per-batch", type=int, default=10_000)
    ap.add_argument("--rate", type=float, default=None, help="open-loop target rows/s")
    ap.add_argument(
        "--half-rate-check",
        action="store_true",
        help="after the unlimited phase, a second open-loop phase at half its rate",
    )
    ap.add_argument("--data-dir", type=Path, default=None, help="[a new temp dir, deleted after]")
    ap.add_argument("--durability", choices=["fsync", "relaxed"], default="fsync")
    ap.add_argument(
        "--compression",
        choices=["zstd", "lz4", "none"],
        default=None,
        help="segment compression [the node's default]",
    )
    ap.add_argument(
        "--retention-bytes", type=int, default=8 * GiB, help="topic budget [8 GiB, or half free]"
    )
    ap.add_argument("--disk-seconds", type=float, default=5.0, help="fsync bandwidth test length")
    add_node_env(ap)
    ap.add_argument("--keep", action="store_true", help="keep the data dir and node log")
    ap.add_argument(
        "--compare-unlimited",
        action="store_true",
        help="with --memory-limit: first the same load on a node without the limit (no\n"
        "baseline phase), then the limited run; adds limited_vs_unlimited (issue 28)",
    )
    args = ap.parse_args(argv)
    args.node_env = node_env(ap, args.node_env)
    if args.rate is not None and args.half_rate_check:
        ap.error("--rate and --half-rate-check exclude each other")
    if args.compare_unlimited and not args.memory_limit:
        ap.error("--compare-unlimited needs --memory-limit")
    return args


# issue 28: under the memory limit, against the same load without it
LIMITED_VS_UNLIMITED_TARGET = 0.8
LIMITED_P99_TARGET_MS = 200.0


def compare_unlimited(args: argparse.Namespace) -> dict[str, Any]:
    """The load of ``args`` on a node without the memory limit, then the limited run.

    The unlimited run skips the baseline phase and measures the disk only briefly:
    it exists for its rows/s, which the limited run's are divided by.
    """
    free = argparse.Namespace(**vars(args))
    free.memory_limit = None
    free.baseline_partitions = args.partitions  # no baseline phase
    free.disk_seconds = min(args.disk_seconds, 1.0)
    if args.data_dir is not None:
        free.data_dir = args.data_dir.parent / f"{args.data_dir.name}-unlimited"
    log("the same load without the memory limit first")
    unlimited = run_in_data_dir(free)
    log("now under the memory limit")
    result = run_in_data_dir(args)
    ratio = result["rows_per_s"] / unlimited["rows_per_s"] if unlimited["rows_per_s"] else None
    oom_kills = result["memory"]["oom_kills"]
    result["unlimited"] = {
        k: unlimited[k]
        for k in ("rows_per_s", "p50_ms", "p99_ms", "max_ms", "rejected_429", "errors")
    } | {"peak_rss_mb": unlimited["peak_rss_mb"], "node_cpu_cores": unlimited["node_cpu_cores"]}
    result["limited_vs_unlimited"] = round(ratio, 3) if ratio is not None else None
    result["memory_targets"] = {
        "limited_vs_unlimited": {
            "value": result["limited_vs_unlimited"],
            "target": LIMITED_VS_UNLIMITED_TARGET,
            "pass": ratio is not None and ratio >= LIMITED_VS_UNLIMITED_TARGET,
        },
        "limited_p99_ms": {
            "value": result["p99_ms"],
            "target": LIMITED_P99_TARGET_MS,
            "pass": result["p99_ms"] <= LIMITED_P99_TARGET_MS,
        },
        "oom_kills": {"value": oom_kills, "target": 0, "pass": oom_kills == 0},
    }
    result["memory_targets_pass"] = all(t["pass"] for t in result["memory_targets"].values())
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.compare_unlimited:
        return compare_unlimited(args)
    return run_in_data_dir(args)


def run_in_data_dir(args: argparse.Namespace) -> dict[str, Any]:
    """``run`` on ``--data-dir`` or a new temp dir, deleted afterwards unless ``--keep``."""
    data_dir, temp_root = make_data_dir(args.data_dir, "plateau-bench-ingest-")
    log(f"data dir {data_dir}")
    try:
        return run(args, data_dir)
    finally:
        if not args.keep:
            cleanup(temp_root)
            with contextlib.suppress(OSError):
                (data_dir.parent / f"{data_dir.name}-node.log").unlink()


def run(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    """The whole benchmark on ``data_dir``; the caller deletes it."""

    log(f"generating {DISTINCT_BODIES} bodies of {args.rows_per_batch} rows")
    bodies = make_bodies(DISTINCT_BODIES, args.rows_per_batch, args.compressible)
    raw_bytes_per_row = sum(len(b) for b in bodies) / len(bodies) / args.rows_per_batch

    log(f"measuring fsynced sequential write bandwidth in {data_dir} ({args.disk_seconds:.0f} s)")
    disk_before = measure_fsync_bandwidth(data_dir, max_seconds=args.disk_seconds)
    log(f"disk before: {disk_before:.0f} MB/s fsynced; {raw_bytes_per_row:.1f} body bytes/row")

    budget, capacity = disk_budget(data_dir, args.retention_bytes)
    node_args = ["--capacity-bytes", str(capacity)]
    if args.durability != "fsync":
        node_args += ["--durability", args.durability]
    cgroup = MemoryCgroup(args.memory_limit) if args.memory_limit else None
    node = NodeProcess(
        data_dir, args=node_args, env=args.node_env, preexec=cgroup.enter if cgroup else None
    )
    sampler: RssSampler | None = None
    phases: list[Phase] = []
    baseline: Phase | None = None
    wide = args.partitions != args.baseline_partitions
    try:
        node.start(timeout=NODE_START_S)
        log(f"node pid {node.pid} on {node.url}")
        memory = httpx.get(f"{node.url}/admin/node").json()["memory"]
        log(f"memory budget: {memory}")
        segment: dict[str, Any] = {"format": args.format}
        if args.compression:
            segment["compression"] = args.compression
        topics = [(TOPIC, args.partitions)]
        if wide:
            topics.append((BASELINE_TOPIC, args.baseline_partitions))
        for name, partitions in topics:
            config = create_topic(
                node.url,
                name,
                {
                    "partitions": partitions,
                    "segment": segment,
                    "retention": {"max_bytes": budget // len(topics)},
                },
            )
            log(f"topic {name}: {config}")
        seg = config.get("config", config).get("segment", {})
        sampler = RssSampler(node.pid).start()
        sampler.sample()
        idle_rss_mb = sampler.peak_mb
        started = time.monotonic()

        def phase(
            name: str, clients: int, partitions: int, rate: float | None, topic: str = TOPIC
        ) -> Phase:
            return run_phase(
                name,
                args.client,
                args.format,
                node.url,
                node.pid,
                bodies,
                args.rows_per_batch,
                clients,
                partitions,
                args.duration,
                rate,
                topic=topic,
            )

        if wide:
            baseline = phase(
                "baseline",
                args.baseline_clients,
                args.baseline_partitions,
                args.rate,
                BASELINE_TOPIC,
            )
            baseline_peak_rss_mb = sampler.peak_mb
        # not "unlimited": with --compare-unlimited that word means no memory limit
        name = "full load" if args.rate is None else "rate"
        phases.append(phase(name, args.clients, args.partitions, args.rate))
        if args.half_rate_check:
            half = phases[0].rows_per_s / 2
            phases.append(phase("half-rate", args.clients, args.partitions, half))
        sampler.stop()
        log(f"node RSS MiB over time: {sampler.timeline_mb(started)}")
        log("stopping the node (it seals its open segments)")
        oom_kills = cgroup.oom_kills() if cgroup else None
        early_seals = int(scrape_metrics(node.url).get("plateau_early_seals_total", 0.0))
        node.stop(timeout=NODE_STOP_S)
        exit_info = node.exit
    except BaseException:
        log(f"node log tail:\n{node.log()}")
        raise
    finally:
        if sampler is not None:
            sampler.stop()
        with contextlib.suppress(Exception):
            node.stop(timeout=NODE_STOP_S)
        if cgroup is not None:
            cgroup.remove()
    size = dir_size(data_dir)
    # the disk of a shared or virtual machine drifts: measure again, now the node is gone,
    # and compare the node to the mean of both measurements
    disk_after = measure_fsync_bandwidth(data_dir, max_seconds=args.disk_seconds)
    disk_mb_per_s = (disk_before + disk_after) / 2
    disk_rows_per_s = disk_mb_per_s * 1e6 / raw_bytes_per_row
    log(
        f"disk after: {disk_after:.0f} MB/s; mean {disk_mb_per_s:.0f} MB/s "
        f"-> {disk_rows_per_s:,.0f} rows/s of {raw_bytes_per_row:.1f} bytes"
    )
    if abs(disk_before - disk_after) > 0.2 * disk_mb_per_s:
        log("warning: the disk's bandwidth moved by more than 20% during the run")

    main_phase = phases[0]
    total_rows = sum(p.rows for p in phases)
    total_write = exit_info.write_bytes if exit_info else 0
    result: dict[str, Any] = {
        "format": args.format,
        "compressible": args.compressible,
        "durability": args.durability,
        "compression": seg.get("compression"),
        "duration": args.duration,
        "clients": args.clients,
        "client": args.client,
        "partitions": args.partitions,
        "rows_per_batch": args.rows_per_batch,
        "rows": main_phase.rows,
        "rows_per_s": round(main_phase.rows_per_s),
        "disk_mb_per_s": round(disk_mb_per_s, 1),
        "disk_mb_per_s_before": round(disk_before, 1),
        "disk_mb_per_s_after": round(disk_after, 1),
        "raw_bytes_per_row": round(raw_bytes_per_row, 2),
        "disk_rows_per_s": round(disk_rows_per_s),
        "ratio": round(main_phase.rows_per_s / disk_rows_per_s, 3),
        "p50_ms": round(main_phase.p50_ms, 1),
        "p99_ms": round(main_phase.p99_ms, 1),
        "max_ms": round(main_phase.max_ms, 1),
        "requests": main_phase.requests,
        "rejected_429": sum(p.rejected_429 for p in phases),
        "rejected_429_by_cause": dict(
            sum((collections.Counter(p.busy) for p in phases), collections.Counter())
        ),
        "errors": sum(p.errors for p in phases),
        "peak_rss_mb": round(sampler.peak_mb if sampler else 0.0, 1),
        "peak_rss_anon_mb": round(sampler.peak_anon_bytes / MiB, 1) if sampler else None,
        "peak_rss_file_mb": round(sampler.peak_file_bytes / MiB, 1) if sampler else None,
        "idle_rss_mb": round(idle_rss_mb, 1),
        "node_cpu_s": round(main_phase.node_cpu_s, 2),
        "node_cpu_cores": round(main_phase.node_cpu_s / main_phase.elapsed_s, 2),
        "client_cpu_s": round(main_phase.client_cpu_s, 2),
        "client_cpu_cores": round(main_phase.client_cpu_s / main_phase.elapsed_s, 2),
        "other_cpu_cores": round(main_phase.other_cpu_s / main_phase.elapsed_s, 2),
        "node_cpu_us_per_row": round(main_phase.node_cpu_s / main_phase.rows * 1e6, 3)
        if main_phase.rows
        else None,
        "client_cpu_us_per_row": round(main_phase.client_cpu_s / main_phase.rows * 1e6, 3)
        if main_phase.rows
        else None,
        "node_write_mb_per_s": round(main_phase.node_write_bytes / main_phase.elapsed_s / 1e6, 1),
        "disk_bytes_per_row": round(total_write / total_rows, 2) if total_rows else None,
        "node_write_bytes": total_write,
        "fsyncs_per_s": round(main_phase.fsync["count"] / main_phase.elapsed_s, 1),
        "fsync_mean_ms": round(main_phase.fsync["mean_ms"], 2),
        "seals": int(main_phase.seal["count"]),
        "seal_mean_ms": round(main_phase.seal["mean_ms"], 1),
        "full_gcs": int(main_phase.full_gc["count"]),
        "full_gc_mean_ms": round(main_phase.full_gc["mean_ms"], 1),
        **stage_fields(main_phase, ""),
        "retention_deleted_segments": int(sum(p.retention_deleted for p in phases)),
        "data_dir_bytes": size,
        "node_total_cpu_s": round(exit_info.cpu_user_s + exit_info.cpu_system_s, 2)
        if exit_info
        else None,
    }
    if args.rate is not None:
        result["target_rows_per_s"] = args.rate
    if args.half_rate_check:
        half_phase = phases[1]
        result.update(
            {
                "half_rate_target_rows_per_s": round(half_phase.target_rows_per_s or 0),
                "half_rate_rows_per_s": round(half_phase.rows_per_s),
                "p50_ms_at_half_rate": round(half_phase.p50_ms, 1),
                "p99_ms_at_half_rate": round(half_phase.p99_ms, 1),
                "max_ms_at_half_rate": round(half_phase.max_ms, 1),
                "service_p99_ms_at_half_rate": round(half_phase.service_p99_ms, 1),
                **stage_fields(half_phase, "_at_half_rate"),
            }
        )
    peak = sampler.peak_mb if sampler else 0.0
    budget_mb = memory["budget_bytes"] / MiB
    result["memory"] = {
        "limit_mb": round(args.memory_limit / MiB, 1) if args.memory_limit else None,
        "budget_mb": round(budget_mb, 1),
        "budget_source": memory["source"],
        "overhead_mb": round(NODE_OVERHEAD_BYTES / MiB, 1),
        "peak_rss_mb": round(peak, 1),
        "peak_rss_over_budget_mb": round(peak - budget_mb, 1),
        "within_budget_plus_overhead": peak <= budget_mb + NODE_OVERHEAD_BYTES / MiB,
        "oom_kills": oom_kills,
        "early_seals": early_seals,
    }
    if baseline is not None:
        result["baseline"] = {
            "partitions": args.baseline_partitions,
            "clients": args.baseline_clients,
            "rows_per_s": round(baseline.rows_per_s),
            "p99_ms": round(baseline.p99_ms, 1),
            "rejected_429": baseline.rejected_429,
            "peak_rss_mb": round(baseline_peak_rss_mb, 1),
        }
        result["scaling_ratio"] = (
            round(main_phase.rows_per_s / baseline.rows_per_s, 3) if baseline.rows_per_s else None
        )
        result["scaling_target"] = 0.8
    if main_phase.first_error:
        result["first_error"] = main_phase.first_error
    return result


if __name__ == "__main__":
    handle_signals()
    emit(main())
