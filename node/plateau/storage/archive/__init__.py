"""The object-storage archive tier: uploads sealed segments, knows what is archived.

``Archive`` (``store``) is the client and where the archive is; ``Uploader``
(``uploader``) uploads in the background; ``ArchiveStatus`` (``status``)
holds what is archived and each topic's state; ``convert`` makes the Parquet
file a segment is archived as. See docs/archive.md.
"""

from plateau.storage.archive.status import ArchiveStatus
from plateau.storage.archive.store import Archive, ArchiveError, classify
from plateau.storage.archive.uploader import Uploader

__all__ = ["Archive", "ArchiveError", "ArchiveStatus", "Uploader", "classify"]
