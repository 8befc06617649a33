"""The admin commands: ``plateau topics``, ``node-info`` and ``topic set|get|delete``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from plateau.cli.common import connect, fail, print_json
from plateau.cli_options import Timeout as TimeoutOpt
from plateau.cli_options import Token as TokenOpt
from plateau.cli_options import Url as UrlOpt


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


def node_info(
    ctx: typer.Context,
    url: UrlOpt = None,
    token: TokenOpt = None,
    timeout: TimeoutOpt = None,
) -> None:
    """Show the node's capacity, allocated and used bytes."""
    with connect(ctx, url, token, timeout) as client:
        print_json(client.node_info())


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
    archive: Annotated[
        bool | None,
        typer.Option(
            "--archive/--no-archive",
            help="Archive the topic's sealed segments to the node's object storage "
            "(storage.archive.url); the node refuses it without one.",
        ),
    ] = None,
    archive_required: Annotated[
        bool | None,
        typer.Option(
            "--archive-required/--no-archive-required",
            help="Keep segments on disk until archived, shedding appends (429 ArchiveBehind) "
            "when the budget is full; default: on with --archive.",
        ),
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
    if archive is False and archive_required is not None:
        fail(
            "--archive-required/--no-archive-required need the archive on: drop them, "
            "or give --archive"
        )
    if archive is not None or archive_required is not None:
        wanted: dict[str, bool | None] = {}
        if archive is not None:
            wanted["enabled"] = archive
        if archive_required is not None:
            wanted["required"] = archive_required
        settings["archive"] = wanted
    with connect(ctx, url, token, timeout) as client:
        print_json(client.put_topic(topic, **settings))


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
