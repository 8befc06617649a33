"""Two builds of the node, or one build under two environments, in interleaved pairs.

    python bench/ab_nodes.py --base REV [--head REV] [--pairs 3] [--duration 10]
        [--workload incompressible|compressible] [--format arrow|parquet]
        [--clients 4] [--partitions 4] [--rows-per-batch 10000]
        [--base-env KEY=VALUE ...] [--head-env KEY=VALUE ...]
        [--base-data-root DIR] [--head-data-root DIR]

Why: this machine's speed drifts by 20% and more within minutes, so a change is
judged by ratios of runs made side by side, never against a figure from
another run. ``--base`` and ``--head`` name commits (``.``: the working tree,
the default for ``--head``); each commit other than ``.`` is checked out in a
temporary git worktree, removed at the end. ``--base-env`` / ``--head-env``
give one side extra environment (a setting such as
``PLATEAU_SERVER__GIL_SWITCH_INTERVAL_MS=5``), so one build under two
configurations is an A/B too; ``--base . --head .`` with no env is an A/A run,
which shows the noise. ``--base-data-root`` / ``--head-data-root`` put each side's
data directories on its own filesystem (mount options, filesystems, disks), so
one build on two filesystems is an A/B too.

Each phase starts a fresh node (``testkit.nodeproc.NodeProcess`` with the
side's tree on its ``PYTHONPATH``, at its defaults: fsync per acknowledged
append) on a fresh data directory, creates one topic of ``--format``, and runs
bench/ingest.py's closed-loop driver (``run_phase``) with pre-encoded
bench/workloads.py bodies; then the node stops and its directory is deleted.
Pairs alternate their order (base first, then head first), so a steady drift
falls on both sides. Every pair's head/base ratio is reported, and their median.

Progress goes to stderr; the last stdout line is one JSON object (see
bench/README.md for every field).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
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
    median_known,
    node_env,
    pair_ratios,
)
from ingest import run_phase, stage_fields
from testkit.nodeproc import ROOT, NodeProcess
from workloads import WORKLOADS, make_workload_bodies

WORKING_TREE = "."
TOPIC = "ab"
PREFIX = "p"
START_MS = 1_795_000_000_000
BODIES = 32
GIT = ("git", "-C", str(ROOT))
RATIO_KEYS = ("rows_per_s", "p50_ms", "p99_ms", "cpu_us_per_row")


@dataclass
class Side:
    """One side of the comparison: a commit (or the working tree) and its extra environment."""

    name: str
    rev: str
    env: dict[str, str]
    commit: str = ""  # the resolved commit ("" for the working tree)
    data_root: Path | None = None  # where its data directories go (None: ``--data-root``)
    root: Path = ROOT
    runs: list[dict[str, Any]] = field(default_factory=list)


def resolve(ap: argparse.ArgumentParser, rev: str) -> str:
    """The commit ``rev`` names; not a commit of this repository is a usage error (exit 2)."""
    if rev == WORKING_TREE:
        return ""
    out = subprocess.run(
        [*GIT, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        ap.error(f"--base/--head: {rev!r} is not a commit of {ROOT}")
    return out.stdout.strip()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--base", required=True, help="commit for side A ('.': the working tree)")
    ap.add_argument("--head", default=WORKING_TREE, help="commit for side B [the working tree]")
    ap.add_argument("--base-env", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--head-env", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per phase [10]")
    ap.add_argument("--workload", choices=WORKLOADS, default="compressible")
    ap.add_argument("--format", choices=("arrow", "parquet"), default="arrow")
    ap.add_argument("--clients", "--writers", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rows-per-batch", type=int, default=10_000)
    ap.add_argument("--data-root", type=Path, default=default_data_root())
    ap.add_argument("--base-data-root", type=Path, help="side A's data directories [--data-root]")
    ap.add_argument("--head-data-root", type=Path, help="side B's data directories [--data-root]")
    args = ap.parse_args(argv)
    for name in ("pairs", "clients", "partitions", "rows_per_batch"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.duration <= 0:
        ap.error("--duration must be positive")
    for name in ("data_root", "base_data_root", "head_data_root"):
        path = getattr(args, name)
        if path is not None and not path.is_dir():
            ap.error(f"--{name.replace('_', '-')}: {path} is not a directory")
    args.sides = [
        Side(
            name,
            getattr(args, name),
            node_env(ap, getattr(args, f"{name}_env")),
            resolve(ap, getattr(args, name)),
            getattr(args, f"{name}_data_root"),
        )
        for name in ("base", "head")
    ]
    return args


@contextlib.contextmanager
def checked_out(sides: list[Side], under: Path) -> Iterator[None]:
    """A temporary worktree per commit named (one per distinct commit), removed after."""
    trees: dict[str, Path] = {}
    try:
        for side in sides:
            if not side.commit:
                continue
            if side.commit not in trees:
                tree = Path(tempfile.mkdtemp(prefix=f"ab-{side.commit[:8]}-", dir=under))
                subprocess.run(
                    [*GIT, "worktree", "add", "--detach", "--force", str(tree), side.commit],
                    check=True,
                    capture_output=True,
                )
                trees[side.commit] = tree
            side.root = trees[side.commit]
        yield
    finally:
        for tree in trees.values():
            subprocess.run(
                [*GIT, "worktree", "remove", "--force", str(tree)],
                capture_output=True,
            )
            shutil.rmtree(tree, ignore_errors=True)


def run_side(args: argparse.Namespace, side: Side, pair: int, bodies: list[bytes]) -> None:
    """One phase on a fresh node of ``side``'s tree; appends its figures to ``side.runs``."""
    under = side.data_root or args.data_root
    root = Path(tempfile.mkdtemp(prefix=f"plateau-ab-{side.name}-", dir=under))
    try:
        data_dir = root / "data"
        data_dir.mkdir()
        budget, capacity = disk_budget(data_dir, 1024 * GiB)
        node = NodeProcess(
            data_dir, args=["--capacity-bytes", str(capacity)], env=side.env, root=side.root
        )
        node.start(timeout=NODE_START_S)
        try:
            create_topic(
                node.url,
                TOPIC,
                {"segment": {"format": args.format}, "retention": {"max_bytes": budget}},
            )
            phase = run_phase(
                f"pair {pair} {side.name}",
                "stdlib",
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
        except BaseException:
            log(f"{side.name} log tail:\n{node.log()}")
            raise
        finally:
            with contextlib.suppress(Exception):
                node.stop(timeout=NODE_STOP_S)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    side.runs.append(
        {
            "pair": pair,
            "rows_per_s": round(phase.rows_per_s),
            "p50_ms": round(phase.p50_ms, 1),
            "p99_ms": round(phase.p99_ms, 1),
            "cpu_cores": round(phase.node_cpu_s / phase.elapsed_s, 2),
            "cpu_us_per_row": round(phase.node_cpu_s / max(phase.rows, 1) * 1e6, 4),
            "rejected_429": phase.rejected_429,
            "errors": phase.errors,
            "first_error": phase.first_error,
            **stage_fields(phase, ""),
        }
    )


def order(pair: int, sides: list[Side]) -> list[Side]:
    """Base first in even pairs, head first in odd ones: a drift falls on both sides."""
    return sides if pair % 2 == 0 else sides[::-1]


def compare(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> dict[str, Any]:
    """Per pair head/base of each figure in ``RATIO_KEYS``, and the median of each."""
    ratios = {key: pair_ratios(head, base, key) for key in RATIO_KEYS}
    medians = {key: median_known(list(r)) for key, r in ratios.items()}
    return {"ratios": ratios, "median": medians}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    handle_signals()
    sides: list[Side] = args.sides
    bodies = make_workload_bodies(args.workload, BODIES, args.rows_per_batch, START_MS)
    with checked_out(sides, args.data_root):
        for pair in range(args.pairs):
            for side in order(pair, sides):
                run_side(args, side, pair, bodies)
    base, head = sides
    result: dict[str, Any] = {
        "bench": "ab_nodes",
        "workload": args.workload,
        "format": args.format,
        "duration_s": args.duration,
        "clients": args.clients,
        "partitions": args.partitions,
        "rows_per_batch": args.rows_per_batch,
        **{
            s.name: {
                "rev": s.rev,
                "commit": s.commit or None,
                "env": s.env,
                "data_root": str(s.data_root or args.data_root),
                "runs": s.runs,
            }
            for s in sides
        },
        "head_vs_base": compare(base.runs, head.runs),
    }
    log(f"head/base by pair: {result['head_vs_base']['ratios']}")
    emit(result)
    return result


if __name__ == "__main__":
    main()
