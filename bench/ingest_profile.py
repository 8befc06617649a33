"""Where the node's ingest CPU goes: py-spy under issue 28's load, per acknowledged MiB.

    python bench/ingest_profile.py [--format arrow|parquet] [--workload incompressible|compressible]
        [--duration 15] [--rate-hz 250] [--python-only] [--gil] [--clients 4]
        [--partitions 4] [--keep-raw FILE]

Starts the node (``testkit.nodeproc.NodeProcess`` at its defaults: fsync per
acknowledged append), creates one topic of ``--format``, and runs the driver of
bench/ingest_vs_rs.py (``run_phase``: ``--clients`` keep-alive writers in a
closed loop, pre-encoded Arrow IPC files of 10,000 rows of a bench/workloads.py
workload, partitions ``p0``..). After a warm-up, ``py-spy record --native
--threads -f raw`` samples the node for whole seconds while the load runs;
the node's CPU time (psutil, all threads) and ``plateau_appended_rows_total``
are read just before and after that window.

Every sampled stack is put in one stage by bench/pyspy_stages.py (its
docstring has the rules): body, parse, validation, compression, write, fsync,
seal, http, bookkeeping, other; waits (``idle``, ``gil_wait``) apart.

What the numbers mean, and their limits:

* py-spy's default (``--idle`` not given) is meant to drop idle threads, but
  its guess failed here (idle pool workers and uvloop's ``epoll_pwait`` came
  out active), so pyspy_stages.py recognizes the waits itself and counts them
  apart. A thread blocked *in* a syscall (``fsync``, ``writev``, a page fault)
  still counts as active: a stage's ``active_s`` (samples / rate) is
  thread-seconds in it on CPU *or blocked in the kernel*, and
  ``active_ms_per_acked_mib`` the same per MiB. For ``fsync`` that is mostly
  the wait on the disk, not CPU.
* ``cpu_s`` / ``cpu_ms_per_acked_mib`` are estimates: the node's measured CPU
  time over the window (psutil, all threads, user + system) shared out by each
  stage's share of the busy samples, fsync samples counted as CPU;
  ``cpu_ms_per_acked_mib_fsync_blocked`` shares it out as if every fsync
  sample were a wait. The truth lies between the two; ``cpu_per_active``
  (node CPU / busy thread-seconds) is 1.0 when nothing sampled was blocked.
* py-spy with ``--native`` stops the node for each sample, needs about a
  second to attach and load symbols (counted in the window, unsampled), and
  takes CPU on the same 2 cores (``profiler_cpu_cores``): a profiled run's
  rows/s are far lower than bench/ingest_vs_rs.py's, and the shares are those
  of a slowed node. Compare stages with each other, not the rates with other
  benches. ``--python-only`` (no native frames, ``--nonblocking``) costs much
  less but sees lz4, fsync and uvloop's C only as the Python call above them,
  and no GIL waits.
* acknowledged MiB = rows acknowledged in the window (``plateau_appended_rows_total``)
  x the body's raw bytes per row (the uncompressed Arrow IPC file as sent) / 2**20.

Progress goes to stderr; the last stdout line is one JSON object (see
bench/README.md for every field).
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testkit.nodeproc

from common import (
    NODE_START_S,
    NODE_STOP_S,
    GiB,
    MiB,
    create_topic,
    default_data_root,
    disk_budget,
    emit,
    handle_signals,
    histogram_delta,
    log,
    scrape_metrics,
    usage,
)
from ingest import STAGES, Phase, run_phase
from pyspy_stages import read_profile, stage_table
from testkit.nodeproc import NodeProcess
from workloads import WORKLOADS, make_workload_bodies

TOPIC = "bench"
PREFIX = "p"
DISTINCT_BODIES = 32
ROWS_METRIC = f'plateau_appended_rows_total{{topic="{TOPIC}"}}'


def py_spy_binary() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--format", choices=["arrow", "parquet"], default="arrow")
    ap.add_argument("--workload", choices=WORKLOADS, default="incompressible")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds of load [15]")
    ap.add_argument("--rate-hz", type=int, default=250, help="py-spy samples a second [250]")
    ap.add_argument("--clients", "--writers", type=int, default=4, help="writer threads [4]")
    ap.add_argument("--partitions", type=int, default=4, help="partitions p0.. [4]")
    ap.add_argument("--rows-per-batch", type=int, default=10_000)
    ap.add_argument("--client", default="stdlib", help="HTTP client of the driver [stdlib]")
    ap.add_argument(
        "--python-only",
        action="store_true",
        help="py-spy without --native and with --nonblocking: far less overhead, no native\n"
        "frames (lz4, fsync, GIL waits are seen only as the Python call that made them)",
    )
    ap.add_argument(
        "--gil",
        action="store_true",
        help="sample only the thread holding the GIL (py-spy --gil): where the node's\n"
        "Python time goes, the resource its appends queue for",
    )
    ap.add_argument("--keep-raw", type=Path, default=None, help="keep py-spy's raw output here")
    ap.add_argument("--data-root", type=Path, default=default_data_root())
    args = ap.parse_args(argv)
    if args.duration < 3 or args.rate_hz < 1 or args.clients < 1 or args.partitions < 1:
        ap.error("--duration must be at least 3; --rate-hz, --clients, --partitions positive")
    args.py_spy = py_spy_binary()
    if args.py_spy is None:
        ap.error("py-spy not found: it is in the dev group (tools/bootstrap.sh installs it)")
    return args


def profile_window(args: argparse.Namespace) -> tuple[float, int]:
    """(warm-up, whole seconds py-spy records): inside the load, with a margin at the end."""
    warmup = min(2.0, args.duration * 0.2)
    return warmup, max(1, int(args.duration - warmup - 0.7))


def run(args: argparse.Namespace, bodies: list[bytes], raw: Path) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="plateau-profile-", dir=args.data_root))
    data_dir = root / "data"
    data_dir.mkdir()
    budget, capacity = disk_budget(data_dir, 1024 * GiB)
    node = NodeProcess(data_dir, args=["--capacity-bytes", str(capacity)])
    try:
        node.start(timeout=NODE_START_S)
        create_topic(
            node.url,
            TOPIC,
            {"segment": {"format": args.format}, "retention": {"max_bytes": budget}},
        )
        phases: list[Phase] = []
        failed: list[BaseException] = []

        def load() -> None:
            try:
                phases.append(
                    run_phase(
                        f"{args.workload} {args.format}",
                        args.client,
                        args.format,
                        node.url,
                        node.pid,
                        bodies,
                        args.rows_per_batch,
                        args.clients,
                        args.partitions,
                        args.duration,
                        None,
                        topic=TOPIC,
                        partition_prefix=PREFIX,
                    )
                )
            except BaseException as exc:  # re-raised in the main thread
                failed.append(exc)

        driver = threading.Thread(target=load, name="load", daemon=True)
        driver.start()
        warmup, seconds = profile_window(args)
        time.sleep(0.2 + warmup)  # run_phase starts its writers 0.2 s after it is called
        metrics_before = scrape_metrics(node.url)
        cpu_before = usage(node.pid).cpu_s
        started = time.perf_counter()
        command = [args.py_spy, "record", "--pid", str(node.pid), "--threads"]
        command += ["--nonblocking"] if args.python_only else ["--native"]
        command += ["--gil"] if args.gil else []
        command += ["-r", str(args.rate_hz), "-f", "raw", "-d", str(seconds), "-o", str(raw)]
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        spy = subprocess.run(command, capture_output=True, text=True, check=False)
        window = time.perf_counter() - started
        spent = resource.getrusage(resource.RUSAGE_CHILDREN)  # py-spy, once waited for
        profiler_cpu = spent.ru_utime + spent.ru_stime - children.ru_utime - children.ru_stime
        cpu = usage(node.pid).cpu_s - cpu_before
        metrics_after = scrape_metrics(node.url)
        driver.join()
        if failed:
            raise failed[0]
        if spy.returncode != 0 or not raw.is_file():
            raise RuntimeError(f"py-spy failed ({spy.returncode}): {spy.stderr.strip()[-2000:]}")
        spy_note = spy.stderr.strip().splitlines() + spy.stdout.strip().splitlines()
        rows = metrics_after.get(ROWS_METRIC, 0.0) - metrics_before.get(ROWS_METRIC, 0.0)
        metric_stages = {
            s: histogram_delta(
                metrics_before, metrics_after, "plateau_append_stage_seconds", f'stage="{s}"'
            )
            for s in STAGES
        }
    except BaseException:
        log(f"node log tail:\n{node.log()}")
        raise
    finally:
        with contextlib.suppress(Exception):
            node.stop(timeout=NODE_STOP_S)
        shutil.rmtree(root, ignore_errors=True)
    return {
        "phase": phases[0],
        "window_s": window,
        "node_cpu_s": cpu,
        "profiler_cpu_s": profiler_cpu,
        "rows": rows,
        "recorded_s": seconds,
        "py_spy": next((n for n in spy_note if "Samples" in n), spy_note[-1] if spy_note else ""),
        "metric_stages": {
            s: {"mean_ms": round(h["mean_ms"], 3), "count": h["count"]}
            for s, h in metric_stages.items()
        },
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    now = int(time.time() * 1000)
    log(f"{args.workload}: generating {DISTINCT_BODIES} bodies of {args.rows_per_batch} rows")
    bodies = make_workload_bodies(args.workload, DISTINCT_BODIES, args.rows_per_batch, now)
    raw_bytes_per_row = sum(len(b) for b in bodies) / len(bodies) / args.rows_per_batch
    with tempfile.TemporaryDirectory(prefix="plateau-pyspy-") as tmp:
        raw = args.keep_raw or Path(tmp) / "profile.txt"
        got = run(args, bodies, raw)
        with raw.open() as f:
            profile = read_profile(f, native=not args.python_only)
    phase: Phase = got["phase"]
    acked_mib = got["rows"] * raw_bytes_per_row / MiB
    active_s = profile.busy / args.rate_hz
    stages = stage_table(profile, args.rate_hz, got["node_cpu_s"], acked_mib)
    width = max(len(s) for s in stages)
    log(
        f"window {got['window_s']:.1f} s: {got['rows'] / got['window_s']:,.0f} rows/s, node CPU "
        f"{got['node_cpu_s'] / got['window_s']:.2f} cores, py-spy "
        f"{got['profiler_cpu_s'] / got['window_s']:.2f} cores; CPU ms per acked MiB "
        "(fsync samples as CPU / as waits), active ms per acked MiB:"
    )
    for stage, v in stages.items():
        log(
            f"{stage:>{width}}: {v['share']:6.1%}  {v['cpu_ms_per_acked_mib']:6.2f} / "
            f"{v['cpu_ms_per_acked_mib_fsync_blocked']:6.2f}  {v['active_ms_per_acked_mib']:7.2f}"
        )
    return {
        "bench": "ingest_profile",
        "format": args.format,
        "workload": args.workload,
        "duration": args.duration,
        "rate_hz": args.rate_hz,
        "native": not args.python_only,
        "gil": args.gil,
        # with --gil each sample is of the one thread holding the GIL: the share of the
        # recorded time it was held at all
        "gil_held_share": (
            round(
                (profile.busy + profile.samples.get("idle", 0))
                / (args.rate_hz * got["recorded_s"]),
                3,
            )
            if args.gil
            else None
        ),
        "clients": args.clients,
        "partitions": args.partitions,
        "rows_per_batch": args.rows_per_batch,
        "raw_bytes_per_row": round(raw_bytes_per_row, 2),
        "rows_per_s": round(phase.rows_per_s),
        "p99_ms": round(phase.p99_ms, 1),
        "errors": phase.errors,
        "rejected_429": phase.rejected_429,
        "window_s": round(got["window_s"], 2),
        "window_rows": int(got["rows"]),
        "window_rows_per_s": round(got["rows"] / got["window_s"]) if got["window_s"] else 0,
        "acked_mib": round(acked_mib, 1),
        "node_cpu_s": round(got["node_cpu_s"], 2),
        "node_cpu_cores": round(got["node_cpu_s"] / got["window_s"], 2),
        "node_cpu_ms_per_acked_mib": (
            round(got["node_cpu_s"] * 1000 / acked_mib, 3) if acked_mib else 0.0
        ),
        "profiler_cpu_cores": round(got["profiler_cpu_s"] / got["window_s"], 2),
        "samples": profile.busy,
        "gil_wait_samples": profile.samples.get("gil_wait", 0),
        "idle_samples": profile.samples.get("idle", 0),
        "active_s": round(active_s, 2),
        "cpu_per_active": round(got["node_cpu_s"] / active_s, 3) if active_s else None,
        "stages": stages,
        "other_top": dict(profile.other_leaves.most_common(8)),
        "metric_stages": got["metric_stages"],
        "py_spy": got["py_spy"],
        "raw": str(args.keep_raw) if args.keep_raw else None,
    }


if __name__ == "__main__":
    handle_signals()
    emit(main())
