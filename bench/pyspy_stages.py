"""Which stage of the node's append a py-spy stack belongs to (bench/ingest_profile.py).

Reads ``py-spy record --threads -f raw`` output (one ``thread (TID): NAME;root;...;leaf
COUNT`` line per distinct stack). A stack is first checked for a wait (``waiting``):
``idle`` (a lock, condition, queue or poll wait) and ``gil_wait`` are counted apart
and take no share of the CPU.

Every other stack is put in one stage. First by thread: ``sealer*`` is
``seal``, ``retention`` and ``snapshot*`` are ``bookkeeping``. Otherwise the
frames are walked from the leaf to the root and, at each frame, the rules of
``RULES`` are tried in order; the first frame that matches one decides, so the
innermost known stage wins (which is why seals are told by their thread first:
their lz4 and fsync frames would win otherwise). Only if no frame
matches any of ``RULES``, the same walk with ``GENERIC_RULES``: the storage
engine, the server and the frameworks, where the stages are called from, own
only what is left. ``RULES``, in order:

* ``seal``: ``partition._seal``/``seal_segment``, ``sealed_writer.py``.
* ``fsync``: ``durable_io.py``, ``group_commit.py``, ``OpenSegment``'s ``fsync``,
  native ``fsync``/``fdatasync``/``fadvise``/``sync_file_range``.
* ``write``: ``ipc_file.py`` (``write_all``, ``IpcFileWriter``), native ``writev``/``pwrite``.
* ``compression``: ``column_codecs.py`` (``ColumnPlan.choose``/``encode``),
  ``ipc_messages.py``'s encoding side (``compressed``, ``as_sent``,
  ``encapsulate``, ``record_batch_metadata``), ``partition._encode``, native
  lz4/zstd/snappy frames and Arrow's ``Codec``.
* ``validation``: ``codecs.check_table``/``_check_names``/``has_null_type``,
  ``storage/data/validation.py``, any frame named ``*validate*``.
* ``parse``: the rest of ``server/codecs.py`` (``_table_from_ipc``...) and of
  ``ipc_messages.py`` (``batch_messages``, ``read_layout``), ``pyarrow/ipc.py``.
* ``http`` (first: before ``body``): uvloop's socket writes (``UVStream_write``).
* ``body``: ``server/body.py`` (``read_body``), starlette's request stream,
  uvicorn's ``data_received``/``on_*``/``receive``, native llhttp (httptools),
  uvloop's socket reads (``uv__read``); on a connection thread
  (``server/append_front.py``), ``_read_body`` and ``front_wire.fill`` (``recv_into``).
* ``bookkeeping``: prometheus_client (metrics).

``GENERIC_RULES``, in order:

* ``bookkeeping``: ``data_plane._append``, the rest of ``plateau/storage/``
  (``engine.append``, ``partition.append``, the open segment, catalog, memory
  accounting).
* ``http``: the rest of ``plateau/server/`` (routing, auth, the JSON reply),
  starlette, uvicorn, h11, anyio (the thread-pool hand-off) and asyncio.

A stack that no rule matches is ``other`` (the interpreter's own frames, the
garbage collector, threads' start-up); ``other_top`` lists its most sampled leaves.

Native frames of libraries without symbols (``0x7f... (libc.so.6)``) match
nothing, so a sample in them goes to the nearest frame above that does.
"""

from __future__ import annotations

import collections
import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

STAGE_NAMES = (
    "body",
    "parse",
    "validation",
    "compression",
    "write",
    "fsync",
    "seal",
    "http",
    "bookkeeping",
    "other",
)


@dataclass(frozen=True)
class Frame:
    """One frame of py-spy's raw output: ``func (file:line)`` or ``func (library.so)``."""

    func: str
    file: str  # a Python file as py-spy shortens it, or a native library

    @staticmethod
    def parse(text: str) -> Frame:
        m = re.fullmatch(r"(.*) \((.*)\)", text)
        if m is None:
            return Frame(text, "")
        func, loc = m.groups()
        file, _, line = loc.rpartition(":")
        return Frame(func, file if file and line.isdigit() else loc)

    def in_file(self, *suffixes: str) -> bool:
        path = "/" + self.file
        return any(path.endswith("/" + s) for s in suffixes)

    def in_dir(self, *parts: str) -> bool:
        path = "/" + self.file
        return any(f"/{p}/" in path for p in parts)

    def named(self, *names: str) -> bool:
        short = self.func.rpartition(".")[2]
        return short in names or self.func in names


Rule = tuple[str, Callable[[Frame], bool]]

_NATIVE_FSYNC = re.compile(r"fsync|fdatasync|fadvise|sync_file_range", re.IGNORECASE)
_NATIVE_WRITE = re.compile(r"writev|pwrite", re.IGNORECASE)
_NATIVE_CODEC = re.compile(r"lz4|zstd|snappy|arrow::util::.*Codec", re.IGNORECASE)
_ENCODE_SIDE = ("compressed", "as_sent", "encapsulate", "record_batch_metadata", "align", "vector")
_BODY_UVICORN = (
    "data_received",
    "receive",
    "on_body",
    "on_url",
    "on_header",
    "on_headers_complete",
)

RULES: list[Rule] = [
    ("seal", lambda f: f.in_file("storage/partition.py") and f.named("_seal", "seal_segment")),
    ("seal", lambda f: f.in_file("storage/data/sealed_writer.py")),
    ("fsync", lambda f: f.in_file("data/durable_io.py", "data/group_commit.py")),
    ("fsync", lambda f: f.in_file("data/open_segment.py") and f.named("fsync")),
    ("fsync", lambda f: bool(_NATIVE_FSYNC.search(f.func))),
    ("write", lambda f: f.in_file("storage/data/ipc_file.py")),
    ("write", lambda f: bool(_NATIVE_WRITE.search(f.func))),
    ("compression", lambda f: f.in_file("storage/data/column_codecs.py")),
    ("compression", lambda f: f.in_file("data/ipc_messages.py") and f.named(*_ENCODE_SIDE)),
    ("compression", lambda f: f.in_file("storage/partition.py") and f.named("_encode")),
    ("compression", lambda f: bool(_NATIVE_CODEC.search(f.func))),
    (
        "validation",
        lambda f: "validate" in f.func.lower() and not f.in_dir("pydantic", "pydantic_core"),
    ),
    ("validation", lambda f: f.in_file("storage/data/validation.py")),
    (
        "validation",
        lambda f: (
            f.in_file("server/codecs.py")
            and f.named("check_table", "_check_names", "has_null_type")
        ),
    ),
    ("parse", lambda f: f.in_file("server/codecs.py", "data/ipc_messages.py", "pyarrow/ipc.py")),
    ("http", lambda f: f.func.startswith(("UVStream_write", "UVStream__try_write"))),
    ("body", lambda f: f.in_file("server/body.py", "starlette/requests.py")),
    ("body", lambda f: f.in_file("server/append_front.py") and f.named("_read_body")),
    ("body", lambda f: f.in_file("server/front_wire.py") and f.named("fill")),
    ("body", lambda f: f.func.startswith("uv__read")),  # uvloop's socket read
    ("body", lambda f: f.in_dir("uvicorn") and f.named(*_BODY_UVICORN)),
    ("body", lambda f: f.func.startswith(("llhttp", "parser_cb_on_body"))),  # httptools, native
    ("bookkeeping", lambda f: f.in_dir("prometheus_client")),
]

# Tried only when no rule above matches any frame of the stack: these frames
# (the storage engine, the server, the frameworks) are where the stages above
# are called from, so they own only what is left.
GENERIC_RULES: list[Rule] = [
    ("bookkeeping", lambda f: f.in_file("server/data_plane.py") and f.named("_append")),
    ("bookkeeping", lambda f: f.in_dir("plateau/storage")),
    ("http", lambda f: f.in_dir("plateau/server")),
    ("http", lambda f: f.in_dir("starlette", "uvicorn", "h11", "anyio", "asyncio")),
]

THREAD_STAGES = (("sealer", "seal"), ("retention", "bookkeeping"), ("snapshot", "bookkeeping"))


# Native frames between the leaf and the first Python frame that mean the thread waits.
_LOCK_WAIT = ("PyThread_acquire_lock_timed", "sem_wait", "sem_timedwait", "sem_clockwait")
_POLL_WAIT = ("epoll_wait", "epoll_pwait", "select", "poll", "uv__io_poll")
_GIL_WAIT = ("take_gil", "pthread_cond_timedwait", "pthread_cond_wait", "drop_gil")


# Python functions whose C call a leaf Python frame waits in (``--python-only``).
_PY_WAITS = (
    "Condition.wait",
    "Event.wait",
    "Queue.get",
    "SimpleQueue.get",
    "Thread.join",
    "_worker",  # concurrent.futures' idle worker: work_queue.get()
    "WorkerThread.run",  # anyio's
    "Runner.run",  # uvloop's loop, all in C: epoll, or its own socket I/O
    "run_forever",
    "run_until_complete",
    "sleep",
    "select",
)


# A connection thread's wait for its client's next request: blocked in a peek at the socket
# (``AppendFront._next_request``); with ``--python-only`` its head parse, a few microseconds
# a request, is counted with it.
_FRONT_WAITS = ("_next_request",)


def _leaf_recv(leaf: list[Frame]) -> bool:
    return any(f.func.startswith(("recv", "__libc_recv", "sock_recv")) for f in leaf)


def waiting(frames: list[Frame], native: bool = True) -> str | None:
    """``idle`` (a lock, condition, queue or poll wait), ``gil_wait``, or None (busy).

    py-spy's own idle test misses these (it sampled the thread pools' idle
    workers and uvloop's ``epoll_pwait`` as active), so they are recognized
    here. With native frames, by the leaf's native frames: in CPython 3.11 a
    lock wait is ``PyThread_acquire_lock_timed`` (a semaphore); taking the GIL
    is a ``pthread_cond_timedwait`` (``take_gil``, often inlined) outside it.
    Without (``--python-only``), by the leaf Python function (``_PY_WAITS``):
    this also drops uvloop's own socket reads and writes, done in C under
    ``Runner.run``, and cannot tell a GIL wait from work.
    """
    if not native:
        return "idle" if frames and frames[0].named(*_PY_WAITS, *_FRONT_WAITS) else None
    leaf = list(itertools.takewhile(lambda f: not f.file.endswith(".py"), frames))
    if any(f.func.startswith(_LOCK_WAIT + _POLL_WAIT) for f in leaf):
        return "idle"
    python = frames[len(leaf)] if len(leaf) < len(frames) else None
    if python is not None and python.named(*_FRONT_WAITS) and _leaf_recv(leaf):
        return "idle"
    if any(f.func.startswith(_GIL_WAIT) for f in leaf):
        return "gil_wait"
    return None


def classify(thread: str, frames: list[Frame], native: bool = True) -> tuple[str, Frame | None]:
    """(stage, the frame that decided it) of one stack, ``frames`` from leaf to root."""
    waits = waiting(frames, native)
    if waits is not None:
        return waits, None
    for prefix, stage in THREAD_STAGES:
        if thread.startswith(prefix):
            return stage, None
    for rules in (RULES, GENERIC_RULES):
        for frame in frames:
            for stage, matches in rules:
                if matches(frame):
                    return stage, frame
    return "other", None


def parse_raw_line(line: str) -> tuple[str, list[Frame], int] | None:
    """(thread name, frames leaf first, sample count) of one line of ``py-spy -f raw``.

    A line is ``thread (TID): NAME;root;...;leaf COUNT`` (``--threads``).
    """
    stack, _, count = line.rstrip("\n").rpartition(" ")
    if not stack or not count.isdigit():
        return None
    parts = stack.split(";")
    thread = ""
    if parts and parts[0].startswith("thread ("):
        thread = parts.pop(0).partition("): ")[2]
    return thread, [Frame.parse(p) for p in reversed(parts)], int(count)


@dataclass
class Profile:
    samples: collections.Counter[str]
    other_leaves: collections.Counter[str]

    @property
    def busy(self) -> int:
        """Samples of the stages that share the node's CPU (not idle, not waiting for the GIL)."""
        return sum(self.samples.get(s, 0) for s in STAGE_NAMES)


def read_profile(lines: Iterable[str], native: bool = True) -> Profile:
    samples: collections.Counter[str] = collections.Counter()
    other: collections.Counter[str] = collections.Counter()
    for line in lines:
        parsed = parse_raw_line(line)
        if parsed is None:
            continue
        thread, frames, count = parsed
        stage, _ = classify(thread, frames, native)
        samples[stage] += count
        if stage == "other" and frames:
            leaf = next((f for f in frames if not f.func.startswith("0x")), frames[0])
            other[f"{leaf.func} ({leaf.file})"] += count
    return Profile(samples, other)


def stage_table(
    profile: Profile, rate_hz: float, node_cpu_s: float, acked_mib: float
) -> dict[str, dict[str, float]]:
    """Per stage: samples, share, active and estimated CPU seconds, both per acked MiB.

    ``gil_wait`` comes last with its active time only: waiting is not CPU.
    """
    busy = profile.busy or 1
    computing = (profile.busy - profile.samples.get("fsync", 0)) or 1
    out: dict[str, dict[str, float]] = {}
    for stage in (*STAGE_NAMES, "gil_wait"):
        n = profile.samples.get(stage, 0)
        share = n / busy if stage in STAGE_NAMES else 0.0
        active = n / rate_hz
        cpu = share * node_cpu_s
        # the other bound: every fsync sample a wait, the CPU shared by the rest
        cpu_lo = 0.0 if stage in ("fsync", "gil_wait") else n / computing * node_cpu_s
        out[stage] = {
            "samples": n,
            "share": round(share, 4),
            "active_s": round(active, 3),
            "cpu_s": round(cpu, 3),
            "cpu_ms_per_acked_mib": round(cpu * 1000 / acked_mib, 3) if acked_mib else 0.0,
            "cpu_ms_per_acked_mib_fsync_blocked": (
                round(cpu_lo * 1000 / acked_mib, 3) if acked_mib else 0.0
            ),
            "active_ms_per_acked_mib": round(active * 1000 / acked_mib, 3) if acked_mib else 0.0,
        }
    return out
