"""The operator's own health and metrics: reconciles counted and timed, stalls detected.

The liveness probe (kopf's ``--liveness`` endpoint, fed by ``handlers.probe``)
fails when a reconcile has run longer than ``stall_seconds``: every call the
operator makes has a timeout, so a reconcile that old is wedged, and a restart
is the fix. It also fails when the API server has not answered a list for the
same time (the probe makes that call). A process that merely answers HTTP is
not called alive.

No lock: reconciles run in kopf's worker threads, but the in-flight map is
only touched with single dict operations (set, pop, a ``list()`` copy), each
atomic under CPython's GIL.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter(
    "plateau_operator_reconciles_total",
    "Reconciles finished, by kind and result (ok, retry, invalid, error)",
    ["kind", "result"],
)
RECONCILE_SECONDS = Histogram(
    "plateau_operator_reconcile_seconds",
    "Time one reconcile took (API calls and the node's admin API included)",
    ["kind"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
IN_FLIGHT = Gauge("plateau_operator_reconciles_in_flight", "Reconciles running now", ["kind"])
CONDITION = Gauge(
    "plateau_operator_resources_ready",
    "1 when the resource's Ready condition is True, 0 when False",
    ["kind", "namespace", "name"],
)


def forget(kind: str, namespace: str, name: str) -> None:
    """Drops a deleted resource's series."""
    with suppress(KeyError):
        CONDITION.remove(kind, namespace, name)


_ids = itertools.count()
_running: dict[int, tuple[str, float]] = {}


@contextmanager
def reconciling(kind: str) -> Iterator[list[str]]:
    """Times one reconcile; the caller sets ``result[0]`` (default ``error``: it raised)."""
    key = next(_ids)
    start = time.monotonic()
    _running[key] = (kind, start)
    result = ["error"]
    IN_FLIGHT.labels(kind).inc()
    try:
        yield result
    finally:
        _running.pop(key, None)
        IN_FLIGHT.labels(kind).dec()
        RECONCILE_SECONDS.labels(kind).observe(time.monotonic() - start)
        RECONCILES.labels(kind, result[0]).inc()


def oldest_running(now: float | None = None) -> tuple[str, float] | None:
    """(kind, seconds) of the longest-running reconcile, or None when none runs."""
    running = list(_running.values())
    if not running:
        return None
    kind, start = min(running, key=lambda item: item[1])
    return kind, (time.monotonic() if now is None else now) - start


class Stalled(RuntimeError):
    """Raised by the liveness probe: the operator stopped making progress."""


def check_progress(stall_seconds: float) -> float:
    """Seconds the oldest reconcile has run (0 when idle); raises ``Stalled`` past the bound."""
    oldest = oldest_running()
    if oldest is None:
        return 0.0
    kind, age = oldest
    if age > stall_seconds:
        raise Stalled(f"a {kind} reconcile has run for {age:.0f} s (bound {stall_seconds:.0f} s)")
    return age
