"""The ``plateau`` command: run a node, and talk to one over its HTTP API.

One module per command group (``node``, ``topics``: the admin API, ``data``:
append/read/tail, ``spark``: spark-conf), ``common`` for what they share; the
table below is the command line, in the order ``--help`` lists it. Errors are
one clear line on stderr and exit code 2 (``fail``), never a traceback.
"""

from __future__ import annotations

import sys

import typer

from plateau.cli import data, node, spark, topics
from plateau.cli.common import app, topic_app

app.command()(node.node)
app.command()(topics.topics)
app.command("node-info")(topics.node_info)
app.command()(data.append)
app.command()(data.read)
app.command()(data.tail)
app.command("spark-conf")(spark.spark_conf)
topic_app.command("set")(topics.topic_set)
topic_app.command("get")(topics.topic_get)
topic_app.command("delete")(topics.topic_delete)

__all__ = ["app", "main"]


def main() -> None:
    """Entry point: usage errors become one ``error:`` line and exit code 2 as well."""
    try:
        code = app(standalone_mode=False)
    except typer.TyperException as exc:
        # Typer vendors click: its usage errors are TyperExceptions (with ``ctx`` and ``show``).
        if type(exc).__name__ == "NoArgsIsHelpError":
            typer.echo(exc.format_message(), err=True)
            sys.exit(2)
        command = getattr(getattr(exc, "ctx", None), "command_path", None)
        hint = f" (see '{command} --help')" if command else ""
        typer.echo(f"error: {exc.format_message()}{hint}", err=True)
        sys.exit(2)
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
