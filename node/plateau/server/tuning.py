"""Process-wide knobs the node sets once at startup, before it opens the engine.

Each one changes how the whole process behaves (malloc, the GIL, Arrow's
allocator), so each is set here once, from the node's settings, and each
returns or logs what is in force afterwards so an operator can see it.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import platform
import sys
import time
from typing import Any

from plateau.server.metrics import GC_FROZEN_OBJECTS, GC_PAUSE_SECONDS

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


ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"


def choose_arrow_pool(name: str) -> None:
    """Name the allocator behind Arrow's buffers; call it before pyarrow loads.

    Why jemalloc by default: under pyarrow's own default, mimalloc, a fresh
    node's first read of 8M rows faulted in thousands of fresh 2 MiB pages
    (each zeroed by the kernel: a quarter of the node's CPU in that read)
    for replies and decoded row groups that came and went; jemalloc faulted
    in about 200 MiB of 4 KiB pages for the same read.

    Why the environment: Arrow's C++ code allocates from its default pool,
    which it picks once, from ``ARROW_DEFAULT_MEMORY_POOL``, as the library
    loads. ``pa.set_memory_pool`` afterwards changes pyarrow's calls only:
    measured, most of a read's buffers (IPC decompression among them) still
    came from mimalloc. The ``plateau node`` command loads no pyarrow before
    its settings are read, so it can set the variable from the settings.
    """
    if "pyarrow" in sys.modules:
        raise RuntimeError("the Arrow memory pool is chosen before pyarrow loads")
    os.environ[ARROW_POOL_ENV] = name


MIMALLOC_PURGE_ENV = "MIMALLOC_PURGE_DELAY"


def choose_read_pool_purge_delay(delay_ms: int) -> None:
    """Tell mimalloc (the read pool's allocator, ``direct_io.READ_POOL``) how long to keep
    freed memory before purging it; call it before pyarrow loads.

    Why: a scan decodes a row group, serves it and frees it, again and again. At
    mimalloc's 10 ms the freed memory went back to the kernel between row groups
    and the next one faulted fresh pages in, zeroed (2 MiB at a time where the
    kernel backs them with huge pages), so memory the node had used a moment
    before cost it again. Why the environment: mimalloc reads its options once, as
    it initialises inside Arrow, and exports no call to change them. An
    operator's own ``MIMALLOC_PURGE_DELAY`` is left as it is.
    """
    if MIMALLOC_PURGE_ENV not in os.environ:
        if "pyarrow" in sys.modules:
            raise RuntimeError("the read pool's purge delay is chosen before pyarrow loads")
        os.environ[MIMALLOC_PURGE_ENV] = str(delay_ms)


def read_pool_purge_delay_in_force() -> str:
    """What mimalloc was given (``MIMALLOC_PURGE_DELAY``), for the startup line."""
    value = os.environ.get(MIMALLOC_PURGE_ENV)
    return "mimalloc's default" if value is None else f"{value} ms"


def arrow_pool_in_force(wanted: str) -> str:
    """The backend of Arrow's default pool; a warning when it is not ``wanted``.

    A pyarrow built without the one named (jemalloc is absent from some
    platforms' wheels) falls back to its default: the node runs on, and says so.
    """
    import pyarrow as pa  # here, not above: choose_arrow_pool runs before pyarrow may load

    name = str(pa.default_memory_pool().backend_name)
    if name != wanted:
        log.warning("server.arrow_memory_pool %s: not in this pyarrow, Arrow uses %s", wanted, name)
    return name


def warm_lazy_imports() -> None:
    """Pay, before the node serves, for what pyarrow imports on first use.

    pyarrow imports pandas, where it is installed (beside PySpark, in a development
    or test environment; the node's image has none), the first time it converts a
    Python value or writes a Parquet file. On a serving node that import landed on
    the first append without a ``time`` column or on the first Parquet seal, and
    held the GIL throughout: 0.6 s from bytecode, 2.3 s where Python writes none
    (``PYTHONDONTWRITEBYTECODE``). A first seal that slow let a writer fill a
    partition of 4 MiB Parquet segments faster than they sealed, and its appends
    were refused (429).
    """
    import pyarrow as pa  # here, not above: choose_arrow_pool runs before pyarrow may load
    import pyarrow.parquet as pq

    one = pa.table({"time": pa.repeat(pa.scalar(0, pa.int64()), 1)})
    pq.write_table(one, pa.BufferOutputStream())


class _PauseClock:
    """Times each collection from its ``start`` callback to its ``stop``.

    One collection runs at a time in a process (the collector refuses to start
    another while one is under way), so one start time is enough. The three
    generations' histograms are bound once: the callback runs inside every
    collection, young ones hundreds of times a second under load, and a
    ``labels()`` lookup each time would take the metric's lock for nothing.
    """

    def __init__(self) -> None:
        self.started = 0.0
        self.by_generation = tuple(GC_PAUSE_SECONDS.labels(str(g)) for g in range(3))

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.by_generation[info["generation"]].observe(time.perf_counter() - self.started)


_PAUSE_CLOCK = _PauseClock()


def stop_counting_gc_pauses() -> None:
    """Undo ``count_gc_pauses`` (tests that run in the same process as others)."""
    with contextlib.suppress(ValueError):
        gc.callbacks.remove(_PAUSE_CLOCK)


def count_gc_pauses() -> None:
    """Count every garbage collection's pause in ``plateau_gc_pause_seconds``.

    Why: a collection holds the GIL from start to end, so a long one stalls every
    request in flight at once; the append stages cannot show it (it lands in
    whichever stage each thread was in). Idempotent.
    """
    if _PAUSE_CLOCK not in gc.callbacks:
        gc.callbacks.append(_PAUSE_CLOCK)


def freeze_startup_heap() -> int:
    """Keep what exists now out of every later collection's scan; returns how many objects.

    Why: a full (generation 2) collection walks every tracked object, and most of a
    serving node's are the ones it made while starting (modules, pydantic and
    FastAPI's models, pyarrow's types: about 120,000), which never become garbage.
    Under 48 writers a full collection came every few seconds and took 60-75 ms
    with the GIL held, and every append in flight waited for it; frozen, the same
    collections took 2.3-6.2 ms. Garbage is collected first, so none of it is kept.
    Objects made later are collected as before.
    """
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    GC_FROZEN_OBJECTS.set(frozen)
    return frozen
