"""Kubernetes-style quantities (``512Mi``, ``10G``) and durations (``30s``, ``7d``).

The CLI takes budgets the way a ``PlateauTopic`` manifest writes them, so
one spelling works in both places. Parsers raise ``ValueError`` with a message
that names the accepted forms.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"": 0, "k": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?([A-Za-z]*)")
QUANTITY_HELP = (
    "a byte count like 1000, 512Mi, 10Gi or 10G (suffixes Ki Mi Gi Ti Pi Ei, k M G T P E)"
)

_DURATION_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ms|s|m|h|d|w)")
DURATION_HELP = "a duration like 30s, 15m, 1h30m, 7d or 500ms (a bare number is seconds)"


def parse_quantity(text: str) -> int:
    """Bytes of a Kubernetes quantity, rounded up to a whole byte as Kubernetes does."""
    value = text.strip()
    match = _QUANTITY.fullmatch(value)
    if match is None:
        raise ValueError(f"{text!r} is not {QUANTITY_HELP}")
    number, exponent, suffix = match.groups()
    if exponent is not None and suffix:
        raise ValueError(f"{text!r}: use either an exponent or a suffix, not both")
    try:
        amount = Decimal(number) * (Decimal(10) ** int(exponent or 0))
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only numbers
        raise ValueError(f"{text!r} is not {QUANTITY_HELP}") from exc
    if suffix in _BINARY:
        amount *= Decimal(1024) ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        amount *= Decimal(1000) ** _DECIMAL[suffix]
    else:
        hint = " (did you mean Ki?)" if suffix == "K" else ""
        raise ValueError(f"{text!r}: unknown suffix {suffix!r}{hint}; expected {QUANTITY_HELP}")
    return math.ceil(amount)


def parse_duration(text: str) -> float:
    """Seconds of a duration made of one or more ``<number><unit>`` parts, or a bare number."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"{text!r} is not {DURATION_HELP}")
        return seconds
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(value):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(value):
        raise ValueError(f"{text!r} is not {DURATION_HELP}")
    return total


def format_bytes(count: int) -> str:
    """Short human form for messages: ``1.5Gi``."""
    amount = float(count)
    for suffix in ("", "Ki", "Mi", "Gi", "Ti", "Pi"):
        if abs(amount) < 1024 or suffix == "Pi":
            return f"{amount:.0f}" if not suffix else f"{amount:.1f}{suffix}"
        amount /= 1024
    raise AssertionError("unreachable")  # pragma: no cover
