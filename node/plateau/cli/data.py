"""The data commands: ``plateau append`` (files to a partition), ``read`` (a partition) and
``tail`` (a topic, across partitions, as rows arrive)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from plateau.cli.common import connect, fail
from plateau.cli_options import Timeout as TimeoutOpt
from plateau.cli_options import Token as TokenOpt
from plateau.cli_options import Url as UrlOpt
from plateau.protocol import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE


def append(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="Topic to append to.")],
    partition: Annotated[str, typer.Argument(help="Partition to append to.")],
    files: Annotated[list[Path], typer.Argument(help="Parquet, CSV, JSON lines or Arrow files.")],
    file_format: Annotated[
        str | None,
        typer.Option("--format", help="parquet, csv, jsonl or arrow [from the file name]."),
    ] = None,
    batch_rows: Annotated[int, typer.Option(min=1, help="Rows per request.")] = 10000,
    progress: Annotated[
        bool, typer.Option(help="Progress bar on stderr (a terminal only).")
    ] = True,
    url: UrlOpt = None,
    token: TokenOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Append files to a partition in order; prints the span of indexes they got."""
    from plateau.client import PlateauClientError
    from plateau.client.file_formats import FileFormatError, open_source
    from plateau.client.render import progress_bar

    with connect(ctx, url, token, timeout) as client:
        # Open every file first: a missing or unreadable file fails before anything is sent.
        sources = [open_source(path, file_format, batch_rows) for path in files]
        first: int | None = None
        end = rows = 0
        try:
            with progress_bar(enabled=progress) as bar:
                for source in sources:
                    task = bar.add_task(source.path.name, total=source.total_rows)
                    for table in source.tables:
                        span = client.append(topic, partition, table)
                        first = span.start if first is None else first
                        end, rows = span.end, rows + table.num_rows
                        bar.advance(task, table.num_rows)
        except (PlateauClientError, FileFormatError) as exc:
            if first is None:
                raise
            fail(f"{exc} (before it, {rows} rows were appended at {first}..{end})")
        if first is None:
            fail("the files hold no rows")
        typer.echo(json.dumps({"span": {"start": first, "end": end}, "rows": rows}))


DatasetOpt = Annotated[
    list[str] | None,
    typer.Option("--dataset", "-d", help="Columns or nested paths to return (repeatable) [all]."),
]
ExcludeOpt = Annotated[list[str] | None, typer.Option(help="Paths to drop (repeatable).")]
SeparatorOpt = Annotated[
    str | None,
    typer.Option(help="Split paths on this and flatten structs into columns joined by it."),
]
MaxColumnBytesOpt = Annotated[
    int | None,
    typer.Option(min=0, help="A column larger than this in a reply comes back as nulls."),
]


def _focus(
    dataset: list[str] | None,
    exclude: list[str] | None,
    separator: str | None,
    max_bytes: int | None,
) -> Any:
    """The read's data focus (plateau's dataset parameters), or None for every column."""
    from plateau.protocol.errors import InvalidInput
    from plateau.protocol.focus import DataFocus

    try:
        focus = DataFocus(tuple(dataset or ()), tuple(exclude or ()), separator, max_bytes)
    except InvalidInput as exc:
        fail(exc.message)
    return focus if focus.active else None


def read(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument()],
    partition: Annotated[str, typer.Argument()],
    start: Annotated[int, typer.Option(min=0, help="First index to read.")] = 0,
    limit: Annotated[int | None, typer.Option(min=0, help="Stop after this many rows.")] = None,
    page_size: Annotated[
        int, typer.Option(min=1, max=MAX_PAGE_SIZE, help="Rows per request.")
    ] = DEFAULT_PAGE_SIZE,
    time_start: Annotated[str | None, typer.Option(help="RFC 3339 or epoch ms.")] = None,
    time_end: Annotated[str | None, typer.Option(help="RFC 3339 or epoch ms.")] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="table, jsonl or arrow (arrow needs --output).")
    ] = "table",
    output: Annotated[Path | None, typer.Option(help="Write to this file.")] = None,
    dataset: DatasetOpt = None,
    exclude: ExcludeOpt = None,
    separator: SeparatorOpt = None,
    max_column_bytes: MaxColumnBytesOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Read a partition from --start to its current end (or --limit rows)."""
    from plateau.client.file_formats import json_lines, write_arrow_file
    from plateau.client.render import rows_table

    if output_format not in ("table", "jsonl", "arrow"):
        fail(f"--format {output_format!r}: choose table, jsonl or arrow")
    if output_format == "arrow" and output is None:
        fail("--format arrow writes binary data: give --output FILE")
    focus = _focus(dataset, exclude, separator, max_column_bytes)
    with connect(ctx, url, token, timeout) as client:
        pages = client.read_all(topic, partition, start, page_size, time_start, time_end, focus)
        tables = _limited((page.table for page in pages), limit)
        if output_format == "arrow":
            assert output is not None
            count = write_arrow_file(output, tables)
            typer.echo(f"wrote {count} rows to {output}", err=True)
            return
        with _open_output(output) as out:
            for table in tables:
                if output_format == "jsonl":
                    out.writelines(line + "\n" for line in json_lines(table))
                else:
                    rows_table(table, out)
                out.flush()


def tail(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument()],
    partition: Annotated[
        list[str] | None, typer.Option("--partition", "-p", help="Only these partitions.")
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep polling for rows.")] = False,
    from_end: Annotated[bool, typer.Option(help="Start at the current end.")] = False,
    limit: Annotated[int | None, typer.Option(min=0, help="Stop after this many rows.")] = None,
    page_size: Annotated[int, typer.Option(min=1, max=MAX_PAGE_SIZE)] = DEFAULT_PAGE_SIZE,
    interval: Annotated[float, typer.Option(min=0.01, help="Seconds between polls.")] = 1.0,
    dataset: DatasetOpt = None,
    exclude: ExcludeOpt = None,
    separator: SeparatorOpt = None,
    max_column_bytes: MaxColumnBytesOpt = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Print a topic's rows as JSON lines, across partitions, as they arrive."""
    from plateau.client.file_formats import json_lines

    focus = _focus(dataset, exclude, separator, max_column_bytes)
    with connect(ctx, url, token, timeout) as client:
        cursor: dict[str, int] | None = None
        if from_end:
            spans = client.topic(topic).partitions
            cursor = {name: span.end for name, span in spans.items()}
        pages = client.iterate(
            topic,
            cursor,
            page_size=page_size,
            partition_filter=partition,
            follow=follow,
            poll_interval=interval,
            focus=focus,
        )
        for table in _limited((page.table for page in pages), limit):
            for line in json_lines(table):
                sys.stdout.write(line + "\n")
            sys.stdout.flush()


def _limited(tables: Iterator[Any], limit: int | None) -> Iterator[Any]:
    """Tables up to ``limit`` rows in total; stops pulling pages once it is reached."""
    remaining = limit
    for table in tables:
        if remaining is not None:
            if remaining <= 0:
                return
            table = table.slice(0, remaining)
            remaining -= table.num_rows
        if table.num_rows:
            yield table
        if remaining == 0:
            return


@contextmanager
def _open_output(path: Path | None) -> Iterator[Any]:
    if path is None:
        yield sys.stdout
        return
    with path.open("w", encoding="utf-8") as out:
        yield out
