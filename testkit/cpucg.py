"""A cpuset cgroup: processes confined to chosen CPUs, so that a benchmark can keep a
co-located server (the S3 server) off the CPU the node runs on.

Why: on a 2-core machine the S3 server that stands in for object storage elsewhere
takes CPU the node would otherwise have; a ratio "archiving on / off" then measures
the server as much as the node. With the node and its load driver on one CPU in
both phases and the server on the other, the node has the same CPU with archiving
on and off, as it would with the server on another machine.

Processes are moved whole (``cgroup.procs``); a child started by a process inside
the group starts inside it. cgroup v1 (this project's CI machine) or v2.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from testkit.memcg import ROOT, _own_path


class CpuSet:
    def __init__(self, cpus: str) -> None:
        self.cpus = cpus
        self.v2 = (ROOT / "cgroup.controllers").exists()
        name = f"plateau-bench-cpus-{uuid.uuid4().hex[:12]}"
        if self.v2:
            self.parent = ROOT / _own_path(None)
            with contextlib.suppress(OSError):  # already enabled, or not allowed: mkdir says
                (self.parent / "cgroup.subtree_control").write_text("+cpuset")
            self.path = self.parent / name
            self.path.mkdir()
        else:
            self.parent = ROOT / "cpuset" / _own_path("cpuset")
            self.path = self.parent / name
            self.path.mkdir()
            # v1 needs both before a task may join
            mems = (self.parent / "cpuset.mems").read_text().strip()
            (self.path / "cpuset.mems").write_text(mems)
        (self.path / "cpuset.cpus").write_text(cpus)

    @staticmethod
    def available() -> str | None:
        """Why a cpuset cgroup cannot be made here, or None."""
        if os.geteuid() != 0:
            return "making a cpuset cgroup needs root"
        if (os.cpu_count() or 1) < 2:
            return "one CPU: nothing to split"
        if (ROOT / "cgroup.controllers").exists():
            controllers = (ROOT / _own_path(None) / "cgroup.controllers").read_text()
            return None if "cpuset" in controllers.split() else "no cpuset controller (v2)"
        return None if (ROOT / "cpuset").is_dir() else "no cpuset controller (v1)"

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the group."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def release(self, pid: int) -> None:
        """Move ``pid`` back to the group the caller started in."""
        with contextlib.suppress(OSError):  # it may have exited
            (self.parent / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            for pid in (self.path / "cgroup.procs").read_text().split():
                self.release(int(pid))
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


@contextlib.contextmanager
def loopback_receive_on(cpus: range) -> Iterator[None]:
    """Process loopback's receive side (the kernel's TCP receive work, a softirq) on
    ``cpus`` while inside, then restore: without it, what the S3 server receives is
    processed on the sender's CPU, so the server's network work lands on the node's
    CPU though the server itself runs elsewhere (receive packet steering, ``rps_cpus``
    of ``lo``'s queues; host-wide while inside, restored on the way out)."""
    queues = sorted(Path("/sys/class/net/lo/queues").glob("rx-*/rps_cpus"))
    before = [q.read_text().strip() for q in queues]
    mask = f"{sum(1 << c for c in cpus):x}"
    try:
        for q in queues:
            q.write_text(mask)
        yield
    finally:
        for q, value in zip(queues, before, strict=True):
            with contextlib.suppress(OSError):
                q.write_text(value)
