"""Query parameters and the iteration cursor: parsed and checked before the engine sees them.

Everything here is a pure function raising ``InvalidInput`` (400), so a bad
parameter is refused before any work and the unit tests need no server.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import QueryParams

from plateau.protocol.errors import InvalidInput
from plateau.protocol.focus import DataFocus
from plateau.protocol.names import check_name
from plateau.protocol.values import Order
from plateau.storage.types import TimeRange

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")
REGEX_PREFIX = "regex:"
MAX_REGEX_CHARS = 256
MAX_CURSOR_PARTITIONS = 100_000


def int_param(
    query: QueryParams, name: str, default: int | None, *, low: int, high: int | None = None
) -> int:
    """An integer query parameter within ``[low, high]``; required when ``default`` is None."""
    text = query.get(name)
    if text is None:
        if default is None:
            raise InvalidInput(f"query parameter {name} is required")
        return default
    bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
    digits = text.strip()
    value = int(digits) if _INTEGER.fullmatch(digits) else None
    if value is None or value < low or (high is not None and value > high):
        raise InvalidInput(f"query parameter {name}: must be an integer {bounds}, got {text!r}")
    return value


def order_param(query: QueryParams) -> Order:
    text = query.get("order", Order.ASC.value)
    try:
        return Order(text)
    except ValueError:
        choices = ", ".join(o.value for o in Order)
        raise InvalidInput(
            f"query parameter order: must be one of {choices}, got {text!r}"
        ) from None


def parse_time(value: str, param: str, *, upper: bool) -> int:
    """RFC3339 (as plateau takes it) or integer epoch milliseconds, to epoch ms.

    Sub-millisecond fractions round inward, because both bounds are inclusive:
    a lower bound rounds up and an upper bound rounds down, so no record
    outside the requested interval is returned.
    """
    text = value.strip()
    if _INTEGER.fullmatch(text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text.upper())
    except ValueError:
        moment = None
    if moment is None:
        raise InvalidInput(
            f"{param}={value!r} is not RFC3339 (like 2024-01-02T03:04:05Z) nor epoch milliseconds"
        )
    if moment.tzinfo is None:
        raise InvalidInput(f"{param}={value!r} needs a UTC offset, for example a trailing 'Z'")
    delta = moment - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return micros // 1000 if upper else -(-micros // 1000)


def time_range(start: str | None, end: str | None) -> TimeRange | None:
    """``None`` when neither bound is given, so the engine takes its index-only path."""
    if start is None and end is None:
        return None
    start_ms = parse_time(start, "time.start", upper=False) if start is not None else None
    end_ms = parse_time(end, "time.end", upper=True) if end is not None else None
    if start_ms is not None and end_ms is not None and end_ms < start_ms:
        raise InvalidInput(f"time.end ({end}) is before time.start ({start})")
    return TimeRange(start_ms, end_ms)


def partition_filter(*lists: list[str] | None) -> list[str] | None:
    """Merge ``partition_filter`` and ``partition_filter[]`` (clients send either).

    Items are partition names or ``regex:<pattern>``; the pattern must compile
    and is length-capped so that one query cannot make matching expensive.
    """
    items = [item for values in lists if values for item in values]
    if not items:
        return None
    for item in items:
        if item.startswith(REGEX_PREFIX):
            pattern = item[len(REGEX_PREFIX) :]
            if len(pattern) > MAX_REGEX_CHARS:
                raise InvalidInput(f"partition_filter regex longer than {MAX_REGEX_CHARS} chars")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise InvalidInput(f"partition_filter {item!r}: bad regex: {exc}") from exc
        else:
            check_name("partition", item)
    return items


def parse_cursor(body: bytes) -> dict[str, int]:
    """The iteration cursor ``{partition: next_index}``; an empty body means from the start."""
    if not body.strip():
        return {}
    try:
        value: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cursor is not valid JSON: {exc}") from exc
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput("cursor must be a JSON object {partition: next_index}")
    if len(value) > MAX_CURSOR_PARTITIONS:
        raise InvalidInput(f"cursor names more than {MAX_CURSOR_PARTITIONS} partitions")
    cursor: dict[str, int] = {}
    for name, index in value.items():
        check_name("partition", name)
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise InvalidInput(
                f"cursor index for partition {name!r} must be a non-negative integer, got {index!r}"
            )
        cursor[name] = index
    return cursor


_LIST_KEY = re.compile(r"^(?P<name>[a-z_.]+)(?:\[(?P<index>[0-9]{0,6})\])?$")
_LISTS = ("dataset", "dataset.exclude", "partition_filter")


def list_params(query: QueryParams) -> dict[str, list[str]]:
    """The list parameters, in every form clients send them.

    Plain repeats (``name=a&name=b``), serde_qs' brackets (``name[]=a``) and
    its default, indexed brackets (``name[0]=a&name[1]=b``, percent-encoded
    by plateau's Rust client), in that order of preference: repeats in the
    order given, then indexed items by index.
    """
    found: dict[str, list[tuple[int, int, str]]] = {name: [] for name in _LISTS}
    for position, (key, value) in enumerate(query.multi_items()):
        match = _LIST_KEY.match(key)
        if match is None or match.group("name") not in found:
            continue
        index = match.group("index")
        found[match.group("name")].append((int(index) if index else -1, position, value))
    return {name: [v for _, _, v in sorted(items)] for name, items in found.items()}


_FOCUS_KEYS = re.compile(r"^dataset(\.exclude)?(\[[0-9]{0,6}\])?$|^dataset\.(separator|max_bytes)$")


def data_focus(query: QueryParams, lists: dict[str, list[str]] | None = None) -> DataFocus | None:
    """plateau's data focus from the query; None when the query asks for none."""
    for key in query:
        if key.startswith("dataset") and not _FOCUS_KEYS.match(key):
            raise InvalidInput(
                f"unknown query parameter {key!r}: the data focus takes dataset, "
                "dataset.exclude, dataset.separator and dataset.max_bytes"
            )
    lists = lists if lists is not None else list_params(query)
    max_bytes = None
    if query.get("dataset.max_bytes") is not None:
        max_bytes = int_param(query, "dataset.max_bytes", None, low=0)
    focus = DataFocus(
        tuple(lists["dataset"]),
        tuple(lists["dataset.exclude"]),
        query.get("dataset.separator"),
        max_bytes,
    )
    return focus if focus.active else None
