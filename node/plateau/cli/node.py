"""``plateau node``: run a node on a local data directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from plateau.cli.common import fail


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
    archive_url: Annotated[
        str | None,
        typer.Option(
            help="s3://bucket/prefix to archive topics to (storage.archive.url; endpoint, "
            "region and credentials from the settings or PLATEAU_STORAGE__ARCHIVE__*)."
        ),
    ] = None,
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
    if archive_url is not None:
        storage["archive"] = {"url": archive_url}
    if bind is not None:
        server["bind"] = bind
    if token is not None:
        auth["token"] = token
    overrides = {k: v for k, v in (("storage", storage), ("server", server), ("auth", auth)) if v}
    try:
        settings = load_settings(config, **overrides)
    except (ValidationError, FileNotFoundError, ValueError) as exc:
        fail(f"bad settings: {exc}")
    if settings.storage.archive.url:
        from plateau.protocol.archive import ArchiveUrl
        from plateau.protocol.errors import InvalidInput

        try:
            ArchiveUrl.parse(settings.storage.archive.url)
        except InvalidInput as exc:
            fail(f"bad settings: storage.archive.url: {exc.message}")
    from plateau.server.tuning import choose_arrow_pool, choose_read_pool_purge_delay

    # both before run_node's imports load pyarrow
    choose_arrow_pool(settings.server.arrow_memory_pool)
    choose_read_pool_purge_delay(settings.server.read_pool_purge_delay_ms)
    from plateau.server.run import run_node

    run_node(settings)
