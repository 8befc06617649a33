"""Nodes roll one at a time: at most one ready node's pod is replaced at any moment.

A node is one pod: replacing it stops that node's ingest until the new pod is
ready. After an operator upgrade every node that follows the operator's image
wants a new pod at once; so does every node after a chart change to the pod
template. ``RolloutGate`` hands out one slot: a ready node whose pod template
would change takes the slot before its StatefulSet is applied, and gives it
back once its StatefulSet has rolled and the node is ready again. A node that
is not ready needs no slot (it is already down: a fix must not wait). Nodes
seen mid-roll by another operator process (status ``Progressing`` with
``RollingUpdate``, from before a restart) hold the slot too.

Lock order: ``_lock`` is a leaf, held only for set operations (no I/O, no
callbacks); callers may hold an object lock (serial.ObjectLocks) around it.
"""

from __future__ import annotations

import threading

from plateau_operator.serial import Key


class RolloutGate:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rolling: set[Key] = set()

    def request(self, key: Key) -> bool:
        """True when ``key`` may roll now (it then holds the slot until ``done``)."""
        with self._lock:
            if self._rolling - {key}:
                return False
            self._rolling.add(key)
            return True

    def observe(self, key: Key, rolling: bool) -> None:
        """What a status (from a watch event or a reconcile) says about ``key``."""
        with self._lock:
            if rolling:
                self._rolling.add(key)
            else:
                self._rolling.discard(key)

    def done(self, key: Key) -> None:
        self.observe(key, False)

    def holders(self) -> list[Key]:
        with self._lock:
            return sorted(self._rolling)
