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


class InvalidInput(PlateauError):
    """The request itself is wrong (name, schema, body, parameter)."""

    status = 400


class NotFound(PlateauError):
    status = 404


class Conflict(PlateauError):
    """The request is valid but contradicts node state (for example a budget that does not fit)."""

    status = 409


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


class Unavailable(PlateauError):
    """The node cannot take writes right now (shutting down, disk below its free-space floor)."""

    status = 503


class InsufficientStorage(PlateauError):
    """The volume is full (ENOSPC): writes are refused, reads go on."""

    status = 507
