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

from plateau_operator import nodes, topics
from plateau_operator.kube import Kube
from plateau_operator.nodeaccess import paused
from plateau_operator.spec import DEFAULT_IMAGE
from plateau_operator.status import Outcome

GROUP, VERSION = "plateau.dev", "v1alpha1"
RESYNC_SECONDS = float(os.environ.get("PLATEAU_OPERATOR_RESYNC_SECONDS", "60"))
IMAGE = os.environ.get("PLATEAU_OPERATOR_NODE_IMAGE", DEFAULT_IMAGE)
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
    settings.watching.server_timeout = 300
    kube()


def _finish(outcome: Outcome, patch: kopf.Patch, body: kopf.Body) -> None:
    patch.status.update(outcome.status)
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
    _finish(outcome, patch, body)


@kopf.on.delete(GROUP, VERSION, "plateautopics")
def delete_topic(name: str, namespace: str | None, spec: kopf.Spec, retry: int, **_: Any) -> None:
    if namespace is None:
        return
    if not topics.delete(kube(), name, namespace, dict(spec), IMAGE, retry):
        raise kopf.TemporaryError("the node did not answer; trying again", delay=10)


# --- PlateauNode --------------------------------------------------------------------


@kopf.on.resume(GROUP, VERSION, "plateaunodes")
@kopf.on.create(GROUP, VERSION, "plateaunodes")
@kopf.on.update(GROUP, VERSION, "plateaunodes", field="spec")
@kopf.timer(GROUP, VERSION, "plateaunodes", interval=RESYNC_SECONDS, idle=RESYNC_SECONDS)
def reconcile_node(meta: kopf.Meta, body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    if paused(dict(meta)):
        return
    outcome = nodes.reconcile(kube(), _plain(body), IMAGE, lambda obj: kopf.adopt(obj, owner=body))
    _finish(outcome, patch, body)


def _plain(body: kopf.Body) -> dict[str, Any]:
    out: dict[str, Any] = {
        "metadata": dict(body.metadata),
        "spec": dict(body.spec),
        "status": dict(body.status),
    }
    return out
