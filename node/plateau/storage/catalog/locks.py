"""The node's lock order, declared in one place and checked in debug runs.

Every lock the storage engine holds while it may take another one has a rank
here. A thread takes locks only in increasing rank: holding a lock of rank R
it may take a lock of a higher rank, never one of rank R or lower. The ranks
(lowest first) and why each sits where it does:

``ADMIN``       topic create/update/delete, one at a time. Held across the
                manifest write, retention and snapshot of that change, so it
                comes first; appends never take it (but the first append to a
                new topic, holding nothing).
``RETENTION``   one topic's retention pass: plan and manifest deletes (the
                snapshot is written and the files unlinked after it is released).
``PARTITION``   one partition's writer state (open segment, sealed list).
                Appends write the open segment under it: a narrow lock.
``MANIFEST``    the SQLite connection.
``TOPICS``, ``TOPIC``   the engine's topic dict and one topic's partition dict:
                leaves. Held only to read or change the dict, never across I/O,
                retention or sealing, and nothing is taken under them.

Locks without a rank (the decoded read cache, group commit, progress,
memory accounting, and the archive's: the uploader's work sets, the topic
states, the S3 client handle, the archived-segment lists and the archive read
cache) are leaves too: they take no ranked lock while held, and no network
call to the archive is ever made under any lock.
(``snapshot.json`` is written by whichever thread asked first, through a group
commit, holding no lock: one write serves every seal and deletion that asked
meanwhile, and writes never overlap.)

With ``PLATEAU_LOCK_CHECK=1`` in the environment (the test suite sets it),
``ranked`` returns a lock that raises ``LockOrderError`` on any acquisition out
of order, at the point where the inversion is written, whether or not the
interleaving that would deadlock happens in that run. Without it, ``ranked``
returns a plain ``threading.Lock``: no cost on the append path.
"""

from __future__ import annotations

import os
import threading
from enum import IntEnum
from typing import Any


class Rank(IntEnum):
    ADMIN = 10
    RETENTION = 20
    PARTITION = 40
    MANIFEST = 50
    TOPICS = 90
    TOPIC = 91


class LockOrderError(AssertionError):
    """A lock was taken out of the declared order: a deadlock waiting to happen."""


CHECK_ENV = "PLATEAU_LOCK_CHECK"
_held = threading.local()


def checking() -> bool:
    return os.environ.get(CHECK_ENV, "") not in ("", "0", "false")


class CheckedLock:
    """A ``threading.Lock`` that knows its rank and checks it against the thread's held locks."""

    def __init__(self, rank: Rank, name: str) -> None:
        self.rank = rank
        self.name = name
        self._lock = threading.Lock()
        self._owner: int | None = None

    def _stack(self) -> list[CheckedLock]:
        stack: list[CheckedLock] | None = getattr(_held, "stack", None)
        if stack is None:
            stack = _held.stack = []
        return stack

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        stack = self._stack()
        if stack and stack[-1].rank >= self.rank:
            top = stack[-1]
            raise LockOrderError(
                f"lock order violated: taking {self.name} (rank {self.rank.name}) while "
                f"holding {top.name} (rank {top.rank.name}); see plateau.storage.catalog.locks"
            )
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._owner = threading.get_ident()
            stack.append(self)
        return got

    def release(self) -> None:
        stack = self._stack()
        # Condition.wait releases a lock that need not be on top (it is, in this code)
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is self:
                del stack[i]
                break
        self._owner = None
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def _is_owned(self) -> bool:  # threading.Condition asks this
        return self._owner == threading.get_ident()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def ranked(rank: Rank, name: str) -> Any:
    """A lock of ``rank``: checked when ``PLATEAU_LOCK_CHECK`` is set, else a plain Lock."""
    if checking():
        return CheckedLock(rank, name)
    return threading.Lock()
