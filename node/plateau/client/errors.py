"""Errors the client raises, one class per way a caller may want to react.

Every error carries the HTTP status (``None`` when no reply came back) and the
node's own ``message``, so the CLI can print one clear line and a program can
branch on the class (retry a ``BusyError``, create the topic on ``NotFoundError``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from plateau.protocol import MAX_REQUEST_SIZE_HEADER, RETRY_AFTER_HEADER
from plateau.protocol.values import Span


class PlateauClientError(Exception):
    """Base class: ``status`` is the HTTP status or ``None``; ``message`` is user-facing."""

    def __init__(self, status: int | None, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code

    def __str__(self) -> str:
        if self.status is None:
            return self.message
        return f"node answered {self.status}: {self.message}"


class ConnectionFailed(PlateauClientError):
    """No HTTP reply: unreachable node, refused connection, timeout, broken stream.

    ``request_sent`` is False when no connection was made, so the node cannot
    have acted on the request. When it is True for an append, the outcome is
    *unknown*: the node may have written the rows before the connection broke,
    so the client never resends it by itself (that could duplicate records);
    the caller decides, for example by checking the partition's end with
    ``topic()``.
    """

    def __init__(self, message: str, request_sent: bool = True) -> None:
        super().__init__(None, message)
        self.request_sent = request_sent


class BadRequestError(PlateauClientError):
    """400: the request was refused as malformed; nothing was written."""


class AuthError(PlateauClientError):
    """401/403: missing or wrong bearer token."""


class NotFoundError(PlateauClientError):
    """404: unknown topic (or partition) or route."""


class ConflictError(PlateauClientError):
    """409: valid request refused by a rule of the node; nothing was changed.

    ``reason`` names the rule, so a caller can react without parsing the
    message: ``"OverBudget"`` (a new or raised budget does not fit the node),
    ``"PartitionsDecrease"``, ``"OwnerConflict"`` (another owner holds the
    topic; ``owner`` is that owner as a dict, ``None`` for an ownerless topic).
    Both are ``None`` when the node sent no such field (an older node).
    """

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        reason: str | None = None,
        owner: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(status, message, code)
        self.reason = reason
        self.owner = owner


class PayloadTooLargeError(PlateauClientError):
    """413: body over the node's limit; ``max_bytes`` is that limit when the node said it."""

    def __init__(self, status: int, message: str, code: str | None, max_bytes: int | None) -> None:
        super().__init__(status, message, code)
        self.max_bytes = max_bytes


class BusyError(PlateauClientError):
    """429: the writer is busy (load shedding); nothing was written, retry later."""

    def __init__(
        self, status: int, message: str, code: str | None, retry_after: float | None
    ) -> None:
        super().__init__(status, message, code)
        self.retry_after = retry_after


class UnavailableError(PlateauClientError):
    """503 or 507: the node cannot take writes now (shutting down, disk full); reads go on."""


class RecordTooLargeError(PlateauClientError):
    """A single row's encoding is larger than the node accepts: splitting cannot help."""


class PartialAppendError(PlateauClientError):
    """An append split in parts failed after some parts were written.

    ``written`` spans the parts that the node acknowledged (``rows_written``
    rows, the table's first rows), so the caller can resume with the rest.
    """

    def __init__(self, cause: PlateauClientError, written: Span, rows_written: int) -> None:
        super().__init__(
            cause.status,
            f"{cause.message} (after {rows_written} rows were written at {written.start}"
            f"..{written.end})",
            cause.code,
        )
        self.cause = cause
        self.written = written
        self.rows_written = rows_written


_BY_STATUS: dict[int, type[PlateauClientError]] = {
    400: BadRequestError,
    401: AuthError,
    403: AuthError,
    404: NotFoundError,
    409: ConflictError,
    422: BadRequestError,
    503: UnavailableError,
    507: UnavailableError,
}


def _header_number(response: httpx.Response, name: str) -> float | None:
    raw = response.headers.get(name)
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return None  # Retry-After may be an HTTP date; treat it as unknown


def error_body(response: httpx.Response) -> dict[str, Any] | None:
    """The error reply's JSON object, or ``None`` when it is not one."""
    text = response.text
    try:
        body: Any = json.loads(text) if text else None
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def error_message(response: httpx.Response) -> tuple[str, str | None]:
    """The node's ``{"message","code"}``, or a short excerpt of whatever came back."""
    text = response.text
    body = error_body(response)
    if body is not None:
        message = body.get("message") or body.get("detail")
        code = body.get("code")
        if message is not None:
            text_message = message if isinstance(message, str) else json.dumps(message)
            return text_message, code if isinstance(code, str) else None
    excerpt = " ".join(text.split())[:200]
    return excerpt or response.reason_phrase or "no message", None


def error_from_response(response: httpx.Response) -> PlateauClientError:
    """Map an error reply to the most specific client error class."""
    status = response.status_code
    message, code = error_message(response)
    if status == 413:
        size = _header_number(response, MAX_REQUEST_SIZE_HEADER)
        return PayloadTooLargeError(status, message, code, int(size) if size else None)
    if status == 429:
        return BusyError(status, message, code, _header_number(response, RETRY_AFTER_HEADER))
    if status == 409:
        body = error_body(response) or {}
        reason, owner = body.get("reason"), body.get("owner")
        return ConflictError(
            status,
            message,
            code,
            reason if isinstance(reason, str) else None,
            owner if isinstance(owner, dict) else None,
        )
    return _BY_STATUS.get(status, PlateauClientError)(status, message, code)
