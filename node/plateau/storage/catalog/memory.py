"""One node-wide memory budget: open segments, the decoded read cache, append bodies.

Why: an open segment keeps its rows in memory until it is sealed, so without
a bound memory grows with partitions x ``segment.max_bytes`` (48 writers on
64 partitions reached 4.2 GB and the node was OOM-killed under a 1.5 GiB
limit). The budget is split once, at start, into three parts, each enforced
where its memory is taken, so their sum never passes the budget:

* ``bodies``: append bodies being received and decoded, at most
  ``min(server.max_inflight_bytes, budget / 4)``; past it an append waits for
  room, in arrival order, up to ``server.inflight_wait_seconds``, then gets 429,
  before its body is read (``server.inflight``).
* ``read_cache``: decoded row groups and batches of sealed segments, at most
  ``min(storage.read_cache_bytes, budget / 4)``; least recently used out.
* ``archive_cache`` (only with an archive): row groups read back from the
  object-storage archive for reads below the local disk, at most
  ``min(storage.archive.read_cache_bytes, budget / 8)``; least recently used out.
* ``open_segments``: the rest. Rows of open segments (and each one's 64 KiB
  file write buffer), and of segments being sealed until their sealed file is
  written. When the bytes of open segments
  (not yet handed to the sealer) pass 90% of this part, the engine seals the
  largest open segments early, down to 75%. Why that high: every early seal
  makes a smaller segment and costs a seal's fsyncs and manifest commit; with
  48 writers on 64 partitions under a 1.5 GiB limit, sealing from half down to
  a quarter made 840-920 seals in 15 s and the rate 5.6-5.8M rows/s (p99
  224-261 ms), from 90% down to 75% 510-525 seals, 6.4-6.8M rows/s (p99
  183-204 ms), with the same peak RSS. The headroom it gives up is what the
  wait below covers. Only when sealing cannot
  keep up and the part is full does an append wait for room (seals free it) for
  up to ``storage.memory_wait_seconds``, holding no lock, and then it is refused
  whole with 429 and ``Retry-After``: nothing half-written, and no queue grows
  past that wait. Why wait: under a 1.5 GiB limit with 48 writers on 64
  partitions about 1% of appends found the part full for the few milliseconds
  before the next seal finished, and each such writer's back-off cost more than
  the wait.

The default budget is the container's memory limit (cgroup v2 ``memory.max``
or v1 ``memory.limit_in_bytes``, the tightest on the path to the root) minus
``storage.memory_overhead_bytes``; without a limit, a quarter of the machine's
memory.

Lock order: ``_lock`` is a leaf (see ``plateau.storage.catalog.locks``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from plateau.protocol.errors import Busy
from plateau.storage.metrics import MEMORY_BUDGET_BYTES, MEMORY_LIMIT_BYTES, MEMORY_USED_BYTES

MiB = 1024 * 1024
MIN_BUDGET = 64 * MiB
UNLIMITED = 1 << 60  # cgroup v1 reports "no limit" as a number near 2**63
SEAL_EARLY_FRACTION = 0.9
SEAL_DOWN_TO_FRACTION = 0.75
RETRY_AFTER_SECONDS = 1.0
CGROUP_ROOT = Path("/sys/fs/cgroup")


class MemoryFull(Busy):
    """Open segments fill their part of the budget: 429, unless room comes within the wait."""


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None  # "max": no limit
    value = int(text)
    return value if value < UNLIMITED else None


def cgroup_memory_limit(
    proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT
) -> int | None:
    """The tightest memory limit on this process's cgroup path (v2 or v1), or None."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        rel = Path(path.lstrip("/"))
        if controllers == "" and (root / "cgroup.controllers").exists():  # v2, unified
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):  # v1
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        # Inside a container the cgroup namespace usually makes the path "/", but with a
        # host path the directory may not be mounted here: walk up what exists.
        for parent in [rel, *rel.parents]:
            candidates.append(base / parent / name)
    limits = [v for p in candidates if (v := _read_limit(p)) is not None]
    return min(limits) if limits else None


def _nothing() -> int:
    return 0


def machine_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass(frozen=True)
class BudgetSource:
    bytes: int
    source: str  # "configured", "cgroup", "machine"


def default_budget(configured: int | None, overhead: int) -> BudgetSource:
    if configured is not None:
        return BudgetSource(configured, "configured")
    limit = cgroup_memory_limit()
    if limit is not None:
        return BudgetSource(max(MIN_BUDGET, limit - overhead), "cgroup")
    return BudgetSource(max(MIN_BUDGET, machine_memory() // 4), "machine")


class MemoryBudget:
    """The node's budget and what each part holds; the engine and server report to it."""

    def __init__(
        self, source: BudgetSource, read_cache_bytes: int, archive_cache_bytes: int = 0
    ) -> None:
        self.total = source.bytes
        self.source = source.source
        self.read_cache_limit = min(read_cache_bytes, self.total // 4)
        self.archive_cache_limit = min(archive_cache_bytes, self.total // 8)
        self.bodies_limit = 0
        self.body_pool_limit = 0
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # notified when open-segment bytes go
        self._waiting = 0  # appends in wait_for_room
        self._segments = 0  # rows of open and sealing segments
        self._sealing = 0  # of which handed to the sealer
        self.bodies = 0  # written only by the server's event loop
        self.bodies_waiting = 0  # appends waiting for room in ``bodies`` (same)
        self.read_cache_used: Callable[[], int] = _nothing  # the read cache installs its own
        self.archive_cache_used: Callable[[], int] = _nothing  # so do archive reads
        self.body_pool_used: Callable[[], int] = _nothing  # the server's idle body regions

    def reserve_bodies(self, wanted: int) -> int:
        """Set the bodies part (the server's in-flight limit); returns what it got."""
        self.bodies_limit = min(wanted, self.total // 4)
        return self.bodies_limit

    def reserve_body_pool(self, wanted: int) -> int:
        """Set the part for idle regions of the server's body pool; returns what it got."""
        self.body_pool_limit = min(wanted, self.total // 16)
        return self.body_pool_limit

    @property
    def segments_limit(self) -> int:
        return (
            self.total
            - self.read_cache_limit
            - self.archive_cache_limit
            - self.bodies_limit
            - self.body_pool_limit
        )

    @property
    def segments(self) -> int:
        return self._segments

    @property
    def sealing(self) -> int:
        return self._sealing

    def _fits(self, nbytes: int) -> bool:
        return not self._segments or self._segments + nbytes <= self.segments_limit

    def wait_for_room(self, nbytes: int, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until ``nbytes`` more fit among open segments (as
        seals finish); True if they fit now. Takes nothing: ``charge`` does, and may still
        refuse if another append took the room first, so callers retry until their deadline.
        Call it holding no other lock."""
        with self._room:
            self._waiting += 1
            try:
                return self._room.wait_for(lambda: self._fits(nbytes), timeout)
            finally:
                self._waiting -= 1

    def charge(self, nbytes: int) -> None:
        """Take ``nbytes`` for an open segment, or raise Busy (429) if the part is full.

        An append into an empty part is always taken, so one table larger than
        the part slows writers down instead of locking them out.
        """
        with self._lock:
            if not self._fits(nbytes):
                raise MemoryFull(
                    f"node busy: open segments hold {self._segments} bytes of memory and "
                    f"this append ({nbytes} bytes) would pass their share "
                    f"({self.segments_limit}) of storage.memory_budget_bytes ({self.total}); "
                    "segments are being sealed to make room, retry after Retry-After seconds",
                    retry_after=RETRY_AFTER_SECONDS,
                )
            self._segments += nbytes

    def handed_to_sealer(self, nbytes: int) -> None:
        with self._lock:
            self._sealing += nbytes

    def release(self, nbytes: int, sealing: bool) -> None:
        with self._lock:
            self._segments -= nbytes
            if sealing:
                self._sealing -= nbytes
            self._room.notify_all()

    def seal_early_excess(self) -> int:
        """Bytes of open segments to hand to the sealer now (0: below the mark)."""
        open_bytes = self._segments - self._sealing
        if open_bytes <= self.segments_limit * SEAL_EARLY_FRACTION:
            return 0
        return open_bytes - int(self.segments_limit * SEAL_DOWN_TO_FRACTION)

    def parts(self) -> dict[str, dict[str, int]]:
        parts = {
            "open_segments": {
                "used": self._segments,
                "limit": self.segments_limit,
                "waiting": self._waiting,
            },
            "read_cache": {"used": self.read_cache_used(), "limit": self.read_cache_limit},
            "bodies": {
                "used": self.bodies,
                "limit": self.bodies_limit,
                "waiting": self.bodies_waiting,
            },
        }
        if self.body_pool_limit:
            used = self.body_pool_used()
            parts["body_pool"] = {"used": used, "limit": self.body_pool_limit}
        if self.archive_cache_limit:
            used = self.archive_cache_used()
            parts["archive_cache"] = {"used": used, "limit": self.archive_cache_limit}
        return parts


def export_memory_metrics(memory: MemoryBudget) -> None:
    """Read the budget's parts at scrape time (the node's one budget; the last one wins)."""
    MEMORY_BUDGET_BYTES.set(memory.total)
    for part in memory.parts():

        def used(part: str = part) -> float:
            return float(memory.parts()[part]["used"])

        def limit(part: str = part) -> float:
            return float(memory.parts()[part]["limit"])

        MEMORY_USED_BYTES.labels(part).set_function(used)
        MEMORY_LIMIT_BYTES.labels(part).set_function(limit)
