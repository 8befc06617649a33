"""``format("plateau")``, both modes: the Python data source Spark calls, and its batch reader.

Spark runs ``PlateauDataSource`` and the readers' planning methods in a
Python process on the driver and ``read`` in Python workers on executors, so
everything a reader holds is a plain, picklable value (parsed options, the
Arrow schema to yield, slices). Options are checked in ``__init__``, which
Spark runs at ``load()``: a bad option fails there, naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from plateau.spark.merge import wanted
from plateau.spark.modes import open_listing
from plateau.spark.options import SourceOptions, parse
from plateau.spark.plan import batch_ranges, chosen, plan
from plateau.spark.pushdown import all_back, narrow
from plateau.spark.stream import PlateauStreamReader
from plateau.spark.tasks import arrow_target, inputs, read_input


class PlateauDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "plateau"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = parse(options)
        # the offsets against the topic as it is now: a bad one fails load(), not a task
        batch_ranges(open_listing(self.parsed), self.parsed)

    def schema(self) -> StructType:
        listing = open_listing(self.parsed)
        spans = chosen(listing.spans(), self.parsed)
        data = listing.schema(sorted(spans))
        return from_arrow_schema(wanted(data, self.parsed), prefer_timestamp_ntz=True)

    def reader(self, schema: StructType) -> DataSourceReader:
        return PlateauReader(self.parsed, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PlateauStreamReader(self.parsed, schema)


class PlateauReader(DataSourceReader):
    """A batch read: the ranges are fixed by the listing ``partitions()`` takes."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.target = arrow_target(schema)

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Prune by ``_partition``/``_index``/``_time`` filters (see ``pushdown``)."""
        self.options = narrow(self.options, filters)
        return all_back(filters)

    def partitions(self) -> Sequence[InputPartition]:
        listing = open_listing(self.options)
        pieces = plan(listing, batch_ranges(listing, self.options), self.options)
        return inputs(pieces, self.options, self.target)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_input(partition, self.options, self.target)
