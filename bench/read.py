"""Read benchmark: topic iteration and partition reads over HTTP, in Arrow.

    python bench/read.py [--format arrow|parquet] [--rows 20000000] [--compressible]
        [--compression zstd|lz4|none] [--duration 20] [--no-restart] [--data-dir DIR]
    python bench/read.py --url http://127.0.0.1:3030 --topic T   (an existing topic)

Without ``--url`` it starts a node, fills topic ``bench`` (4 partitions) with
``--rows`` rows, restarts the node (a clean stop seals every open segment, so
the reads come from sealed files, as history reads do), then reads it back:

1. topic iteration: ``POST /topic/{t}/records?page_size=10000`` with the cursor
   from the iteration-status header, one reader, until the status is ``All``;
2. partition reads: ``GET /topic/{t}/partition/{p}/records?start=..&page_size=10000``,
   one reader going through the partitions in turn;
3. the same partition reads with one reader thread per partition.

Each pass stops early after ``--duration`` seconds. Progress goes to stderr;
the last stdout line is one JSON object (see bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.ipc as ipc

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testkit.nodeproc

import read_focus
from clients import CLIENTS, Reply, open_client
from common import (
    NODE_START_S,
    NODE_STOP_S,
    GiB,
    MiB,
    RssSampler,
    append_round_robin,
    cleanup,
    create_topic,
    disk_budget,
    emit,
    handle_signals,
    log,
    make_bodies,
    make_data_dir,
    percentile,
    self_cpu_s,
    system_busy_s,
    usage,
)
from plateau.protocol import ARROW_FILE, ITERATION_STATUS_HEADER, JSON, SPAN_END_HEADER
from testkit.nodeproc import NodeProcess

TOPIC = "bench"


@dataclass
class ReadStats:
    rows: int = 0
    body_bytes: int = 0
    pages: int = 0
    latencies: list[float] = field(default_factory=list)


@dataclass
class Pass:
    name: str
    rows: int
    elapsed_s: float
    body_bytes: int
    pages: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    first_ms: float
    node_cpu_s: float
    client_cpu_s: float
    other_cpu_s: float
    complete: bool

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def summary(self) -> str:
        return (
            f"{self.name}: {self.rows:,} rows in {self.elapsed_s:.1f} s = "
            f"{self.rows_per_s:,.0f} rows/s ({self.body_bytes / self.elapsed_s / 1e6:.0f} MB/s), "
            f"{self.pages} pages, p50 {self.p50_ms:.1f} ms, p99 {self.p99_ms:.1f} ms, "
            f"max {self.max_ms:.0f} ms, first page {self.first_ms:.0f} ms, "
            f"node CPU {self.node_cpu_s / self.elapsed_s:.2f} cores, "
            f"client CPU {self.client_cpu_s / self.elapsed_s:.2f} cores, "
            f"other {self.other_cpu_s / self.elapsed_s:.2f} cores"
            + ("" if self.complete else " (stopped at --duration)")
        )


def _rows_in(body: bytes) -> int:
    """Rows of an Arrow IPC file reply (zero-copy: no decoding of the values)."""
    if not body:
        return 0
    reader = ipc.open_file(pa.py_buffer(body))
    return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))


def _check(r: Reply, what: str) -> None:
    if r.status != 200:
        raise RuntimeError(f"{what}: {r.status} {r.body[:300]!r}")


def iterate_topic(
    client: str,
    url: str,
    topic: str,
    page_size: int,
    deadline: float,
    headers: dict[str, str],
    extra: list[tuple[str, str]] | None = None,
) -> tuple[ReadStats, bool]:
    """One cursor from the start until ``All``; True if it got there before ``deadline``.

    ``extra``: more query parameters (the data focus of ``--focus``).
    """
    stats = ReadStats()
    cursor: dict[str, int] = {}
    reader = open_client(client, url, headers)
    try:
        while time.perf_counter() < deadline:
            sent = time.perf_counter()
            r = reader.request(
                "POST",
                f"/topic/{topic}/records",
                [("page_size", str(page_size)), *(extra or [])],
                json.dumps(cursor).encode(),
                {"accept": ARROW_FILE, "content-type": JSON},
            )
            _check(r, f"iterate {topic}")
            rows = _rows_in(r.body)
            stats.latencies.append(time.perf_counter() - sent)
            stats.rows += rows
            stats.body_bytes += len(r.body)
            stats.pages += 1
            status = json.loads(r.header(ITERATION_STATUS_HEADER) or "{}")
            cursor = {str(k): int(v) for k, v in status["next"].items()}
            if status["status"] == "All":
                return stats, True
    finally:
        reader.close()
    return stats, False


def read_partition(
    client: str,
    url: str,
    topic: str,
    partition: str,
    start: int,
    end: int,
    page_size: int,
    deadline: float,
    headers: dict[str, str],
    stats: ReadStats,
) -> bool:
    """Pages of one partition from ``start`` to ``end``; True if done before ``deadline``."""
    pos = start
    reader = open_client(client, url, headers)
    try:
        while pos < end:
            if time.perf_counter() >= deadline:
                return False
            sent = time.perf_counter()
            r = reader.request(
                "GET",
                f"/topic/{topic}/partition/{partition}/records",
                {"start": pos, "page_size": page_size},
                b"",
                {"accept": ARROW_FILE},
            )
            _check(r, f"read {topic}/{partition} at {pos}")
            rows = _rows_in(r.body)
            stats.latencies.append(time.perf_counter() - sent)
            stats.rows += rows
            stats.body_bytes += len(r.body)
            stats.pages += 1
            span_end = r.header(SPAN_END_HEADER)  # the status header holds the status alone
            if span_end is None or rows == 0:
                break
            pos = int(span_end)
    finally:
        reader.close()
    return True


def measured(name: str, pid: int | None, work: Any) -> Pass:
    """Run ``work()`` -> (list of ReadStats, complete) and account CPU around it."""
    node_before = usage(pid).cpu_s if pid else 0.0
    client_before = self_cpu_s()
    system_before = system_busy_s()
    started = time.perf_counter()
    stats_list, complete = work()
    elapsed = time.perf_counter() - started
    node_cpu = (usage(pid).cpu_s - node_before) if pid else 0.0
    client_cpu = self_cpu_s() - client_before
    other = max(0.0, system_busy_s() - system_before - node_cpu - client_cpu)
    firsts = [s.latencies[0] * 1000 for s in stats_list if s.latencies]
    lat = sorted(x * 1000 for s in stats_list for x in s.latencies)
    result = Pass(
        name=name,
        rows=sum(s.rows for s in stats_list),
        elapsed_s=elapsed,
        body_bytes=sum(s.body_bytes for s in stats_list),
        pages=sum(s.pages for s in stats_list),
        p50_ms=percentile(lat, 50),
        p99_ms=percentile(lat, 99),
        max_ms=lat[-1] if lat else 0.0,
        first_ms=max(firsts, default=0.0),
        node_cpu_s=node_cpu,
        client_cpu_s=client_cpu,
        other_cpu_s=other if pid else 0.0,
        complete=complete,
    )
    log(result.summary())
    return result


def fill(url: str, rows: int, partitions: int, compressible: bool, clients: int) -> float:
    """Append ``rows`` rows (rounded up to whole batches) round-robin; returns rows/s."""
    batch = 10_000
    bodies = make_bodies(32, batch, compressible)  # partition p cycles through 8 of them
    requests = -(-rows // batch)
    elapsed = append_round_robin(url, TOPIC, bodies, requests, partitions, clients)
    return requests * batch / elapsed


def spans(url: str, topic: str, headers: dict[str, str]) -> dict[str, tuple[int, int]]:
    r = httpx.get(f"{url}/topic/{topic}", headers=headers, timeout=30.0)
    if r.status_code != 200:
        raise RuntimeError(f"GET /topic/{topic}: {r.status_code} {r.text[:300]}")
    return {p: (int(s["start"]), int(s["end"])) for p, s in r.json()["partitions"].items()}


def read_all(
    client: str,
    url: str,
    topic: str,
    pid: int | None,
    page_size: int,
    duration: float,
    token: str | None,
) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    parts = spans(url, topic, headers)
    total = sum(end - start for start, end in parts.values())
    log(f"topic {topic}: {total:,} rows in {len(parts)} partitions")

    def topic_pass() -> tuple[list[ReadStats], bool]:
        stats, complete = iterate_topic(
            client, url, topic, page_size, time.perf_counter() + duration, headers
        )
        return [stats], complete

    def partitions_sequential() -> tuple[list[ReadStats], bool]:
        stats = ReadStats()
        deadline = time.perf_counter() + duration
        complete = all(
            read_partition(client, url, topic, p, s, e, page_size, deadline, headers, stats)
            for p, (s, e) in sorted(parts.items())
        )
        return [stats], complete

    def partitions_parallel() -> tuple[list[ReadStats], bool]:
        deadline = time.perf_counter() + duration
        stats = {p: ReadStats() for p in parts}
        done: dict[str, bool] = {}

        def one(p: str) -> None:
            s, e = parts[p]
            done[p] = read_partition(
                client, url, topic, p, s, e, page_size, deadline, headers, stats[p]
            )

        threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in parts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return list(stats.values()), all(done.values())

    it = measured("topic iteration", pid, topic_pass)
    seq = measured("partition reads, 1 reader", pid, partitions_sequential)
    par = measured(f"partition reads, {len(parts)} readers", pid, partitions_parallel)
    again = measured("topic iteration again", pid, topic_pass)
    return {
        "client": client,
        "rows": total,
        "rows_per_s": round(it.rows_per_s),
        "partition_rows_per_s": round(seq.rows_per_s),
        "partition_parallel_rows_per_s": round(par.rows_per_s),
        "rows_read": it.rows,
        "complete": it.complete,
        "mb_per_s": round(it.body_bytes / it.elapsed_s / 1e6, 1),
        "p50_ms": round(it.p50_ms, 1),
        "p99_ms": round(it.p99_ms, 1),
        "max_ms": round(it.max_ms, 1),
        "first_page_ms": round(it.first_ms, 1),
        "partition_p99_ms": round(seq.p99_ms, 1),
        "node_cpu_cores": round(it.node_cpu_s / it.elapsed_s, 2) if pid else None,
        "client_cpu_cores": round(it.client_cpu_s / it.elapsed_s, 2),
        "other_cpu_cores": round(it.other_cpu_s / it.elapsed_s, 2) if pid else None,
        "partition_node_cpu_cores": round(seq.node_cpu_s / seq.elapsed_s, 2) if pid else None,
        "again_rows_per_s": round(again.rows_per_s),
        "again_p99_ms": round(again.p99_ms, 1),
        "again_node_cpu_cores": round(again.node_cpu_s / again.elapsed_s, 2) if pid else None,
    }


def _focus_pass(args: argparse.Namespace, url: str, pid: int, extra: list[tuple[str, str]]) -> Pass:
    name = "focused iteration" if extra else "full iteration"

    def work() -> tuple[list[ReadStats], bool]:
        deadline = time.perf_counter() + args.duration
        stats, complete = iterate_topic(
            args.client, url, read_focus.TOPIC, args.page_size, deadline, {}, extra
        )
        return [stats], complete

    return measured(name, pid, work)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--format", choices=["arrow", "parquet"], default="arrow")
    ap.add_argument("--rows", type=int, default=20_000_000, help="rows to fill [20,000,000]")
    ap.add_argument("--compressible", action="store_true", help="text-like values")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--clients", type=int, default=4, help="writer threads for the fill [4]")
    ap.add_argument(
        "--compression",
        choices=["zstd", "lz4", "none"],
        default=None,
        help="segment compression [the node's default]",
    )
    ap.add_argument("--page-size", type=int, default=10_000)
    ap.add_argument(
        "--client",
        choices=CLIENTS,
        default="stdlib",
        help="reader HTTP client: stdlib (http.client, cheap) or httpx [stdlib]",
    )
    ap.add_argument("--duration", type=float, default=20.0, help="max seconds per read pass [20]")
    ap.add_argument(
        "--no-restart",
        action="store_true",
        help="read right after the fill (open segments from memory) instead of after a restart",
    )
    ap.add_argument("--data-dir", type=Path, default=None, help="[a new temp dir, deleted after]")
    ap.add_argument("--url", default=None, help="read an existing node's topic, no fill")
    ap.add_argument("--topic", default=TOPIC, help="topic to read with --url [bench]")
    ap.add_argument("--token", default=None, help="read (or write) token for --url")
    ap.add_argument("--keep", action="store_true", help="keep the data dir and node log")
    ap.add_argument(
        "--focus",
        action="store_true",
        help="the focused-read line instead: 2 of 20 columns with dataset vs all (read_focus.py)",
    )
    ap.add_argument("--rounds", type=int, default=3, help="pairs of passes with --focus [3]")
    ap.add_argument(
        "--columns",
        choices=["mixed", "int64"],
        default="mixed",
        help="column types with --focus: inference-log-like mix, or all int64 [mixed]",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.focus:
        if "--rows" not in (argv if argv is not None else sys.argv):
            args.rows = 2_000_000
        return read_focus.run(args, lambda url, pid, extra: _focus_pass(args, url, pid, extra))
    if args.url:
        result = read_all(
            args.client, args.url, args.topic, None, args.page_size, args.duration, args.token
        )
        return {"format": None, "topic": args.topic, **result}

    data_dir, temp_root = make_data_dir(args.data_dir, "plateau-bench-read-")
    log(f"data dir {data_dir}")
    budget, capacity = disk_budget(data_dir, 8 * GiB)
    node = NodeProcess(data_dir, args=["--capacity-bytes", str(capacity)])
    try:
        node.start(timeout=NODE_START_S)
        create_topic(
            node.url,
            TOPIC,
            {
                "partitions": args.partitions,
                "segment": {"format": args.format}
                | ({"compression": args.compression} if args.compression else {}),
                "retention": {"max_bytes": budget},
            },
        )
        log(f"filling {args.rows:,} rows into {args.partitions} partitions ({args.format})")
        fill_rate = fill(node.url, args.rows, args.partitions, args.compressible, args.clients)
        log(f"fill: {fill_rate:,.0f} rows/s")
        if not args.no_restart:
            log("restarting the node so that every segment is sealed")
            node.stop(timeout=NODE_STOP_S)
            node = NodeProcess(data_dir, args=["--capacity-bytes", str(capacity)])
            node.start(timeout=NODE_START_S)
        sampler = RssSampler(node.pid).start()
        try:
            result = read_all(
                args.client, node.url, TOPIC, node.pid, args.page_size, args.duration, None
            )
        finally:
            sampler.stop()
        result["peak_rss_mb"] = round(sampler.peak_mb, 1)
        result["peak_rss_anon_mb"] = round(sampler.peak_anon_bytes / MiB, 1)
        result["peak_rss_file_mb"] = round(sampler.peak_file_bytes / MiB, 1)
    except BaseException:
        log(f"node log tail:\n{node.log()}")
        raise
    finally:
        with contextlib.suppress(Exception):
            node.stop(timeout=NODE_STOP_S)
        if not args.keep:
            cleanup(temp_root)
    return {
        "format": args.format,
        "compressible": args.compressible,
        "compression": args.compression or "default",
        "sealed": not args.no_restart,
        **result,
        "fill_rows_per_s": round(fill_rate),
    }


if __name__ == "__main__":
    handle_signals()
    emit(main())
