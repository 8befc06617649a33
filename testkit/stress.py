"""Run workers concurrently for a fixed time and fail on any stall.

Each worker is a function called in a loop on its own daemon thread; every
call that returns counts as progress. A monitor fails the run as soon as one
worker has not finished a call for ``stall`` seconds, and the failure shows
every thread's stack, so a deadlock names the locks involved. Daemon threads:
a deadlocked worker cannot keep the test process from ending.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class _Worker:
    name: str
    step: Callable[[], object]
    last: float = field(default_factory=time.monotonic)
    calls: int = 0
    error: BaseException | None = None


class Stalled(AssertionError):
    pass


def _stacks() -> str:
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame))
        out.append(f"--- thread {names.get(ident, ident)}\n{stack}")
    return "\n".join(out)


def run_stress(
    steps: dict[str, Callable[[], object]],
    seconds: float,
    stall: float,
    healthy: Callable[[], None] | None = None,
) -> dict[str, int]:
    """Call each step in a loop for ``seconds``; returns the calls each finished.

    ``healthy`` is checked by the monitor between samples (raise to fail).
    """
    workers = [_Worker(name, step) for name, step in steps.items()]
    stop = threading.Event()

    def loop(w: _Worker) -> None:
        while not stop.is_set():
            try:
                w.step()
            except BaseException as exc:
                w.error = exc
                return
            w.calls += 1
            w.last = time.monotonic()

    threads = [
        threading.Thread(target=loop, args=(w,), name=f"stress-{w.name}", daemon=True)
        for w in workers
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = time.monotonic()
            for w in workers:
                if w.error is not None:
                    raise AssertionError(f"worker {w.name} failed: {w.error!r}") from w.error
                if now - w.last > stall:
                    raise Stalled(
                        f"worker {w.name} made no progress for {now - w.last:.1f} s "
                        f"(calls so far: { {x.name: x.calls for x in workers} })\n{_stacks()}"
                    )
            if healthy is not None:
                healthy()
    finally:
        stop.set()
    for t in threads:
        t.join(timeout=stall)
        if t.is_alive():
            raise Stalled(f"{t.name} did not finish its last call\n{_stacks()}")
    return {w.name: w.calls for w in workers}


def operator_mix(
    writer: Callable[[str], Callable[[], object]],
    create_append_delete: Callable[[str, bool], Callable[[], object]],
    admin: Callable[[], object],
    reader: Callable[[], object],
    usage: Callable[[], object],
    partitions: list[str],
) -> dict[str, Callable[[], object]]:
    """The mix an operator and its producers put on a node: a writer per partition of the
    hot topic, topics created (explicitly and by a first append), appended to and deleted,
    the hot topic's budget changed, readers, and usage reads."""
    steps = {f"writer-{p}": writer(p) for p in partitions}
    steps |= {
        "create": create_append_delete("made", True),
        "auto-create": create_append_delete("auto", False),
        "admin": admin,
        "reader": reader,
        "usage": usage,
    }
    return steps


def assert_indexes_never_reused(starts: dict[str, list[int]]) -> None:
    for p, got in starts.items():
        assert got == sorted(got) and len(set(got)) == len(got), f"partition {p} reused an index"
