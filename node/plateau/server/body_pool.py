"""Recycled memory for large append bodies, so that no body is faulted in anew.

Why: a body of a few MB joined into fresh ``bytes`` lands in a new anonymous
mapping (``tuning.tune_malloc`` keeps blocks of 1 MiB and more out of the heap so
that freed bodies go back to the kernel), and the kernel faults in and zeroes
each of its 4 KiB pages. perf put 45% of the event loop thread's time in that
join and its page faults under issue 28's load (4 writers, 1.3 MB bodies), and
that thread, which receives every body, is what the node's ingest rate waits
on. Memory that held an earlier body is mapped already and needs neither.

So the event loop only collects a large Arrow body's pieces (``Pieces``) as
the socket gives them; the append's own thread copies them into a region of
this pool (``gather``) and decodes the body from there, as a ``pa.Buffer``
over the region. The open segment keeps the decoded batches, which point into
that buffer, until it is sealed. When the last Arrow buffer over a region is
gone its ``Lease`` is collected and the region comes back here for the next
body of its size class. Nothing writes to a region while a lease on it lives,
so a recycled region never changes bytes that anything still reads.

Size classes are eight to a power of two (1, 1.125, 1.25 ... 2 MiB, 2.25 ...),
so a region is at most an eighth larger than its body. What the pool maps,
leased and idle together, stays within ``limit_bytes``: the node passes the
parts of its memory budget that bodies and open segments have, the memory those
bodies were counted against anyway. Idle regions are the budget's part
``body_pool`` (``max_idle_bytes``: a 16th of the budget, at most 256 MiB, taken
from the open segments' share). They were first bounded only by the leased
bound: under a 1.5 GiB pod limit, where the node's RSS runs within 150 MiB of
the limit, up to 95 MiB of idle regions that no part counted got it
OOM-killed. A region given back beyond either bound is unmapped, and so is one
left idle for ``IDLE_SECONDS``, so a node whose load fell gives the memory back.

Lock order: ``BodyPool._lock`` is a leaf; nothing is called and no memory is
mapped or unmapped while it is held. A lease's finalizer never waits for it
(``give_back``): the cyclic GC can run finalizers inside a locked section.
"""

from __future__ import annotations

import collections
import ctypes
import mmap
import threading
import time
import weakref
from collections.abc import Callable

import pyarrow as pa

from plateau.server.metrics import BODY_POOL_IDLE_BYTES, BODY_POOL_LEASED_BYTES, BODY_POOL_REGIONS
from plateau.storage.data.libc import libc_function

MIN_POOLED_BYTES = 1 << 20  # smaller blocks come from malloc's heap, already reused
CLASSES_PER_OCTAVE = 8
IDLE_SECONDS = 30.0
_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
MADV_POPULATE_WRITE = 23  # Linux 5.14: fault in (and zero) every page, as a write would


MADVISE = libc_function("madvise", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int])


def size_class(size: int) -> int:
    """The capacity of the region a body of ``size`` bytes gets: at most 1/8 more."""
    if size <= 0:
        raise ValueError(f"a body has a positive size, not {size}")
    octave = 1 << size.bit_length() - 1  # the largest power of two not above size
    step = max(octave // CLASSES_PER_OCTAVE, 1)
    return -(-size // step) * step


class Region:
    """One anonymous mapping; its address stays fixed until it is closed.

    Private and populated: the kernel faults in and zeroes the pages in one pass
    (``MADV_POPULATE_WRITE``), instead of page by page as the body is copied in: a
    new region then costs less than the fresh ``bytes`` it replaces (2.3 MB: 0.67
    against 1.22 ms, copy included). Through ``ctypes``, which lets go of the GIL
    for the call: CPython's ``mmap`` with ``MAP_POPULATE`` holds it (a 512 MiB map
    stopped every other thread for its 160 ms), and under 48 writers each new
    2.5 MB region held up the other appends' threads for about a millisecond. On a
    kernel without it (before 5.14) the pages fault in as the body arrives.
    """

    __slots__ = ("address", "capacity", "idle_since", "map")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.idle_since = 0.0
        self.map = mmap.mmap(-1, capacity, flags=_FLAGS)
        anchor = ctypes.c_char.from_buffer(self.map)
        self.address = ctypes.addressof(anchor)
        del anchor  # the export ends here; the address stays valid while the map is open
        if MADVISE is not None:
            MADVISE(self.address, capacity, MADV_POPULATE_WRITE)  # EINVAL: left to faults


class Lease:
    """A region lent to one body; collected when the last Arrow buffer over it is."""

    __slots__ = ("__weakref__", "_filled", "region", "size")

    def __init__(self, pool: BodyPool, region: Region, size: int) -> None:
        self.region = region
        self.size = size
        self._filled = 0
        # not at exit: a region still leased then may back buffers that are yet to go
        weakref.finalize(self, pool.give_back, region).atexit = False

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        """Append ``chunk`` after what was written; past the declared size is a caller's bug."""
        end = self._filled + len(chunk)
        if end > self.size:
            raise ValueError(f"body passes its declared {self.size} bytes")
        self.region.map[self._filled : end] = chunk
        self._filled = end

    def receive(self, fill: Callable[[memoryview], int]) -> None:
        """Let ``fill`` write the whole body into the region (``append_front``'s
        ``recv_into``, no copy in between); it returns how many bytes it wrote."""
        with memoryview(self.region.map) as view:
            got = fill(view[: self.size])
        if got != self.size:
            raise ValueError(f"body of {got} bytes, {self.size} declared")
        self._filled = self.size

    def buffer(self) -> pa.Buffer:
        """The bytes written so far, as an Arrow buffer that keeps this lease alive."""
        return pa.foreign_buffer(self.region.address, self._filled, base=self)


class Pieces:
    """A body as the socket gave it: pieces, joined by ``BodyPool.gather`` off the event loop."""

    __slots__ = ("chunks", "size")

    def __init__(self, chunks: list[bytes], size: int) -> None:
        self.chunks = chunks
        self.size = size


class BodyPool:
    def __init__(
        self,
        limit_bytes: int,
        max_idle_bytes: int,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` is for tests: a test that sleeps past ``idle_seconds`` and sweeps once
        between can be overtaken by a loaded machine (CI saw it), a clock it turns cannot."""
        self.limit_bytes = limit_bytes
        self.max_idle_bytes = max_idle_bytes
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._returned: collections.deque[Region] = collections.deque()  # not yet filed
        self._idle: dict[int, list[Region]] = {}  # by capacity, most recently returned last
        self._idle_bytes = 0
        self._leased_bytes = 0  # includes regions returned but not yet filed
        self._next_sweep = 0.0

    @property
    def idle_bytes(self) -> int:
        return self._idle_bytes

    @property
    def leased_bytes(self) -> int:
        return self._leased_bytes

    def gather(self, pieces: Pieces) -> pa.Buffer:
        """The body in one region. Called in the append's thread, not the event loop's."""
        lease = self.lease(pieces.size)
        for chunk in pieces.chunks:
            lease.write(chunk)
        pieces.chunks.clear()  # the pieces' memory goes now, not when the request ends
        return lease.buffer()

    def lease(self, size: int) -> Lease:
        capacity = size_class(size)
        with self._lock:
            unmap = self._file_returned(self._clock())
            free = self._idle.get(capacity)
            region = free.pop() if free else None
            if region is not None:
                self._idle_bytes -= capacity
            self._leased_bytes += capacity
            counts = self._idle_bytes, self._leased_bytes
        self._publish(*counts, unmap)
        BODY_POOL_REGIONS.labels("mapped" if region is None else "reused").inc()
        if region is None:
            region = Region(capacity)  # mapped outside the lock
        return Lease(self, region, size)

    def give_back(self, region: Region) -> None:
        """A lease's finalizer: the region is queued, and filed now if the lock is free.

        A finalizer runs wherever the last reference goes, and the cyclic GC runs
        them in whatever code allocated, this pool's locked sections included; so it
        never waits for the lock (the lock is not reentrant). A region it cannot
        file is filed by the next lease, give_back or the server's sweep.
        """
        self._returned.append(region)
        if not self._lock.acquire(blocking=False):
            return
        try:
            unmap = self._file_returned(self._clock())
            counts = self._idle_bytes, self._leased_bytes
        finally:
            self._lock.release()
        self._publish(*counts, unmap)

    def sweep(self) -> None:
        """File returned regions and unmap those idle for ``idle_seconds``; the server calls
        it every second, so that a node that stopped receiving large bodies gives their
        memory back too."""
        with self._lock:
            unmap = self._file_returned(self._clock())
            counts = self._idle_bytes, self._leased_bytes
        self._publish(*counts, unmap)

    def _file_returned(self, now: float) -> list[Region]:
        """Under the lock: returned regions to the idle lists, or out past ``limit_bytes``;
        then the stale ones out. Returns the regions to unmap (after the lock)."""
        unmap: list[Region] = []
        while self._returned:
            region = self._returned.popleft()
            self._leased_bytes -= region.capacity
            idle = self._idle_bytes + region.capacity
            if idle > self.max_idle_bytes or self._leased_bytes + idle > self.limit_bytes:
                unmap.append(region)
                continue
            region.idle_since = now
            self._idle.setdefault(region.capacity, []).append(region)
            self._idle_bytes += region.capacity
        return unmap + self._take_stale(now)

    def _take_stale(self, now: float) -> list[Region]:
        """Regions idle for ``idle_seconds``, out of the pool (at most once a second, since it
        walks every size class)."""
        if now < self._next_sweep:
            return []
        self._next_sweep = now + min(1.0, self.idle_seconds)
        stale: list[Region] = []
        for capacity, free in list(self._idle.items()):
            old = 0
            while old < len(free) and now - free[old].idle_since >= self.idle_seconds:
                old += 1
            if old:
                stale += free[:old]
                del free[:old]
                self._idle_bytes -= capacity * old
            if not free:
                del self._idle[capacity]
        return stale

    def _publish(self, idle: int, leased: int, unmap: list[Region]) -> None:
        BODY_POOL_IDLE_BYTES.set(idle)
        BODY_POOL_LEASED_BYTES.set(leased)
        for region in unmap:
            BODY_POOL_REGIONS.labels("unmapped").inc()
            region.map.close()

    def close(self) -> None:
        """Unmap the idle regions (leased ones go when their last buffer does)."""
        with self._lock:
            self.limit_bytes = self.max_idle_bytes = 0
            unmap = self._file_returned(self._clock())
            unmap += [r for free in self._idle.values() for r in free]
            self._idle = {}
            self._idle_bytes = 0
            counts = self._idle_bytes, self._leased_bytes
        self._publish(*counts, unmap)
