"""What a Python server that fsyncs every append can reach, against plateau's Rust server.

    python bench/ingest_floor.py --against-plateau-rs BINARY [--duration 15] [--pairs 2]
        [--workload incompressible|compressible] [--clients 4] [--partitions 4] [--no-node]

Issue 28 asks the node (fsync per acknowledged append) for 1.3x plateau's
ingest rate (acknowledged from memory). bench/ingest_vs_rs.py measures what
the disk allows (``disk_ceiling``); this measures what the server's
architecture allows, with servers that do nothing of the node's work (no
parsing, validation, bookkeeping or metrics), only what any such server must:
receive the body, write it with O_DIRECT, fdatasync, reply.

- ``floor-uvicorn`` (bench/floor_uvicorn.py): the node's own stack, uvicorn
  with httptools and uvloop, an ASGI app that collects the body, one hop to a
  thread for the write and fdatasync.
- ``floor-threaded`` (bench/floor_threaded.py): no event loop; a thread per
  connection on blocking sockets reads each body with ``recv_into`` straight
  into a page-aligned buffer and writes and fdatasyncs it itself.
- ``node-arrow``: the node at its defaults, one arrow topic (as in
  bench/ingest_vs_rs.py, without the read-back): plain appends on a thread per
  connection (``server/append_front.py``).
- ``node-arrow-loop``: the same node with ``server.threaded_appends: false``,
  every append through the event loop.

The same driver as bench/ingest_vs_rs.py (``run_phase``) runs each for
``--duration`` seconds, in interleaved rounds (``rs`` first in each), and each
system's rate is reported against plateau's in the same round. Progress goes
to stderr; the last stdout line is one JSON object (bench/README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testkit.nodeproc

from common import (
    NODE_START_S,
    NODE_STOP_S,
    GiB,
    create_topic,
    default_data_root,
    disk_budget,
    emit,
    handle_signals,
    log,
)
from ingest import Phase, run_phase
from rs_server import free_port, start_rs
from testkit.nodeproc import NodeProcess
from workloads import WORKLOADS, make_workload_bodies

BENCH = Path(__file__).resolve().parent
FLOORS = {
    "floor-uvicorn": BENCH / "floor_uvicorn.py",
    "floor-threaded": BENCH / "floor_threaded.py",
}
TOPIC = "bench"
PREFIX = "p"  # partitions p0, p1, ...: plateau-rs refuses digit-only names
DISTINCT_BODIES = 32
START_S = 15.0


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"floor server exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"floor server not listening on {port} after {START_S} s")


@contextlib.contextmanager
def serving(args: argparse.Namespace, system: str, root: Path) -> Iterator[tuple[str, int]]:
    """The system running on loopback in ``root``: its URL and PID."""
    if system == "rs":
        rs = start_rs(args.against_plateau_rs, root / "rs")
        try:
            yield rs.url, rs.pid
        finally:
            rs.stop()
    elif system in FLOORS:
        port = free_port()
        (root / "files").mkdir()
        cmd = [sys.executable, str(FLOORS[system]), str(root / "files"), str(port)]
        proc = subprocess.Popen(cmd)
        try:
            _wait_listening(port, proc)
            yield f"http://127.0.0.1:{port}", proc.pid
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    else:
        data_dir = root / "data"
        data_dir.mkdir()
        budget, capacity = disk_budget(data_dir, 1024 * GiB)
        env = {}
        if system == "node-arrow-loop":
            env["PLATEAU_SERVER__THREADED_APPENDS"] = "false"
        node = NodeProcess(data_dir, args=["--capacity-bytes", str(capacity)], env=env)
        node.start(timeout=NODE_START_S)
        try:
            segment = {"format": "arrow"}
            create_topic(node.url, TOPIC, {"segment": segment, "retention": {"max_bytes": budget}})
            yield node.url, node.pid
        finally:
            node.stop(timeout=NODE_STOP_S)


def run_one(args: argparse.Namespace, system: str, rnd: int, bodies: list[bytes]) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix=f"plateau-floor-{system}-", dir=args.data_root))
    try:
        with serving(args, system, root) as (url, pid):
            phase: Phase = run_phase(
                f"round {rnd} {system}",
                "stdlib",
                "arrow",
                url,
                pid,
                bodies,
                args.rows_per_batch,
                args.clients,
                args.partitions,
                args.duration,
                None,
                topic=TOPIC,
                partition_prefix=PREFIX,
            )
            log(phase.summary())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "round": rnd,
        "rows_per_s": round(phase.rows_per_s),
        "p50_ms": round(phase.p50_ms, 1),
        "p99_ms": round(phase.p99_ms, 1),
        "cpu_cores": round(phase.node_cpu_s / phase.elapsed_s, 2) if phase.elapsed_s else 0,
        "errors": phase.errors,
        "first_error": phase.first_error,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--against-plateau-rs", type=Path, required=True, metavar="BINARY")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds a phase [15]")
    ap.add_argument("--pairs", type=int, default=2, help="interleaved rounds [2]")
    ap.add_argument("--workload", choices=list(WORKLOADS), default="incompressible")
    ap.add_argument("--clients", "--writers", type=int, default=4, help="writer threads [4]")
    ap.add_argument("--partitions", type=int, default=4, help="partitions p0.. [4]")
    ap.add_argument("--rows-per-batch", type=int, default=10_000)
    ap.add_argument("--no-node", action="store_true", help="leave out the node")
    ap.add_argument("--data-root", type=Path, default=default_data_root())
    args = ap.parse_args(argv)
    if args.pairs < 1 or args.duration <= 0 or args.clients < 1 or args.partitions < 1:
        ap.error("--pairs, --duration, --clients and --partitions must be positive")
    if not args.against_plateau_rs.is_file():
        ap.error(f"--against-plateau-rs: {args.against_plateau_rs} is not a file")
    nodes = [] if args.no_node else ["node-arrow", "node-arrow-loop"]
    args.systems = ["rs", *FLOORS, *nodes]
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    now = int(time.time() * 1000)
    bodies = make_workload_bodies(args.workload, DISTINCT_BODIES, args.rows_per_batch, now)
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in args.systems}
    for rnd in range(args.pairs):
        for system in args.systems:
            runs[system].append(run_one(args, system, rnd, bodies))
        rs = runs["rs"][-1]["rows_per_s"]
        for system in args.systems[1:]:
            runs[system][-1]["vs_plateau"] = round(runs[system][-1]["rows_per_s"] / rs, 3)
        log(
            f"round {rnd}: "
            + ", ".join(f"{s} {runs[s][-1]['vs_plateau']}x" for s in args.systems[1:])
        )
    systems: dict[str, Any] = {}
    for system, got in runs.items():
        systems[system] = {
            "rows_per_s_median": round(statistics.median(r["rows_per_s"] for r in got)),
            "p50_ms_median": statistics.median(r["p50_ms"] for r in got),
            "runs": got,
        }
        if system != "rs":
            systems[system]["vs_plateau_median"] = round(
                statistics.median(r["vs_plateau"] for r in got), 3
            )
    return {
        "bench": "ingest_floor",
        "plateau_rs": str(args.against_plateau_rs),
        "workload": args.workload,
        "duration": args.duration,
        "pairs": args.pairs,
        "clients": args.clients,
        "partitions": args.partitions,
        "rows_per_batch": args.rows_per_batch,
        "systems": systems,
    }


if __name__ == "__main__":
    handle_signals()
    emit(main())
