"""The kopf wiring: which event runs which reconcile, one at a time per object.

Every reconcile goes through ``run``: it takes the object's lock
(``serial.ObjectLocks``), reads the object afresh from the API server (a
handler's or timer's body may be older than the newest spec), reconciles,
writes the status only when it changed (no churn, ``observedGeneration``
never goes back: the newest spec was read under the lock), and posts an
Event when ``Ready`` changes (one Warning per transition, not per resync).
Change handlers run it at once; the operator's own resync loop
(``resync.ResyncBook``) runs it every ``resyncSeconds`` without adding a
finalizer, and sooner when an outcome asks to be retried (so change handlers
never raise kopf's TemporaryError: the status already says what is wrong, and
kopf would log every retry as an error). The annotation ``plateau.dev/paused: "true"`` stops it.

Status keeps up between resyncs: a topic's reconcile that changed its node's
budgets nudges the node's reconcile at once (``ResyncBook.nudge``), and every
``usageSeconds`` each ready node is asked once for its usage, which goes into
the statuses whose figures changed (``usage.UsagePoller``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException
from prometheus_client import start_http_server

from plateau_operator import nodes, telemetry, topics
from plateau_operator.archive_status import archive_event
from plateau_operator.crd import (
    API_VERSION,
    FINALIZER,
    GROUP,
    NODE_KIND,
    NODE_PLURAL,
    TOPIC_KIND,
    TOPIC_PLURAL,
    VERSION,
)
from plateau_operator.kube import Kube
from plateau_operator.nodeaccess import paused
from plateau_operator.resync import ResyncBook
from plateau_operator.rollout import RolloutGate
from plateau_operator.serial import Key, ObjectLocks
from plateau_operator.settings import settings
from plateau_operator.spec import topic_node_key
from plateau_operator.status import Outcome, ready_of, status_patch
from plateau_operator.usage import UsagePoller

log = logging.getLogger("plateau_operator")
cfg = settings()
locks = ObjectLocks()
gate = RolloutGate()
book = ResyncBook(cfg.resync_seconds)
_kube: Kube | None = None
RESYNC_WORKERS = 4
USAGE_WORKERS = 4  # node usage polls at once, in their own threads (never a reconcile's)


def kube() -> Kube:
    global _kube
    if _kube is None:
        _kube = Kube()
    return _kube


poller = UsagePoller(kube, locks, cfg)


class RoutineRetries(logging.Filter):
    """kopf logs a handler's TemporaryError ("... failed temporarily: ...") at error, though
    it is a retry kopf itself schedules (a topic's deletion waiting for its node): info.
    The final ones ("failed temporarily but will time out ...") stay errors."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.ERROR and " failed temporarily: " in record.getMessage():
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


logging.getLogger("kopf.objects").addFilter(RoutineRetries())


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    # the operator posts its own Events (on transitions); kopf's per-handler lines stay logs
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 16
    logging.captureWarnings(True)  # warnings become log records too: every line is JSON
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per node call is noise
    settings.watching.server_timeout = 300
    kube()
    if cfg.metrics_port:
        start_http_server(cfg.metrics_port)
    loop = asyncio.get_running_loop()
    _background.append(loop.create_task(_resync_forever(), name="plateau-resync"))
    if cfg.usage_seconds > 0:
        _background.append(loop.create_task(_poll_usage_forever(), name="plateau-usage"))


_background: list[asyncio.Task[None]] = []  # the loops configure starts; cleanup ends them


@kopf.on.cleanup()
async def stop_background(**_: Any) -> None:
    """End the resync and usage loops at once: kopf waits 5 s for tasks still running at
    exit before it cancels them, which made every operator stop (a roll, a test) 5 s long."""
    for task in _background:
        task.cancel()
    await asyncio.gather(*_background, return_exceptions=True)
    _background.clear()


@kopf.on.probe(id="reconcileSeconds")
def probe_progress(**_: Any) -> float:
    """Age of the oldest running reconcile; fails the liveness probe past the bound."""
    return telemetry.check_progress(cfg.stall_seconds)


@kopf.on.probe(id="apiServer")
def probe_api_server(**_: Any) -> str:
    """The API server's version, asked now: fails the probe when it cannot be reached."""
    return kube().server_version()


# --- one reconcile, locked -------------------------------------------------------------


def run(key: Key, work: Callable[[dict[str, Any]], Outcome]) -> Outcome | None:
    """Reconcile ``key`` under its lock from a fresh read; None when there is nothing to do."""
    kind, namespace, name = key
    outcome: Outcome | None = None
    try:
        with locks.hold(key), telemetry.reconciling(kind) as result:
            body = kube().get(API_VERSION, kind, name, namespace)
            meta = (body or {}).get("metadata") or {}
            if body is None or paused(meta) or meta.get("deletionTimestamp"):
                result[0] = "ok"
                return None
            outcome = work(body)
            publish(body, outcome)
            poller.wrote(key, body, {**(body.get("status") or {}), **outcome.status})
            result[0] = "invalid" if outcome.permanent else "retry" if outcome.retry_after else "ok"
        return outcome
    finally:
        book.done(key, outcome.retry_after if outcome is not None else None)


def publish(body: dict[str, Any], outcome: Outcome) -> None:
    """Writes what changed of the status; Events for a transition of Ready or Archived
    and for notes."""
    meta, old = body["metadata"], body.get("status") or {}
    changed = status_patch(old, outcome.status)
    k = kube()
    if changed:
        k.patch_status(API_VERSION, body["kind"], meta["name"], meta["namespace"], changed)
    was, now = ready_of(old), ready_of(outcome.status)
    telemetry.CONDITION.labels(body["kind"], meta["namespace"], meta["name"]).set(
        1.0 if now[0] == "True" else 0.0
    )
    with suppress(ApiException):  # an Event lost is not worth a failed reconcile
        if was != now and now[0] == "False" and outcome.warning:
            k.event(body, "Warning", now[1], outcome.warning)
        elif was != now and now[0] == "True":
            k.event(body, "Normal", now[1], _ready_message(outcome.status))
        for reason, message in outcome.notes:
            k.event(body, "Normal", reason, message)
        archived = archive_event(old, {**old, **outcome.status})
        if archived is not None:
            k.event(body, *archived)


def _ready_message(status: dict[str, Any]) -> str:
    cond = next(c for c in status["conditions"] if c["type"] == "Ready")
    return str(cond["message"])


def reconcile_topic(body: dict[str, Any]) -> Outcome:
    meta = body["metadata"]
    attempt = book.attempt((TOPIC_KIND, meta["namespace"], meta["name"]))
    outcome = topics.reconcile(kube(), body, cfg, attempt)
    node = topic_node_key(body)
    if outcome.node_changed and node:  # its node's allocated bytes and topic count: at once
        book.nudge(node)
    return outcome


def reconcile_node(body: dict[str, Any]) -> Outcome:
    return nodes.reconcile(kube(), body, cfg, gate)


WORK: dict[str, Callable[[dict[str, Any]], Outcome]] = {
    TOPIC_KIND: reconcile_topic,
    NODE_KIND: reconcile_node,
}


# --- PlateauTopic ------------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, TOPIC_PLURAL)
@kopf.on.create(GROUP, VERSION, TOPIC_PLURAL)
@kopf.on.update(GROUP, VERSION, TOPIC_PLURAL, field="spec")
def topic_changed(name: str, namespace: str | None, **_: Any) -> None:
    if namespace is not None:
        run((TOPIC_KIND, namespace, name), reconcile_topic)


@kopf.on.delete(GROUP, VERSION, TOPIC_PLURAL)
def topic_deleted(name: str, namespace: str | None, body: kopf.Body, **_: Any) -> None:
    if namespace is None:
        return
    key = (TOPIC_KIND, namespace, name)
    plain = _plain(body)
    with locks.hold(key), telemetry.reconciling("PlateauTopicDeletion") as result:
        done, warning, note = topics.delete(kube(), plain, cfg)
        result[0] = "ok" if done else "retry"
    with suppress(ApiException):
        if warning:
            kube().event(plain, "Warning", "DeletionIncomplete", warning)
        if note:
            kube().event(plain, "Normal", *note)
    if not done:
        # kopf retries it; logged at info (RoutineRetries), the deletion wait bounds it
        raise kopf.TemporaryError("the node did not answer; trying again", delay=10)
    node = topic_node_key(plain)
    if note and note[0] == "Deleted" and node:
        book.nudge(node)
    book.forget(key)
    poller.forget(key)
    telemetry.forget(TOPIC_KIND, namespace, name)


# --- PlateauNode -------------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, NODE_PLURAL)
@kopf.on.create(GROUP, VERSION, NODE_PLURAL)
@kopf.on.update(GROUP, VERSION, NODE_PLURAL, field="spec")
def node_changed(name: str, namespace: str | None, **_: Any) -> None:
    if namespace is not None:
        run((NODE_KIND, namespace, name), reconcile_node)


@kopf.on.delete(GROUP, VERSION, NODE_PLURAL, optional=True)  # no finalizer: owners cascade
def node_deleted(name: str, namespace: str | None, **_: Any) -> None:
    key = (NODE_KIND, namespace or "", name)
    book.forget(key)
    poller.forget(key)
    gate.done(key)
    telemetry.forget(NODE_KIND, namespace or "", name)


# --- watch events feed the resync book and the rollout gate ------------------------------


@kopf.on.event(GROUP, VERSION, TOPIC_PLURAL)
def topic_seen(
    name: str, namespace: str | None, type: str | None, event: kopf.RawEvent, **_: Any
) -> None:
    _seen((TOPIC_KIND, namespace or "", name), type, event)


@kopf.on.event(GROUP, VERSION, NODE_PLURAL)
def node_seen(
    name: str,
    namespace: str | None,
    type: str | None,
    status: kopf.Status,
    event: kopf.RawEvent,
    **_: Any,
) -> None:
    key = (NODE_KIND, namespace or "", name)
    _seen(key, type, event)
    progressing: dict[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Progressing"), {}
    )
    if (
        type != "DELETED"
        and progressing.get("reason") == "RollingUpdate"
        and progressing.get("status") == "True"
    ):
        gate.observe(key, True)  # mid-roll, maybe since before this operator started


def _seen(key: Key, event_type: str | None, event: kopf.RawEvent) -> None:
    if event_type == "DELETED":
        book.forget(key)
        poller.forget(key)
        return
    book.see(key)
    obj = event.get("object") if isinstance(event, dict) else None
    if isinstance(obj, dict):
        poller.see(key, dict(obj))


async def _resync_forever() -> None:
    """Reconciles whatever is due, a few at a time, for as long as the operator runs."""
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(RESYNC_WORKERS)

    async def one(key: Key) -> None:
        async with slots:
            try:
                await loop.run_in_executor(None, run, key, WORK[key[0]])
            except Exception as exc:  # one object's failure must not stop the others' resync
                log.warning("resync of %s %s/%s failed: %s", *key, exc)
                book.done(key, None)

    tasks: set[asyncio.Task[None]] = set()
    while True:
        for key in book.take_due():
            task = asyncio.create_task(one(key))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.sleep(1.0)


async def _poll_usage_forever() -> None:
    """Every ``usageSeconds``, each ready node not still being polled is asked once."""
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(max_workers=USAGE_WORKERS, thread_name_prefix="plateau-usage")
    pending: set[asyncio.Future[int]] = set()
    while True:
        for key in poller.take_nodes():
            future = loop.run_in_executor(pool, poller.poll, key)
            pending.add(future)
            future.add_done_callback(pending.discard)
        await asyncio.sleep(cfg.usage_seconds)


def _plain(body: kopf.Body) -> dict[str, Any]:
    return {
        "apiVersion": body.get("apiVersion", API_VERSION),
        "kind": body.get("kind", TOPIC_KIND),
        "metadata": dict(body.metadata),
        "spec": dict(body.spec),
        "status": dict(body.status),
    }
