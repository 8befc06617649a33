"""Bearer-token checks: writes and admin need the write token, reads the read token.

When only ``auth.token`` is set, reads stay open (plateau's readers send no
token); when ``auth.read_token`` is set, reads need it or the write token.
Health, metrics and docs are always open so probes and scrapers need no secret.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from plateau.server.errors import Unauthorized
from plateau.server.state import node_state

_bearer = HTTPBearer(auto_error=False, description="The node's write token (or read token).")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _matches(given: str, expected: bytes | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (as ``HTTPBearer`` reads it)."""
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def check_token(given: str | None, accepted: list[bytes]) -> None:
    """Raise ``Unauthorized`` unless ``given`` is one of ``accepted`` (none accepted: open)."""
    if not accepted:
        return
    if given is None:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    # Compare with every accepted token, so timing does not tell which one is close.
    ok = [_matches(given, token) for token in accepted]
    if not any(ok):
        raise Unauthorized("wrong bearer token")


def _check(credentials: HTTPAuthorizationCredentials | None, accepted: list[bytes]) -> None:
    check_token(credentials.credentials if credentials is not None else None, accepted)


async def require_write(request: Request, credentials: Credentials) -> None:
    """Admin calls: the write token when one is configured."""
    state = node_state(request)
    _check(credentials, state.write_tokens)


async def require_read(request: Request, credentials: Credentials) -> None:
    state = node_state(request)
    _check(credentials, state.read_tokens)


WriteAccess = Depends(require_write)
ReadAccess = Depends(require_read)
