"""Topic and partition names.

A name becomes a directory under ``<data>/topics``, so only a strict character
set is accepted: lowercase letters, digits, ``-``, ``_`` and ``.``, 1 to 128
characters, not starting with ``.``. That rules out ``..``, ``/``, ``\\``, NUL
and every other way a name could leave the data directory.
"""

from __future__ import annotations

import re

from plateau.protocol.errors import InvalidInput

NAME_PATTERN = re.compile(r"[a-z0-9_-][a-z0-9_.-]{0,127}")
NAME_RULE = (
    "names are 1-128 characters of lowercase letters, digits, '-', '_' and '.', "
    "not starting with '.'"
)


def check_name(kind: str, name: str) -> str:
    """Return ``name`` if valid, else raise a 400 naming the rule."""
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        raise InvalidInput(f"invalid {kind} name {name!r}: {NAME_RULE}")
    return name
