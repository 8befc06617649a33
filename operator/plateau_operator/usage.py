"""Status that keeps up with ingest: each node's usage polled into its and its topics' status.

Appends change a topic's usage without any Kubernetes event, so reconciles
alone (every ``resyncSeconds``) would leave ``kubectl get pt``'s USED a minute
behind. Every ``usageSeconds`` the operator asks each ready node once
(``GET /admin/node?topics=true``: the node's figures and every topic's usage)
and patches only the statuses whose figures changed: a status that did not
change is never written, so its resourceVersion stays put.

What the poller knows of each object comes from the watch (``see``) and from
the reconciles' own writes (``wrote``): the status as last seen, whether the
object is Ready (a topic's usage is shown only by the PlateauTopic that owns
the node's topic), and for a node the body that says how to reach it. The
address and token found for a node are kept until a call fails (a new pod, a
rotated token), then looked up again from the API server.

Concurrency: at most one poll per node at a time (``_polling``), in the
caller's own thread pool, so a slow node never holds a reconcile's thread. A
poll writes an object's status only under that object's lock, taken without
waiting (a reconcile running now writes fresher figures itself), and never
over figures a reconcile wrote after the poll asked the node.

Lock order: ``_lock`` is a leaf (dictionary updates only, no I/O); an object
lock (``serial.ObjectLocks``) may be held when ``_lock`` is taken, never the
reverse.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from plateau.client.errors import PlateauClientError
from plateau.protocol.replies import TopicUsage
from plateau_operator.archive_status import archive_event, archive_status
from plateau_operator.crd import API_VERSION, NODE_KIND, TOPIC_KIND
from plateau_operator.kube import Kube
from plateau_operator.nodeaccess import NoAccess, Target, client_for, paused, target
from plateau_operator.serial import Key, ObjectLocks
from plateau_operator.settings import OperatorSettings
from plateau_operator.spec import InvalidSpec, topic_node_key
from plateau_operator.status import node_usage, ready_of, status_patch, topic_usage

log = logging.getLogger("plateau_operator.usage")


@dataclass
class _Seen:
    body: dict[str, Any]  # the object as last seen (metadata, spec, status)
    written: float = 0.0  # monotonic time a reconcile last wrote (or confirmed) its status

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.body.get("status") or {})

    def live(self) -> bool:
        """Ready, and neither paused nor being deleted: its figures are the operator's to show."""
        meta = self.body.get("metadata") or {}
        return (
            ready_of(self.status)[0] == "True"
            and not paused(meta)
            and not meta.get("deletionTimestamp")
        )

    def node_key(self) -> Key | None:
        """A topic's PlateauNode."""
        return topic_node_key(self.body)

    def topic_name(self) -> str:
        meta, spec = self.body.get("metadata") or {}, self.body.get("spec") or {}
        return str(spec.get("topicName") or meta.get("name"))


class UsagePoller:
    def __init__(self, kube: Callable[[], Kube], locks: ObjectLocks, cfg: OperatorSettings) -> None:
        self._kube = kube
        self._locks = locks
        self._cfg = cfg
        self._lock = threading.Lock()
        self._seen: dict[Key, _Seen] = {}
        self._targets: dict[Key, Target] = {}  # nodes: where and with which token it answered
        self._polling: set[Key] = set()

    # --- fed by the watch and the reconciles ---------------------------------------------

    def see(self, key: Key, obj: dict[str, Any]) -> None:
        """A watch event's object (newest first-hand state of its status)."""
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                self._seen[key] = _Seen(obj)
            else:
                seen.body = obj

    def forget(self, key: Key) -> None:
        with self._lock:
            self._seen.pop(key, None)
            self._targets.pop(key, None)

    def wrote(self, key: Key, body: dict[str, Any], status: dict[str, Any]) -> None:
        """A reconcile (under ``key``'s lock) read ``body`` and left its status ``status``."""
        with self._lock:
            self._seen[key] = _Seen({**body, "status": status}, written=time.monotonic())
            if key[0] == NODE_KIND and ready_of(status)[0] != "True":
                self._targets.pop(key, None)  # look the node up again once it is back

    # --- the poll -----------------------------------------------------------------------

    def take_nodes(self) -> list[Key]:
        """Ready nodes not being polled now; each marked as being polled (``poll`` clears)."""
        with self._lock:
            keys = [
                k
                for k, s in self._seen.items()
                if k[0] == NODE_KIND and k not in self._polling and s.live()
            ]
            self._polling.update(keys)
            return sorted(keys)

    def polling(self) -> set[Key]:
        with self._lock:
            return set(self._polling)

    def poll(self, key: Key) -> int:
        """Asks node ``key`` once for its usage; writes the statuses that changed (how many)."""
        try:
            return self._poll(key)
        except Exception as exc:  # one node's trouble must not end the polls of the others
            log.warning("usage poll of %s %s/%s failed: %s", *key, exc)
            return 0
        finally:
            with self._lock:
                self._polling.discard(key)

    def _poll(self, key: Key) -> int:
        started = time.monotonic()
        with self._lock:
            node = self._seen.get(key)
            if node is None:
                return 0
            body, reach = node.body, self._targets.get(key)
            topics = {
                k: s.topic_name()
                for k, s in self._seen.items()
                if k[0] == TOPIC_KIND and s.node_key() == key and s.live()
            }
        try:
            if reach is None:
                cfg = self._cfg
                reach = target(self._kube(), body, cfg.node_image, cfg.allow_endpoint_override)
            with client_for(reach) as client:
                info = client.node_info(topics=True)
        except (PlateauClientError, NoAccess, InvalidSpec, ApiException) as exc:
            log.debug("usage poll of %s %s/%s: %s", *key, exc)
            with self._lock:
                self._targets.pop(key, None)
            return 0
        with self._lock:
            if key in self._seen:
                self._targets[key] = reach
        writes: list[tuple[Key, dict[str, Any], TopicUsage | None]] = [
            (key, node_usage(info), None)
        ]
        usage = info.topic_usage or {}
        writes += [
            (k, {"usage": topic_usage(usage[name])}, usage[name])
            for k, name in sorted(topics.items())
            if name in usage
        ]
        return sum(self._write(k, status, started, u) for k, status, u in writes)

    def _write(
        self, key: Key, status: dict[str, Any], started: float, usage: TopicUsage | None = None
    ) -> bool:
        """``usage``: a topic's, whose archive (``Archived``, ``status.archive``) is merged
        into ``status`` here, over the status as it is now (the conditions list is written
        whole: one computed from an older status would undo a reconcile's ``Ready``)."""
        with self._locks.hold(key, timeout=0) as held:
            if not held:
                return False  # a reconcile of it runs now and writes fresher figures
            with self._lock:
                seen = self._seen.get(key)
                if seen is None or seen.written > started or not seen.live():
                    return False
                before = seen.status
                meta = seen.body.get("metadata") or {}
                body = dict(seen.body)
            if usage is not None:
                generation = int(meta.get("generation") or 0)
                status = {**status, **archive_status(before, usage, generation)}
            patch = status_patch(before, status)
            if not patch:
                return False
            try:
                self._kube().patch_status(
                    API_VERSION, key[0], str(meta.get("name")), str(meta.get("namespace")), patch
                )
            except ApiException as exc:  # gone meanwhile, or the API server away: next poll
                log.debug("usage of %s %s/%s not written: %s", *key, exc.reason)
                return False
            with self._lock:
                seen = self._seen.get(key)
                if seen is not None:
                    seen.body = {**seen.body, "status": {**seen.status, **status}}
            event = archive_event(before, {**before, **status})
            if event is not None:
                try:
                    self._kube().event(body, *event)
                except ApiException as exc:  # an Event lost is not worth more
                    log.debug("archive event of %s %s/%s not posted: %s", *key, exc.reason)
            return True
