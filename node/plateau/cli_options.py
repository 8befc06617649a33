"""The client commands' connection options, ``--url``, ``--token`` and ``--timeout``.

Each is accepted before the command (``plateau --url X topic get t``) and after it
(``plateau topic get t --url X``): users put an option where they think of it, and the
README promised both. The one after the command wins when both are given (it is the
more specific), then the one before, then the environment (``PLATEAU_URL``,
``PLATEAU_TOKEN``), then the default. Only the options before the command read the
environment: an environment value must not beat ``--url`` given before the command.

This module imports nothing heavy, so ``plateau --help`` and ``plateau node`` stay quick.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlsplit

import typer

DEFAULT_URL = "http://127.0.0.1:3030"
DEFAULT_TIMEOUT = 30.0
PANEL = "Connection (also before the command; the one after it wins)"


@dataclass(frozen=True)
class Remote:
    """Where a client command connects."""

    url: str
    token: str | None
    timeout: float


def _check_timeout(value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value:g} is not a positive number of seconds")
    return value


# Before the command: the root callback's options, with the environment as default.
RootUrl = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="PLATEAU_URL",
        help="The node to talk to (also after the command).",
    ),
]
RootToken = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="PLATEAU_TOKEN",
        help="Bearer token for the node's API (also after the command).",
    ),
]
RootTimeout = Annotated[
    float,
    typer.Option(
        "--timeout",
        callback=_check_timeout,
        help="Seconds to wait for each reply (also after the command).",
    ),
]

# After the command: unset unless given, so that the value before the command (or its
# environment default) applies.
Url = Annotated[
    str | None,
    typer.Option(
        "--url",
        show_default=False,
        rich_help_panel=PANEL,
        help=f"The node to talk to [$PLATEAU_URL, else {DEFAULT_URL}].",
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        show_default=False,
        rich_help_panel=PANEL,
        help="Bearer token for the node's API [$PLATEAU_TOKEN].",
    ),
]
Timeout = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        callback=_check_timeout,
        show_default=False,
        rich_help_panel=PANEL,
        help=f"Seconds to wait for each reply [{DEFAULT_TIMEOUT:g}].",
    ),
]


def resolve(
    ctx: typer.Context, url: str | None, token: str | None, timeout: float | None
) -> Remote:
    """The command's own options over those given before it (kept in ``ctx.obj``).

    The address is checked here, when a command is about to connect, not while parsing:
    a stray ``PLATEAU_URL`` must not break ``plateau node`` or ``plateau spark-conf``.
    Raises ValueError (one line) for an address that cannot be a node's.
    """
    before = ctx.find_object(Remote) or Remote(DEFAULT_URL, None, DEFAULT_TIMEOUT)
    remote = Remote(
        url if url is not None else before.url,
        token if token is not None else before.token,
        timeout if timeout is not None else before.timeout,
    )
    parts = urlsplit(remote.url if "://" in remote.url else f"http://{remote.url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"--url (or PLATEAU_URL) {remote.url!r} is not a node's address: give e.g. "
            f"{DEFAULT_URL}"
        )
    return remote
