"""What every command shares: the ``plateau`` app and its ``topic`` group, the connection
options before the command, one-line errors (``fail``) and a client that turns failures into
them (``connect``)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from pydantic import BaseModel

from plateau.cli_options import (
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    Remote,
    RootTimeout,
    RootToken,
    RootUrl,
    resolve,
)

if TYPE_CHECKING:
    from plateau.client import PlateauClient


app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="plateau: run a columnar data aggregator node, and talk to one over its HTTP API.",
)
topic_app = typer.Typer(
    no_args_is_help=True, help="Create, change, show and delete topics (admin API)."
)
app.add_typer(topic_app, name="topic")


@app.callback()
def _root(
    ctx: typer.Context,
    url: RootUrl = DEFAULT_URL,
    token: RootToken = None,
    timeout: RootTimeout = DEFAULT_TIMEOUT,
) -> None:
    """plateau: a columnar data aggregator node and its tools."""
    ctx.obj = Remote(url, token, timeout)


def fail(message: str) -> NoReturn:
    """Print one ``error:`` line (multi-line messages are joined) and exit with code 2."""
    line = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    typer.echo(f"error: {line}", err=True)
    raise typer.Exit(2)


@contextmanager
def connect(
    ctx: typer.Context, url: str | None, token: str | None, timeout: float | None
) -> Iterator[PlateauClient]:
    """A client for the command (its connection options over those before it, see
    ``plateau.cli_options``), turning every expected failure into one ``error:`` line."""
    from plateau.client import PlateauClient, PlateauClientError
    from plateau.client.file_formats import FileFormatError

    try:
        remote = resolve(ctx, url, token, timeout)
        with PlateauClient(remote.url, token=remote.token, timeout=remote.timeout) as client:
            yield client
    except PlateauClientError as exc:
        fail(str(exc))
    except FileFormatError as exc:
        fail(str(exc))
    except BrokenPipeError:
        # The reader went away (``plateau tail t | head``): stop quietly, as ``cat`` does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(1) from None
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        fail(f"cannot access{where}: {exc.strerror or exc}")
    except ValueError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def print_json(value: Any) -> None:
    if isinstance(value, BaseModel):  # an admin reply: the keys the node sent, no more
        value = value.model_dump(mode="json", exclude_unset=True)
    typer.echo(json.dumps(value, indent=2, sort_keys=True))
