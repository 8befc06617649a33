"""The ``plateau`` command: run a node, and talk to one over its HTTP API.

Errors are one clear line on stderr and exit code 2 (``fail``), never a traceback.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
import yaml
from pydantic import BaseModel, ValidationError

from plateau.cli_options import (
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    Remote,
    RootTimeout,
    RootToken,
    RootUrl,
    resolve,
)
from plateau.cli_options import Timeout as TimeoutOpt
from plateau.cli_options import Token as TokenOpt
from plateau.cli_options import Url as UrlOpt
from plateau.protocol import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from plateau.spark.kube.conf import MOUNT_PATH

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
    if isinstance(value, BaseModel):  # an admin reply (plateau.protocol.replies)
        value = value.model_dump(mode="json")
    typer.echo(json.dumps(value, indent=2, sort_keys=True))


@app.command()
def node(
    data_dir: Annotated[Path | None, typer.Option(help="Data directory [./data].")] = None,
    bind: Annotated[str | None, typer.Option(help="HOST:PORT [127.0.0.1:3030].")] = None,
    config: Annotated[
        Path | None, typer.Option(help="YAML settings file (also PLATEAU_CONFIG).")
    ] = None,
    token: Annotated[
        str | None, typer.Option(help="Bearer token for writes and admin.", envvar=None)
    ] = None,
    capacity_bytes: Annotated[
        int | None, typer.Option(help="Bytes allocatable to topics (default: the volume size).")
    ] = None,
    durability: Annotated[str | None, typer.Option(help="fsync (default) or relaxed.")] = None,
) -> None:
    """Run a node on a local data directory."""
    from plateau.settings import load_settings

    storage: dict[str, Any] = {}
    server: dict[str, Any] = {}
    auth: dict[str, Any] = {}
    if data_dir is not None:
        storage["data_dir"] = data_dir
    if capacity_bytes is not None:
        storage["capacity_bytes"] = capacity_bytes
    if durability is not None:
        storage["durability"] = {"mode": durability}
    if bind is not None:
        server["bind"] = bind
    if token is not None:
        auth["token"] = token
    overrides = {k: v for k, v in (("storage", storage), ("server", server), ("auth", auth)) if v}
    try:
        settings = load_settings(config, **overrides)
    except (ValidationError, FileNotFoundError, ValueError) as exc:
        fail(f"bad settings: {exc}")
    from plateau.server.run import run_node

    run_node(settings)


@app.command()
def topics(
    ctx: typer.Context,
    url: UrlOpt = None,
    token: TokenOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """List the node's topics, one per line."""
    with connect(ctx, url, token, timeout) as client:
        for name in client.topics():
            typer.echo(name)


@app.command("node-info")
def node_info(
    ctx: typer.Context,
    url: UrlOpt = None,
    token: TokenOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Show the node's capacity, allocated and used bytes."""
    with connect(ctx, url, token, timeout) as client:
        print_json(client.node_info())


@app.command()
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


@app.command()
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


@app.command()
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


@topic_app.command("set")
def topic_set(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument()],
    partitions: Annotated[int | None, typer.Option(min=1, help="Number of partitions.")] = None,
    max_bytes: Annotated[
        str | None, typer.Option(help="Retention budget over all partitions, e.g. 10Gi.")
    ] = None,
    max_age: Annotated[
        str | None, typer.Option(help="Delete data older than this, e.g. 7d; 'none' clears.")
    ] = None,
    segment_format: Annotated[
        str | None, typer.Option("--format", help="Segment format: parquet or arrow.")
    ] = None,
    segment_max_rows: Annotated[int | None, typer.Option(min=1)] = None,
    segment_max_bytes: Annotated[str | None, typer.Option(help="e.g. 64Mi.")] = None,
    segment_max_age: Annotated[str | None, typer.Option(help="e.g. 60s.")] = None,
    compression: Annotated[
        str | None, typer.Option(help="Segment compression: zstd, lz4 or none.")
    ] = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Create a topic or change the settings given; others keep their values."""
    from plateau.client.topic_settings import TopicSettings
    from plateau.client.units import parse_duration, parse_quantity

    def option(name: str, text: str | None, parse: Any) -> Any:
        try:
            return None if text is None else parse(text)
        except ValueError as exc:
            fail(f"--{name}: {exc}")

    if segment_format not in (None, "parquet", "arrow"):
        fail(f"--format {segment_format!r}: choose parquet or arrow")
    settings = TopicSettings(
        partitions=partitions,
        max_bytes=option("max-bytes", max_bytes, parse_quantity),
        segment_format=segment_format,
        segment_max_rows=segment_max_rows,
        segment_max_bytes=option("segment-max-bytes", segment_max_bytes, parse_quantity),
        segment_max_age_seconds=option("segment-max-age", segment_max_age, parse_duration),
        segment_compression=compression,
    )
    if max_age is not None and max_age.strip().lower() in ("none", "null", "off"):
        settings["max_age_seconds"] = None  # clears the age limit; left out keeps it
    elif max_age is not None:
        seconds = option("max-age", max_age, parse_duration)
        if seconds != int(seconds) or seconds <= 0:
            fail(f"--max-age: {max_age!r} must be a positive whole number of seconds")
        settings["max_age_seconds"] = int(seconds)
    with connect(ctx, url, token, timeout) as client:
        print_json(client.put_topic(topic, **settings))


@topic_app.command("get")
def topic_get(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument()],
    url: UrlOpt = None,
    token: TokenOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Show a topic's configuration and usage as JSON."""
    with connect(ctx, url, token, timeout) as client:
        print_json(client.get_topic(topic))


@topic_app.command("delete")
def topic_delete(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument()],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Delete a topic and all of its data."""
    if not yes and not typer.confirm(f"Delete topic {topic!r} and all its data?"):
        fail("not deleted")
    with connect(ctx, url, token, timeout) as client:
        client.delete_topic(topic)
    typer.echo(f"deleted topic {topic}", err=True)


@app.command("spark-conf")
def spark_conf(
    node: Annotated[str, typer.Option(help="The PlateauNode (or StatefulSet) to read.")],
    namespace: Annotated[str, typer.Option(help="Its namespace, where the job runs.")],
    mode: Annotated[
        str,
        typer.Option(
            help="path: mount the node's volume read-only (no token needed); url: read "
            "over the node's Service, with its read token from its Secret as $PLATEAU_TOKEN "
            "and its address as $PLATEAU_URL (no volume, pods run anywhere).",
        ),
    ] = "path",
    mount_path: Annotated[
        str,
        typer.Option(help="Where Spark's pods see the volume (the reader's 'path'; path mode)."),
    ] = MOUNT_PATH,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="conf (spark-submit --conf lines), properties or "
            "sparkapplication (Kubeflow spark-operator fragment).",
        ),
    ] = "conf",
    pod_template_out: Annotated[
        Path | None,
        typer.Option(
            help="Where to write the pod template with the node affinity (path mode; "
            "conf, properties); default ./plateau-NODE-pod-template.yaml."
        ),
    ] = None,
    service_account: Annotated[
        str,
        typer.Option(
            help="The driver pod's ServiceAccount (the chart's spark.jobNamespaces "
            "creates plateau-spark)."
        ),
    ] = "plateau-spark",
    sizing: Annotated[
        bool,
        typer.Option(
            "--sizing/--no-sizing",
            help="Size the driver and executors for the Kubernetes nodes seen "
            "(needs list nodes); --no-sizing: Spark's own defaults, or the sizes given.",
        ),
    ] = True,
    executor_instances: Annotated[
        int | None, typer.Option(min=1, help="spark.executor.instances (default: sized).")
    ] = None,
    driver_memory: Annotated[
        str | None, typer.Option(help="spark.driver.memory, e.g. 512m, 2g (default: sized).")
    ] = None,
    executor_memory: Annotated[
        str | None, typer.Option(help="spark.executor.memory (default: sized).")
    ] = None,
    driver_request_cores: Annotated[
        str | None,
        typer.Option(help="spark.kubernetes.driver.request.cores, e.g. 0.25 (default: sized)."),
    ] = None,
    executor_request_cores: Annotated[
        str | None,
        typer.Option(help="spark.kubernetes.executor.request.cores (default: sized)."),
    ] = None,
    kubeconfig: Annotated[str | None, typer.Option(envvar="KUBECONFIG")] = None,
    context: Annotated[str | None, typer.Option(help="The kubeconfig context.")] = None,
) -> None:
    """Print the Spark-on-Kubernetes settings of a job that reads a node: spark.master
    (the kubeconfig's API server), cluster mode, the driver's ServiceAccount, requests
    that fit the nodes, and the node's volume mounted read-only (--mode path) or its
    Service with the read token from its Secret (--mode url; the token itself is never
    read nor printed)."""
    from plateau.spark.kube import conf as kubeconf
    from plateau.spark.kube import job as kubejob
    from plateau.spark.kube import sizing as kubesizing

    if fmt not in kubeconf.FORMATS:
        fail(f"--format must be one of {', '.join(kubeconf.FORMATS)}, not {fmt!r}")
    if mode not in kubeconf.MODES:
        fail(f"--mode must be one of {', '.join(kubeconf.MODES)}, not {mode!r}")
    if mode == "url" and pod_template_out is not None:
        fail("--pod-template-out is for --mode path: url mode mounts nothing, pins nothing")
    try:
        given = kubesizing.overrides(
            instances=executor_instances,
            driver_memory=driver_memory,
            executor_memory=executor_memory,
            driver_cores=driver_request_cores,
            executor_cores=executor_request_cores,
        )
    except kubesizing.SizingError as exc:
        fail(str(exc))
    comments: list[str] = []
    try:
        api = kubeconf.connect(kubeconfig, context)
        if mode == "url":
            access = kubeconf.fetch_access(node, namespace, kubeconfig, context, api)
            job = kubejob.job(api, namespace, context, service_account, None, sizing, given)
            text = kubeconf.render_url(access, fmt, job)
            comments = kubeconf.url_comments(access)
        else:
            place = kubeconf.fetch(node, namespace, kubeconfig, context, api)
            host = place.host if place.needs_affinity else None
            job = kubejob.job(api, namespace, context, service_account, host, sizing, given)
            template = None
            if fmt != "sparkapplication" and place.needs_affinity:
                target = pod_template_out or Path(f"plateau-{node}-pod-template.yaml")
                target.write_text(yaml.safe_dump(kubeconf.pod_template(place), sort_keys=False))
                template = str(target.resolve())
            text = kubeconf.render(place, fmt, mount_path, template, job)
            comments = kubeconf.comments(place, mount_path)
    except kubeconf.SparkConfError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write the pod template: {exc}")
    if fmt == "conf":  # stdout is only the arguments, for $(plateau spark-conf ...)
        for line in comments + kubejob.job_comments(job):
            typer.echo(f"# {line}", err=True)
    else:
        for warning in job.warnings:
            typer.echo(f"warning: {warning}", err=True)
    typer.echo(text, nl=False)


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
