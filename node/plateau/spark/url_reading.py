"""Url mode (``format("plateau")``): a topic read through a node's HTTP API (option ``url``).

No volume is needed and the open, unsealed segment is visible too. Reads go
by index (``GET .../partition/{p}/records?start=``), never by time on the
node: an index range read is contiguous, so each row's ``_index`` is the
page's span start plus its position; time bounds are applied to the pages.
A page whose span starts past the index asked for means retention deleted
the indexes in between (``failOnDataLoss``).

The schema is sampled from each partition's first and last record (the
node's pages carry it); a column that first appears in the middle of a
partition and is gone by its end is missed: pin the columns with
``.schema(...)`` for such topics.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence

import numpy as np
import pyarrow as pa

from plateau.client import DataFocus, PlateauClient
from plateau.client.direct import DirectTransport
from plateau.client.errors import (
    BadRequestError,
    ConnectionFailed,
    NotFoundError,
    PlateauClientError,
)
from plateau.protocol.values import Span
from plateau.spark.merge import META, TIME_COLUMN, conform, merge_schemas, table_within_time
from plateau.spark.options import OptionError, SourceOptions
from plateau.spark.plan import Slice, report_loss
from plateau.spark.url_prefetch import read_ahead

TIMEOUT = 60.0


def client(options: SourceOptions) -> PlateauClient:
    """A client on ``DirectTransport``: a third of httpx's CPU per page (see there)."""
    assert options.url is not None
    return PlateauClient(
        options.url, token=options.token, timeout=TIMEOUT, transport=DirectTransport()
    )


def focus(options: SourceOptions) -> DataFocus | None:
    """The node's data focus, keeping ``time`` (``_time`` and time bounds need it)."""
    if not options.dataset and not options.dataset_exclude:
        return None
    dataset = options.dataset
    if dataset and TIME_COLUMN not in dataset:
        dataset = (*dataset, TIME_COLUMN)
    return DataFocus(dataset=dataset, exclude=options.dataset_exclude)


def projection(target: pa.Schema) -> DataFocus | None:
    """The declared data columns (and ``time``) as a focus: the node sends only those."""
    names = [n for n in target.names if n not in META]
    if len(names) == len(target.names) - len(META) and all(n in target.names for n in META):
        return None  # everything declared: nothing to leave out (the focus is not free)
    return DataFocus(dataset=(*names, TIME_COLUMN) if TIME_COLUMN not in names else tuple(names))


class RemoteListing:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        try:
            with client(options) as c:
                info = c.topic(options.topic)
        except NotFoundError:
            raise OptionError(
                f"option 'topic': the node at {options.url} has no topic {options.topic!r}"
            ) from None
        except ConnectionFailed as e:
            raise OptionError(f"option 'url': cannot reach the node: {e}") from None
        except PlateauClientError as e:
            raise OptionError(f"option 'url': the node refused: {e}") from None
        self._spans = {p: Span(s.start, s.end) for p, s in info.partitions.items()}

    def spans(self) -> dict[str, Span]:
        return {p: s for p, s in self._spans.items() if s.end > s.start}

    def schema(self, partitions: Sequence[str]) -> pa.Schema:
        return merge_schemas(self.samples(partitions))

    def samples(self, partitions: Sequence[str]) -> list[pa.Schema]:
        """The schemas of each partition's first and last record (none: an error)."""
        schemas: list[pa.Schema] = []
        try:
            with client(self.options) as c:
                for p in partitions:
                    span = self._spans[p]
                    for start in sorted({span.start, max(span.end - 1, span.start)}):
                        page = c.read(self.options.topic, p, start, 1, focus=focus(self.options))
                        if page.table.num_columns:
                            schemas.append(page.table.schema)
        except PlateauClientError as e:
            raise OptionError(f"option 'url': reading the topic's schema failed: {e}") from None
        if not schemas:
            raise OptionError(
                f"topic {self.options.topic!r} has no records yet, so its columns are "
                f"unknown; give them with .schema(...)"
            )
        return schemas

    def slices(self, partition: str, span: Span, options: SourceOptions) -> list[Slice]:
        step = options.url_split_rows
        return [
            Slice(partition=partition, start=s, end=min(s + step, span.end))
            for s in range(span.start, span.end, step)
        ]


def read_remote_slice(
    piece: Slice, options: SourceOptions, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The slice's pages, each fetched while Spark takes the one before (``ahead``)."""
    for table, first in read_ahead(_fetch(piece, options, target)):
        yield from _page(table, first, piece, options, target)


def _fetch(
    piece: Slice, options: SourceOptions, target: pa.Schema
) -> Generator[tuple[pa.Table, int], None, None]:
    """Pages of ``[piece.start, piece.end)`` and each one's first index; gaps are data loss."""
    wanted = focus(options) or projection(target)
    position = piece.start
    with client(options) as c:
        while position < piece.end:
            limit = min(options.url_page_rows, piece.end - position)
            try:
                table, span, _status = c.read(
                    options.topic, piece.partition, position, limit, focus=wanted
                )
            except BadRequestError:
                if wanted is None or wanted == focus(options):
                    raise
                # a declared column these rows lack (the schema grew later): read them whole
                wanted = focus(options)
                continue
            if span is None or span.end <= position:
                report_loss(options, piece.partition, Span(position, piece.end))
                return
            if span.start > position:
                report_loss(options, piece.partition, Span(position, min(span.start, piece.end)))
            keep = min(span.end, piece.end) - span.start
            yield table.slice(0, keep), span.start
            position = span.start + keep


def _page(
    table: pa.Table, first: int, piece: Slice, options: SourceOptions, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    indexes = pa.array(np.arange(first, first + table.num_rows, dtype=np.int64))
    table, indexes = table_within_time(table, indexes, options.starting_ms, options.ending_ms)
    if table.num_rows:
        yield conform(table, piece.partition, indexes, target)
