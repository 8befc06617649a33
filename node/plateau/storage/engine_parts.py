"""The engine's attributes that its mixins share, declared once.

``Engine`` is split into mixins (``engine_reads``, ``engine_upkeep``) so that
each part of it can be read on its own; each mixin uses attributes that only
``Engine.__init__`` sets. Declaring them here, in one base, lets mypy check
every mixin against the same types as the engine, without repeating them.
Nothing here runs: the class holds annotations only.
"""

from __future__ import annotations

from pathlib import Path

from plateau.storage.archive import Archive, ArchiveStatus
from plateau.storage.catalog.manifest import Manifest
from plateau.storage.catalog.progress import Progress
from plateau.storage.data.reader_cache import ReaderCache
from plateau.storage.topics import Catalog


class EngineParts:
    """What ``Engine.__init__`` sets and more than one of its mixins uses."""

    data_dir: Path
    archive: Archive | None
    archive_status: ArchiveStatus
    progress: Progress
    _catalog: Catalog
    _cache: ReaderCache
    _manifest: Manifest
