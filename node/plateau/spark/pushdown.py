"""``format("plateau")`` batch reads, both modes: filters Spark pushes in, to prune the read.

With ``spark.sql.python.filterPushdown.enabled=true`` Spark hands a Python
reader the conjuncts of a query's ``where``. Filters on ``_partition``,
``_index``, ``_time`` and an int64 ``time`` narrow the partitions, index
ranges and time bounds the plan covers, so ``df.where("_time >= ...")`` skips
segments and row groups as the options would.

Every filter is still returned to Spark, which evaluates it on what is read:
pruning here only has to be conservative (never drop a row that matches),
not exact. Timestamps without a zone are widened by the largest UTC offset,
since the zone Spark meant (the session's) is not known here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from plateau.spark.merge import INDEX, PARTITION, TIME, TIME_COLUMN
from plateau.spark.options import SourceOptions

NAIVE_SLACK_MS = 14 * 3600 * 1000  # the largest UTC offset of any zone


def _ms_bounds(value: Any) -> tuple[float, float] | None:
    """The earliest and latest epoch ms ``value`` can mean."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            ms = value.timestamp() * 1000
            return ms, ms
        ms = value.replace(tzinfo=UTC).timestamp() * 1000
        return ms - NAIVE_SLACK_MS, ms + NAIVE_SLACK_MS
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def narrow(options: SourceOptions, filters: Sequence[Filter]) -> SourceOptions:
    lo_index, hi_index = options.index_from, options.index_until
    lo_ms, hi_ms = options.starting_ms, options.ending_ms
    only = options.only_partitions

    def at_least_index(i: int) -> None:
        nonlocal lo_index
        lo_index = i if lo_index is None else max(lo_index, i)

    def below_index(i: int) -> None:
        nonlocal hi_index
        hi_index = i if hi_index is None else min(hi_index, i)

    def at_least_ms(ms: int) -> None:
        nonlocal lo_ms
        lo_ms = ms if lo_ms is None else max(lo_ms, ms)

    def below_ms(ms: int) -> None:
        nonlocal hi_ms
        hi_ms = ms if hi_ms is None else min(hi_ms, ms)

    for f in filters:
        path = getattr(f, "attribute", ())
        column = path if len(path) == 1 else None
        name = column[0] if column else None
        value = getattr(f, "value", None)
        if name == PARTITION:
            if isinstance(f, EqualTo) and isinstance(value, str):
                keep = {value}
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                keep = set(f.value)
            else:
                continue
            only = frozenset(keep if only is None else only & keep)
        elif name == INDEX and (i := _int(value)) is not None:
            if isinstance(f, GreaterThan):
                at_least_index(i + 1)
            elif isinstance(f, GreaterThanOrEqual):
                at_least_index(i)
            elif isinstance(f, LessThan):
                below_index(i)
            elif isinstance(f, LessThanOrEqual):
                below_index(i + 1)
            elif isinstance(f, EqualTo):
                at_least_index(i)
                below_index(i + 1)
        else:
            if name == TIME and (bounds := _ms_bounds(value)) is not None:
                earliest, latest = math.floor(bounds[0]), math.floor(bounds[1])
            elif name == TIME_COLUMN and (i := _int(value)) is not None:
                earliest = latest = i  # an int64 time column holds epoch ms
            else:
                continue
            if isinstance(f, GreaterThan | GreaterThanOrEqual):
                at_least_ms(earliest)
            elif isinstance(f, LessThan | LessThanOrEqual):
                below_ms(latest + 1)
            elif isinstance(f, EqualTo):
                at_least_ms(earliest)
                below_ms(latest + 1)
    return dataclasses.replace(
        options,
        only_partitions=only,
        index_from=lo_index,
        index_until=hi_index,
        starting_ms=lo_ms,
        ending_ms=hi_ms,
    )


def all_back(filters: Sequence[Filter]) -> Iterable[Filter]:
    """Spark evaluates every filter again: the pruning above is conservative only."""
    return list(filters)
