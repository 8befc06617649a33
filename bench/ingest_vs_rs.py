"""The node against plateau's Rust server, in one run, with one load driver.

    python bench/ingest_vs_rs.py --against-plateau-rs BINARY [--duration 15] [--pairs 2]
        [--workload incompressible|compressible|both] [--node-topics arrow,parquet]
        [--compression lz4|zstd|none|...] [--clients 4] [--partitions 4]
        [--ceiling-seconds 4] [--ceiling-gaps-ms 0,1,2,4]

Each phase starts one server in its own temporary directory: plateau's Rust
server (``rs``), or the node (``testkit.nodeproc.NodeProcess`` at its defaults:
fsync per acknowledged append) with one topic of the given format
(``node-arrow``, ``node-parquet``). The same driver as bench/ingest.py
(``run_phase``: ``--clients`` keep-alive writers, closed loop, each posting
pre-encoded Arrow IPC files of ``--rows-per-batch`` rows to partitions
``p0``..) runs for ``--duration`` seconds; then one reader per partition reads
every acknowledged row back in Arrow pages; then the server stops (the node
seals its open segments) and its data directory is measured and deleted.

After each pair, bench/disk_ceiling.py measures what the disk itself allows a
server that fsyncs every append (``disk_ceiling`` in the output): the same
number of writers appending the same body size with O_DIRECT and fdatasync
and nothing else, with ``--ceiling-gaps-ms`` of other work per append.

The phases run as pairs, ``rs, node-arrow, node-parquet, rs, node-arrow, ...``,
so that the machine's drift over the run (easily 20%) falls on both sides of
each ratio; every pair's node/plateau ratio is reported, and their median.
The workloads are in bench/workloads.py. Progress goes to stderr; the last
stdout line is one JSON object (see bench/README.md for every field).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
import typing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testkit.nodeproc

import httpx

import disk_ceiling
from clients import CLIENTS
from common import (
    DROP_CACHES,
    NODE_START_S,
    NODE_STOP_S,
    GiB,
    add_node_env,
    create_topic,
    default_data_root,
    dir_size,
    disk_budget,
    drop_page_cache,
    emit,
    handle_signals,
    log,
    median_known,
    node_env,
    pair_ratios,
)
from ingest import run_phase
from plateau.protocol.topic_config import SegmentConfig
from rs_server import RsServer, read_partitions, spans, start_rs
from testkit.nodeproc import NodeProcess
from workloads import WORKLOADS, codec_ratios, make_workload_bodies

TOPIC = "bench"
PREFIX = "p"  # partitions p0, p1, ...: plateau-rs refuses digit-only names
DISTINCT_BODIES = 32
RS = "rs"

# targets of issue 28: node/plateau rows/s by topic format, and the rest
INGEST_TARGETS = {"arrow": 1.3, "parquet": 0.8}
P99_TARGET_MS = 50.0
READ_TARGET = 2.0
DISK_SAVING_TARGET = 0.4


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(x, digits)


def run_one(
    args: argparse.Namespace, system: str, workload: str, pair: int, bodies: list[bytes]
) -> dict[str, Any]:
    """One phase on a fresh server: ingest, read everything back, stop, measure the disk."""
    root = Path(tempfile.mkdtemp(prefix=f"plateau-vs-rs-{system}-", dir=args.data_root))
    fmt = "arrow" if system == RS else system.removeprefix("node-")
    server: RsServer | NodeProcess
    try:
        if system == RS:
            server = start_rs(args.against_plateau_rs, root / "rs")
            data_dir = server.data_dir
        else:
            data_dir = root / "data"
            data_dir.mkdir()
            budget, capacity = disk_budget(data_dir, 1024 * GiB)  # half the free space
            server = NodeProcess(
                data_dir, args=["--capacity-bytes", str(capacity)], env=args.node_env
            )
            server.start(timeout=NODE_START_S)
            segment: dict[str, Any] = {"format": fmt}
            if args.compression:
                segment["compression"] = args.compression
            config = create_topic(
                server.url,
                TOPIC,
                # no "partitions": those are named 0..N-1; appends create p0.. as plateau does
                {"segment": segment, "retention": {"max_bytes": budget}},
            )
            log(f"{system}: topic {config.get('config', config).get('segment')}")
        try:
            phase = run_phase(
                f"{workload} pair {pair} {system}",
                args.client,
                fmt,
                server.url,
                server.pid,
                bodies,
                args.rows_per_batch,
                args.clients,
                args.partitions,
                args.duration,
                None,
                topic=TOPIC,
                partition_prefix=PREFIX,
            )
            # the node's view of the topic after the ingest (the codec it chose, per column)
            topic_status = (
                httpx.get(f"{server.url}/admin/topics/{TOPIC}", timeout=30.0).json()
                if system != RS
                else None
            )
            # the node also lists the empty partition 0 its topic config made
            written = {f"{PREFIX}{i}" for i in range(args.partitions)}
            ranges = {p: r for p, r in spans(server.url, TOPIC).items() if p in written}
            retained = sum(e - s for s, e in ranges.values())
            if args.read_rows:
                each = args.read_rows // args.partitions
                ranges = {p: (s, min(e, s + each)) for p, (s, e) in ranges.items()}
            # twice: the first read is the one the targets take; the second shows the
            # server warm (a fresh node's first read also grows its allocator's heap, a
            # page fault per new page, which a node that has served reads before has done;
            # under mimalloc that was a quarter of the node's CPU, under jemalloc 1%)
            reads = []
            for _ in range(2):
                if args.cold_reads:
                    drop_page_cache()
                reads.append(
                    read_partitions(
                        args.client, server.url, server.pid, TOPIC, ranges, args.page_size
                    )
                )
            read, warm = reads
            for label, r in (("read", read), ("read again", warm)):
                log(
                    f"{workload} pair {pair} {system}: {label} {r.rows:,} rows in "
                    f"{r.elapsed_s:.1f} s = {r.rows_per_s:,.0f} rows/s, "
                    f"page p99 {r.p99_ms():.1f} ms, server CPU "
                    f"{r.server_cpu_s / max(r.elapsed_s, 1e-9):.2f} cores"
                    + (f"; {r.first_error}" if r.first_error else "")
                )
        except BaseException:
            log(f"{system} log tail:\n{server.log()}")
            raise
        finally:
            if isinstance(server, NodeProcess):
                with contextlib.suppress(Exception):
                    server.stop(timeout=NODE_STOP_S)
            else:
                server.stop(timeout=NODE_STOP_S)
        disk = dir_size(data_dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "pair": pair,
        "rows": phase.rows,
        "rows_per_s": round(phase.rows_per_s),
        "p50_ms": round(phase.p50_ms, 1),
        "p99_ms": round(phase.p99_ms, 1),
        "max_ms": round(phase.max_ms, 1),
        "requests": phase.requests,
        "rejected_429": phase.rejected_429,
        "errors": phase.errors,
        "cpu_cores": round(phase.node_cpu_s / phase.elapsed_s, 2),
        "client_cpu_cores": round(phase.client_cpu_s / phase.elapsed_s, 2),
        "rows_retained": retained,
        "disk_bytes": disk,
        "disk_bytes_per_row": _r(disk / retained if retained else None, 2),
        "read_rows": read.rows,
        "read_rows_per_s": round(read.rows_per_s),
        "read_mb_per_s": round(read.body_bytes / read.elapsed_s / 1e6, 1) if read.elapsed_s else 0,
        "read_page_p99_ms": round(read.p99_ms(), 1),
        "read_cpu_cores": round(read.server_cpu_s / read.elapsed_s, 2) if read.elapsed_s else 0,
        "read_client_cpu_cores": (
            round(read.client_cpu_s / read.elapsed_s, 2) if read.elapsed_s else 0
        ),
        "read_again_rows_per_s": round(warm.rows_per_s),
        "read_again_cpu_cores": (
            round(warm.server_cpu_s / warm.elapsed_s, 2) if warm.elapsed_s else 0
        ),
        "first_error": phase.first_error or read.first_error or warm.first_error,
        "topic": topic_status,
    }


def ceiling(
    args: argparse.Namespace,
    bodies: list[bytes],
    raw_bytes_per_row: float,
    rs_rows_per_s: float,
    workload: str,
    pair: int,
) -> list[dict[str, Any]]:
    """The disk's fsync-per-append ceiling right after this pair's servers (disk_ceiling.py)."""
    body_bytes = round(sum(len(b) for b in bodies) / len(bodies))
    runs = disk_ceiling.measure(
        args.clients,
        args.ceiling_seconds,
        body_bytes,
        raw_bytes_per_row,
        args.ceiling_gaps,
        args.data_root,
    )
    for r in runs:
        r["vs_plateau"] = _r(r["rows_per_s"] / rs_rows_per_s if rs_rows_per_s else None)
    log(
        f"{workload} pair {pair}: disk ceiling (O_DIRECT + fdatasync, {args.clients} writers): "
        + ", ".join(
            f"gap {r['gap_ms']:g} ms {r['rows_per_s']:,} rows/s ({r['vs_plateau']}x plateau)"
            for r in runs
        )
    )
    return runs


def summarize_ceilings(ceilings: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Per gap: the median over pairs of the ceiling's rows/s and its ratio to plateau."""
    by_gap: dict[str, dict[str, Any]] = {}
    for runs in zip(*ceilings, strict=True):
        by_gap[f"{runs[0]['gap_ms']:g}"] = {
            "rows_per_s_median": _r(median_known([r["rows_per_s"] for r in runs]), 0),
            "vs_plateau_median": _r(median_known([r["vs_plateau"] for r in runs])),
            "runs": list(runs),
        }
    return {"by_gap_ms": by_gap}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over one system's runs of a workload."""
    keys = (
        "rows_per_s",
        "p99_ms",
        "cpu_cores",
        "disk_bytes_per_row",
        "read_rows_per_s",
        "read_again_rows_per_s",
    )
    out: dict[str, Any] = {f"{k}_median": _r(median_known([r[k] for r in runs]), 2) for k in keys}
    out["p99_ms_max"] = max(r["p99_ms"] for r in runs)
    out["rejected_429"] = sum(r["rejected_429"] for r in runs)
    out["errors"] = sum(r["errors"] for r in runs)
    out["runs"] = runs
    return out


def compare(
    runs: dict[str, list[dict[str, Any]]], raw_bytes_per_row: float
) -> dict[str, dict[str, Any]]:
    """Per node system: each pair's node/plateau ratios and their medians."""
    out: dict[str, dict[str, Any]] = {}
    for system, node in runs.items():
        if system == RS:
            continue
        entry: dict[str, Any] = {}
        for name, key in (
            ("ratio", "rows_per_s"),
            ("read_ratio", "read_rows_per_s"),
            ("read_again_ratio", "read_again_rows_per_s"),
            ("disk_ratio", "disk_bytes_per_row"),
        ):
            by_pair = pair_ratios(node, runs[RS], key)
            entry[f"{name}_by_pair"] = by_pair
            entry[name] = _r(median_known(by_pair))
        disk = median_known([r["disk_bytes_per_row"] for r in node])
        entry["disk_saving"] = _r(1 - disk / raw_bytes_per_row if disk is not None else None)
        out[system] = entry
    return out


def targets(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Issue 28's targets that this run measured, each with its value and pass/fail."""
    out: dict[str, dict[str, Any]] = {}

    def add(name: str, value: float | None, target: float, at_least: bool = True) -> None:
        ok = value is not None and (value >= target if at_least else value <= target)
        out[name] = {"value": value, "target": target, "at_least": at_least, "pass": ok}

    node_p99: list[float] = []
    for workload, w in result["workloads"].items():
        for system, cmp in w["vs_plateau"].items():
            fmt = system.removeprefix("node-")
            add(f"{system}_vs_rs_{workload}", cmp["ratio"], INGEST_TARGETS.get(fmt, 1.0))
            add(f"{system}_reads_vs_rs_{workload}", cmp["read_ratio"], READ_TARGET)
            node_p99.append(w["systems"][system]["p99_ms_max"])
            if workload == "compressible":
                add(f"{system}_disk_saving_compressible", cmp["disk_saving"], DISK_SAVING_TARGET)
    if node_p99:
        add("node_p99_ms", max(node_p99), P99_TARGET_MS, at_least=False)
    return out


def node_codecs() -> list[str]:
    """The values the node's topic config takes for ``compression``, from its own model."""
    annotation = SegmentConfig.model_fields["compression"].annotation
    return [v for arg in typing.get_args(annotation) for v in typing.get_args(arg)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--against-plateau-rs",
        type=Path,
        required=True,
        metavar="BINARY",
        help="plateau's Rust server (../shared/tools/build-plateau-rs builds it)",
    )
    ap.add_argument("--duration", type=float, default=15.0, help="seconds of ingest a phase [15]")
    ap.add_argument("--pairs", type=int, default=2, help="rounds of rs + each node topic [2]")
    ap.add_argument("--workload", choices=[*WORKLOADS, "both"], default="both")
    ap.add_argument(
        "--node-topics", default="arrow,parquet", help="node topic formats [arrow,parquet]"
    )
    ap.add_argument(
        "--compression",
        choices=node_codecs(),
        default=None,
        help="node topics' segment compression [the node's default]",
    )
    ap.add_argument("--clients", "--writers", type=int, default=4, help="writer threads [4]")
    ap.add_argument("--partitions", type=int, default=4, help="partitions p0.. [4]")
    ap.add_argument("--rows-per-batch", type=int, default=10_000)
    ap.add_argument(
        "--read-rows",
        type=int,
        default=24_000_000,
        help="rows to read back after each phase, from the start of each partition, the same\n"
        "for every system (fewer if fewer were acknowledged); 0: all [24,000,000]; 8M rows\n"
        "took 1-2 s on every system, too short for the read ratio to settle",
    )
    ap.add_argument("--page-size", type=int, default=10_000, help="rows per read page [10000]")
    ap.add_argument(
        "--cold-reads",
        action="store_true",
        help="drop the page cache (sync, then /proc/sys/vm/drop_caches; root only) before\n"
        "each read, so that every system reads from the disk: plateau writes through the\n"
        "page cache and reads the rows it just wrote from memory, the node writes O_DIRECT",
    )
    ap.add_argument("--client", choices=CLIENTS, default="stdlib", help="HTTP client [stdlib]")
    ap.add_argument(
        "--data-root", type=Path, default=default_data_root(), help="where phases' temp dirs go"
    )
    ap.add_argument(
        "--ceiling-seconds",
        type=float,
        default=4.0,
        help="seconds of each disk-ceiling run after each pair (bench/disk_ceiling.py);\n"
        "0: none [4]",
    )
    ap.add_argument(
        "--ceiling-gaps-ms",
        default=",".join(f"{g:g}" for g in disk_ceiling.DEFAULT_GAPS_MS),
        help="a writer's time between its appends in the disk-ceiling runs [0,1,2,4]",
    )
    add_node_env(ap)
    args = ap.parse_args(argv)
    args.node_env = node_env(ap, args.node_env)
    try:
        args.ceiling_gaps = disk_ceiling.parse_gaps(args.ceiling_gaps_ms)
    except ValueError as exc:
        ap.error(f"--ceiling-gaps-ms: {exc}")
    if args.cold_reads and not os.access(DROP_CACHES, os.W_OK):
        ap.error(f"--cold-reads: {DROP_CACHES} is not writable (run as root)")
    if args.ceiling_seconds < 0:
        ap.error("--ceiling-seconds must be >= 0")
    topics = [t.strip() for t in args.node_topics.split(",") if t.strip()]
    if not topics or any(t not in ("arrow", "parquet") for t in topics):
        ap.error(f"--node-topics: a comma-separated list of arrow, parquet; got {args.node_topics}")
    args.systems = [RS, *(f"node-{t}" for t in topics)]
    if args.pairs < 1 or args.duration <= 0 or args.clients < 1 or args.partitions < 1:
        ap.error("--pairs, --duration, --clients and --partitions must be positive")
    if not args.against_plateau_rs.is_file():
        ap.error(f"--against-plateau-rs: {args.against_plateau_rs} is not a file")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    workloads = list(WORKLOADS) if args.workload == "both" else [args.workload]
    now = int(time.time() * 1000)
    result: dict[str, Any] = {
        "bench": "ingest_vs_rs",
        "plateau_rs": str(args.against_plateau_rs),
        "duration": args.duration,
        "pairs": args.pairs,
        "order": args.systems,
        "clients": args.clients,
        "client": args.client,
        "partitions": args.partitions,
        "rows_per_batch": args.rows_per_batch,
        "page_size": args.page_size,
        "cold_reads": args.cold_reads,
        "read_rows": args.read_rows,
        "compression": args.compression or "default",
        "workloads": {},
    }
    for workload in workloads:
        log(f"{workload}: generating {DISTINCT_BODIES} bodies of {args.rows_per_batch} rows")
        bodies = make_workload_bodies(workload, DISTINCT_BODIES, args.rows_per_batch, now)
        raw = sum(len(b) for b in bodies) / len(bodies) / args.rows_per_batch
        ratios = codec_ratios(bodies[:4])
        log(f"{workload}: {raw:.1f} body bytes/row; compressed/raw {ratios}")
        runs: dict[str, list[dict[str, Any]]] = {s: [] for s in args.systems}
        ceilings: list[list[dict[str, Any]]] = []
        for pair in range(args.pairs):
            for system in args.systems:
                runs[system].append(run_one(args, system, workload, pair, bodies))
            rs = runs[RS][-1]["rows_per_s"]
            if args.ceiling_seconds:
                ceilings.append(ceiling(args, bodies, raw, rs, workload, pair))
            log(
                f"{workload} pair {pair}: "
                + ", ".join(
                    f"{s} {runs[s][-1]['rows_per_s'] / rs:.2f}x" for s in args.systems[1:] if rs
                )
            )
        result["workloads"][workload] = {
            "raw_bytes_per_row": round(raw, 2),
            "codec_ratio": ratios,
            "systems": {s: summarize(r) for s, r in runs.items()},
            "vs_plateau": compare(runs, raw),
            "disk_ceiling": summarize_ceilings(ceilings),
        }
    result["targets"] = targets(result)
    result["all_pass"] = all(t["pass"] for t in result["targets"].values())
    return result


if __name__ == "__main__":
    handle_signals()
    emit(main())
