"""The node's settings: one tree of config structs, each field with an explicit default.

Each layer declares its own section (``plateau.storage.config``,
``plateau.server.config``); this module only composes them and loads their
sources, so storage and server never import the whole tree.

Sources, lowest to highest precedence: defaults, a YAML file (``--config`` or
``PLATEAU_CONFIG``), environment variables ``PLATEAU_<SECTION>__<FIELD>``
(for example ``PLATEAU_STORAGE__DATA_DIR``), then command-line flags. Every
field is documented in the README's configuration table.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from plateau.server.config import AuthSettings, ServerSettings
from plateau.storage.config import StorageSettings

_config_file: ContextVar[str | None] = ContextVar("plateau_config_file", default=None)


class NodeSettings(BaseSettings):
    """The whole tree: the sections of every layer, filled from all sources."""

    model_config = SettingsConfigDict(
        env_prefix="PLATEAU_",
        env_nested_delimiter="__",
        extra="forbid",
    )

    storage: StorageSettings = Field(default_factory=StorageSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config_file = _config_file.get() or os.environ.get("PLATEAU_CONFIG")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        return tuple(sources)


def load_settings(config_file: Path | None = None, **overrides: Any) -> NodeSettings:
    """Build settings from all sources; ``overrides`` are command-line values (nested dicts)."""
    if config_file is None:
        env_file = os.environ.get("PLATEAU_CONFIG")
        config_file = Path(env_file) if env_file else None
    if config_file is not None and not config_file.is_file():
        raise FileNotFoundError(f"config file {config_file} does not exist")
    token = _config_file.set(str(config_file) if config_file else None)
    try:
        return NodeSettings(**overrides)
    finally:
        _config_file.reset(token)
