"""Errors the engine raises, each carrying the HTTP status it maps to.

The engine is used by the HTTP server, the CLI and tests; keeping the status on
the exception means one mapping (in ``plateau.server.errors``) serves every
route, and bad input is refused before anything is written.
"""

from __future__ import annotations


class PlateauError(Exception):
    """Base class: ``status`` is the HTTP status, ``message`` is user-facing."""

    status: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def details(self) -> dict[str, object]:
        """Fields the error body carries beside ``message`` and ``code`` (none by default)."""
        return {}


class InvalidInput(PlateauError):
    """The request itself is wrong (name, schema, body, parameter)."""

    status = 400


class NotFound(PlateauError):
    status = 404


class Conflict(PlateauError):
    """The request is valid but contradicts node state; nothing was changed.

    A 409 always says which rule refused it in ``reason`` (a subclass per
    rule), so a program (the operator) can branch on it without parsing the
    message: a budget over capacity calls for a smaller budget, an owner
    conflict for leaving the topic alone.
    """

    status = 409
    reason = "Conflict"

    def details(self) -> dict[str, object]:
        return {"reason": self.reason}


class OverBudget(Conflict):
    """The topic's budget, raised or new, does not fit the node's capacity minus reserve."""

    reason = "OverBudget"


class PartitionsDecrease(Conflict):
    """Fewer partitions than the topic has: records stay at their indexes, so never."""

    reason = "PartitionsDecrease"


class OwnerConflict(Conflict):
    """Another owner (or none, for a claim without ``adopt``) holds the topic.

    ``owner`` is the stored owner as JSON (``None`` for an ownerless topic), so
    the refused claimant can say who holds it.
    """

    reason = "OwnerConflict"

    def __init__(self, message: str, owner: dict[str, str] | None) -> None:
        super().__init__(message)
        self.owner = owner

    def details(self) -> dict[str, object]:
        return {"reason": self.reason, "owner": self.owner}


class PayloadTooLarge(PlateauError):
    status = 413

    def __init__(self, message: str, max_bytes: int) -> None:
        super().__init__(message)
        self.max_bytes = max_bytes


class Busy(PlateauError):
    """Load shedding: the append was refused whole; retry after ``retry_after`` seconds."""

    status = 429

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ArchiveBehind(Busy):
    """An archive-required topic is at its budget and its oldest segments are not archived
    yet: the append is refused (nothing is deleted unarchived) until uploads catch up."""

    reason = "ArchiveBehind"

    def details(self) -> dict[str, object]:
        return {"reason": self.reason}


class Unavailable(PlateauError):
    """The node cannot take writes right now (shutting down, disk below its free-space floor)."""

    status = 503


class InsufficientStorage(PlateauError):
    """The volume is full (ENOSPC): writes are refused, reads go on."""

    status = 507
