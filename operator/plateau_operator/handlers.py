"""The kopf handlers: small, idempotent, state in ``status``; the work is in ``nodes``/``topics``.

Each handler reconciles the whole desired state (create, update, resume after
an operator restart, and a timer that puts back what a node lost), writes the
status it computed, emits an Event for a warning, and turns "try again" into a
``TemporaryError`` with the outcome's delay (kopf retries with it) and "this
cannot work as written" into a ``PermanentError``. The annotation
``plateau.dev/paused: "true"`` stops reconciliation of a resource.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import kopf
from prometheus_client import start_http_server

from plateau_operator import nodes, telemetry, topics
from plateau_operator.kube import Kube
from plateau_operator.nodeaccess import API_VERSION, paused
from plateau_operator.spec import DEFAULT_IMAGE
from plateau_operator.status import Outcome

GROUP, VERSION = "plateau.dev", "v1alpha1"
RESYNC_SECONDS = float(os.environ.get("PLATEAU_OPERATOR_RESYNC_SECONDS", "60"))
IMAGE = os.environ.get("PLATEAU_OPERATOR_NODE_IMAGE", DEFAULT_IMAGE)
METRICS_PORT = int(os.environ.get("PLATEAU_OPERATOR_METRICS_PORT", "8080"))  # 0: none
# A reconcile running longer than this is wedged: the liveness probe fails.
STALL_SECONDS = float(os.environ.get("PLATEAU_OPERATOR_STALL_SECONDS", "300"))
_kube: Kube | None = None


def kube() -> Kube:
    global _kube
    if _kube is None:
        _kube = Kube()
    return _kube


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.INFO
    logging.captureWarnings(True)  # warnings become log records too: every line is JSON
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per node call is noise
    settings.watching.server_timeout = 300
    kube()
    if METRICS_PORT:
        start_http_server(METRICS_PORT)


@kopf.on.probe(id="reconcileSeconds")
def probe_progress(**_: Any) -> float:
    """Age of the oldest running reconcile; fails the liveness probe past the bound."""
    return telemetry.check_progress(STALL_SECONDS)


@kopf.on.probe(id="apiServer")
def probe_api_server(**_: Any) -> str:
    """The API server's version, asked now: fails the probe when it cannot be reached."""
    return kube().server_version()


def _finish(outcome: Outcome, patch: kopf.Patch, body: kopf.Body, result: list[str]) -> None:
    patch.status.update(outcome.status)
    result[0] = "invalid" if outcome.permanent else "retry" if outcome.retry_after else "ok"
    ready = next((c for c in outcome.status.get("conditions", []) if c["type"] == "Ready"), None)
    if ready is not None:
        meta = body.metadata
        up = 1.0 if ready["status"] == "True" else 0.0
        telemetry.CONDITION.labels(body["kind"], meta.namespace or "", meta.name or "").set(up)
    if outcome.warning:
        kopf.warn(body, reason="ReconcileFailed", message=outcome.warning)
    if outcome.permanent:
        raise kopf.PermanentError(outcome.warning or "invalid")
    if outcome.retry_after is not None:
        # the status is written by kopf even when the handler asks to be retried
        raise kopf.TemporaryError("not reconciled yet", delay=outcome.retry_after)


# --- PlateauTopic -------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, "plateautopics")
@kopf.on.create(GROUP, VERSION, "plateautopics")
@kopf.on.update(GROUP, VERSION, "plateautopics", field="spec")
@kopf.timer(GROUP, VERSION, "plateautopics", interval=RESYNC_SECONDS, idle=RESYNC_SECONDS)
def reconcile_topic(
    name: str,
    namespace: str | None,
    spec: kopf.Spec,
    status: kopf.Status,
    meta: kopf.Meta,
    body: kopf.Body,
    patch: kopf.Patch,
    retry: int = 0,  # the timer passes none
    **_: Any,
) -> None:
    if paused(dict(meta)) or namespace is None:
        return
    with telemetry.reconciling("PlateauTopic") as result:
        outcome = topics.reconcile(
            kube(),
            name,
            namespace,
            dict(spec),
            dict(status),
            int(meta.get("generation", 0)),
            IMAGE,
            attempt=retry,
        )
        _finish(outcome, patch, body, result)


@kopf.on.delete(GROUP, VERSION, "plateautopics")
def delete_topic(name: str, namespace: str | None, spec: kopf.Spec, retry: int, **_: Any) -> None:
    if namespace is None:
        return
    with telemetry.reconciling("PlateauTopicDeletion") as result:
        if not topics.delete(kube(), name, namespace, dict(spec), IMAGE, retry):
            result[0] = "retry"
            raise kopf.TemporaryError("the node did not answer; trying again", delay=10)
        result[0] = "ok"
    telemetry.forget("PlateauTopic", namespace, name)


# --- PlateauNode --------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, "plateaunodes")
@kopf.on.create(GROUP, VERSION, "plateaunodes")
@kopf.on.update(GROUP, VERSION, "plateaunodes", field="spec")
@kopf.timer(GROUP, VERSION, "plateaunodes", interval=RESYNC_SECONDS, idle=RESYNC_SECONDS)
def reconcile_node(meta: kopf.Meta, body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    if paused(dict(meta)) or _paused_now("PlateauNode", meta):
        return
    with telemetry.reconciling("PlateauNode") as result:
        adopt = lambda obj: kopf.adopt(obj, owner=body)  # noqa: E731
        outcome = nodes.reconcile(kube(), _plain(body), IMAGE, adopt)
        _finish(outcome, patch, body, result)


@kopf.on.delete(GROUP, VERSION, "plateaunodes", optional=True)  # no finalizer: owners cascade
def forget_node(name: str, namespace: str | None, **_: Any) -> None:
    telemetry.forget("PlateauNode", namespace or "", name)


def _paused_now(kind: str, meta: kopf.Meta) -> bool:
    """The pause annotation as the API server has it now.

    A timer can fire with the body of the watch event before the annotation's
    (found on the cluster: a node paused and at once scaled to 0 was scaled
    back by a timer that had not seen the pause yet). One GET before acting
    closes that window for the StatefulSet, whose replicas a person changes
    by hand while paused.
    """
    name, namespace = meta.get("name"), meta.get("namespace")
    if not name or not namespace:
        return False
    current = kube().get(API_VERSION, kind, str(name), str(namespace))
    return current is None or paused(dict(current.get("metadata") or {}))


def _plain(body: kopf.Body) -> dict[str, Any]:
    out: dict[str, Any] = {
        "metadata": dict(body.metadata),
        "spec": dict(body.spec),
        "status": dict(body.status),
    }
    return out
