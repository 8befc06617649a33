"""A memory cgroup made for one node process: a real memory limit, as a pod's.

cgroup v2 (kind's nodes, most hosts today) or v1 (this project's CI machine).
The group is created under the cgroup of the current process, so it sits
inside whatever limit that already has, and removed at the end. The node is
moved into it before it execs (``enter`` as ``preexec_fn``), so it reads the
limit from ``/proc/self/cgroup`` as it would in a container.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own_path(controller: str | None) -> str:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if (controller is None and controllers == "") or (
            controller is not None and controller in controllers.split(",")
        ):
            return path.lstrip("/")
    return ""


class MemoryCgroup:
    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self.v2 = (ROOT / "cgroup.controllers").exists()
        name = f"plateau-test-{uuid.uuid4().hex[:12]}"
        if self.v2:
            parent = ROOT / _own_path(None)
            self.path = parent / name
            self.path.mkdir()
            (self.path / "memory.max").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):
                (self.path / "memory.swap.max").write_text("0")
        else:
            parent = ROOT / "memory" / _own_path("memory")
            if not parent.is_dir():
                parent = ROOT / "memory"
            self.path = parent / name
            self.path.mkdir()
            (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):  # only with swap accounting
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))

    @staticmethod
    def available() -> str | None:
        """Why a memory cgroup cannot be made here, or None."""
        if os.geteuid() != 0:
            return "making a memory cgroup needs root"
        if (ROOT / "cgroup.controllers").exists():
            controllers = (ROOT / _own_path(None) / "cgroup.controllers").read_text()
            return None if "memory" in controllers.split() else "no memory controller (v2)"
        return None if (ROOT / "memory").is_dir() else "no memory controller (v1)"

    def enter(self) -> None:
        """Move the calling process into the group (used as ``preexec_fn``)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def oom_kills(self) -> int:
        events = self.path / ("memory.events" if self.v2 else "memory.oom_control")
        for line in events.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        for _ in range(50):  # the killed or stopped process leaves the group a moment later
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)
