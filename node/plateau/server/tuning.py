"""Process-wide knobs the node sets once at startup, before it opens the engine.

Each one changes how the whole process behaves (malloc, the GIL, Arrow's
allocator), so each is set here once, from the node's settings, and each
returns or logs what is in force afterwards so an operator can see it.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import platform
import sys

import pyarrow as pa

log = logging.getLogger("plateau.server")

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD_BYTES = 1024 * 1024


def tune_malloc() -> None:
    """Give append bodies (Python ``bytes`` of a few MB) back to the kernel when freed.

    glibc raises its mmap threshold each time a large mmapped block is freed
    (up to 32 MiB), so after the first few bodies every later one comes from
    the heap arenas, and freed bodies stay in the process as fragmented free
    space: with 48 writers of 2.6 MB bodies that was about 200 MB of RSS beyond
    what the node holds. A fixed threshold (which also turns the adjustment
    off) keeps blocks of 1 MiB and more in their own mappings, unmapped on
    free. The environment (``MALLOC_MMAP_THRESHOLD_``) overrides it.

    Large Arrow bodies no longer come from malloc at all (``body_pool`` recycles
    their memory without faulting it in again); the threshold still keeps JSON
    bodies and other large blocks from fragmenting the heap.
    """
    if platform.libc_ver()[0] != "glibc" or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def tune_interpreter(switch_interval_ms: float) -> float:
    """Set the GIL's switch interval; returns the interval now in force, in ms.

    Why: the node's threads keep giving the GIL up (every fsync, socket call
    and most Arrow calls) and taking it back, and a thread taking it back waits
    up to a whole slice for each thread that is busy in Python meanwhile. At
    Python's 5 ms an operator's admin call, which gives the GIL up a few dozen
    times, could wait seconds behind busy threads in the engine; 1 ms bounds those
    waits, and cost no throughput measurable here (``server.gil_switch_interval_ms``).
    """
    sys.setswitchinterval(switch_interval_ms / 1000)
    return sys.getswitchinterval() * 1000


ARROW_POOLS = {
    "jemalloc": pa.jemalloc_memory_pool,
    "mimalloc": pa.mimalloc_memory_pool,
    "system": pa.system_memory_pool,
}


def tune_arrow_pool(name: str) -> str:
    """Make ``name`` Arrow's default pool; returns the backend now in force.

    Why jemalloc by default: under pyarrow's own default, mimalloc, a fresh
    node's first read of 8M rows faulted in thousands of fresh 2 MiB pages
    (each zeroed by the kernel: a quarter of the node's CPU in that read)
    for replies and decoded row groups that came and went; jemalloc faulted
    in about 100 MiB of 4 KiB pages for the same read. A pyarrow built without the one named (jemalloc is absent from some
    platforms' wheels) keeps its default, with a warning, rather than refusing
    to start.
    """
    try:
        pa.set_memory_pool(ARROW_POOLS[name]())
    except NotImplementedError:
        log.warning(
            "server.arrow_memory_pool %s is not in this pyarrow build; keeping %s",
            name,
            pa.default_memory_pool().backend_name,
        )
    return str(pa.default_memory_pool().backend_name)
