"""One error shape for every route: JSON ``{"message", "code"}``.

A 409 adds ``reason`` (which rule refused it) and an owner conflict the
stored ``owner``: the fields of ``PlateauError.details``.

plateau's clients parse this body on any non-2xx reply, so engine errors,
FastAPI's validation errors and Starlette's routing errors (404/405) all go
through the handlers installed here instead of FastAPI's defaults (which
answer 422 and ``{"detail": ...}``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request as StarletteRequest

from plateau.protocol import MAX_REQUEST_SIZE_HEADER, RETRY_AFTER_HEADER
from plateau.protocol.errors import Busy, PayloadTooLarge, PlateauError

log = logging.getLogger("plateau.server")


class Unauthorized(PlateauError):
    """Missing or wrong bearer token."""

    status = 401


class UnsupportedMediaType(PlateauError):
    """The append body's Content-Type is not one the node decodes."""

    status = 415


class NotAcceptable(PlateauError):
    """The read's Accept names no reply format the node sends."""

    status = 406


def error_response(
    status: int,
    message: str,
    headers: Mapping[str, str] | None = None,
    details: Mapping[str, object] | None = None,
) -> JSONResponse:
    body = {**(details or {}), "message": message, "code": status}
    return JSONResponse(body, status, headers=headers)


def error_headers(exc: PlateauError) -> dict[str, str]:
    """Headers that let a client act on the error without parsing the message."""
    if isinstance(exc, Busy):
        return {RETRY_AFTER_HEADER: str(max(1, math.ceil(exc.retry_after)))}
    if isinstance(exc, PayloadTooLarge):
        return {MAX_REQUEST_SIZE_HEADER: str(exc.max_bytes)}
    if isinstance(exc, Unauthorized):
        return {"WWW-Authenticate": "Bearer"}
    return {}


def describe_validation_errors(errors: Sequence[Any]) -> str:
    """Flatten pydantic errors into one line that names the offending parameter or field."""
    parts = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        if err.get("type") == "json_invalid":
            parts.append(f"malformed JSON: {(err.get('ctx') or {}).get('error', 'cannot parse')}")
            continue
        if loc and loc[0] in ("query", "path", "header"):
            where = f"{loc[0]} parameter {'.'.join(loc[1:])}"
        elif loc and loc[0] == "body":
            where = ".".join(loc[1:]) or "body"
        else:
            where = ".".join(loc) or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def plateau_error_response(exc: PlateauError, request: StarletteRequest) -> JSONResponse:
    if exc.status >= 500:
        log.warning("%s %s -> %d: %s", request.method, request.url.path, exc.status, exc.message)
    return error_response(exc.status, exc.message, error_headers(exc), exc.details())


def unexpected_error_response(exc: Exception, request: StarletteRequest) -> JSONResponse:
    log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, f"internal error: {type(exc).__name__}")


def response_for(exc: Exception, request: StarletteRequest) -> JSONResponse:
    """The reply to an exception a route raised: its own status for a ``PlateauError``
    (logged at 5xx), else a logged 500. Shared by the event loop's routes and the
    connection threads, so both answer and log a failure the same way."""
    if isinstance(exc, PlateauError):
        return plateau_error_response(exc, request)
    return unexpected_error_response(exc, request)


async def _plateau_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PlateauError)
    return plateau_error_response(exc, request)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(400, describe_validation_errors(exc.errors()))


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    return error_response(exc.status_code, message, exc.headers)


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    return unexpected_error_response(exc, request)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(PlateauError, _plateau_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
