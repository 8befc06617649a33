"""Terminal output for the CLI: the append progress bar and tables of rows (rich)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import pyarrow as pa
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from plateau.client.file_formats import json_value


@contextmanager
def progress_bar(enabled: bool = True) -> Iterator[Progress]:
    """A rows progress bar on stderr, shown only on a terminal.

    Off a terminal (logs, pipes, tests) it stays silent, so that a failure
    still prints exactly one ``error:`` line.
    """
    console = Console(stderr=True)
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("rows"),
        TimeElapsedColumn(),
        console=console,
        disable=not (enabled and console.is_terminal),
    )
    with progress:
        yield progress


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict | list):
        import json

        return json.dumps(value, default=json_value, ensure_ascii=False)
    try:
        return str(json_value(value))
    except TypeError:
        return str(value)


def rows_table(table: pa.Table, out: TextIO) -> None:
    """Print ``table`` as a boxed table; long cells wrap to the terminal's width."""
    console = Console(file=out, highlight=False, soft_wrap=False)
    view = Table(*table.column_names, show_lines=False)
    for row in table.to_pylist():
        view.add_row(*(_cell(row[name]) for name in table.column_names))
    console.print(view)
