"""Both modes' Spark tasks, batch and streaming: slices cut into tasks, one task read.

The driver cuts a read's slices into ``InputPartition`` objects of about
``bytesPerTask``; an executor reads one. A module of its own so that ``stream``
(the streaming reader) needs nothing from ``source`` (the data source, which
imports ``stream``): no import cycle.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from plateau.spark.modes import read_task
from plateau.spark.options import SourceOptions
from plateau.spark.plan import Slice, tasks
from plateau.spark.task_sizing import read_share


class SliceInput(InputPartition):
    """One Spark task's slices (none: nothing to read; Spark wants at least one task)."""

    def __init__(self, pieces: tuple[Slice, ...]) -> None:
        super().__init__(pieces)
        self.pieces = pieces


def arrow_target(schema: StructType) -> pa.Schema:
    """Spark's own Arrow form of the declared schema: batches must match it exactly."""
    return to_arrow_schema(schema, timezone="UTC")


def inputs(
    pieces: Sequence[Slice], options: SourceOptions, target: pa.Schema
) -> list[InputPartition]:
    """Spark tasks of about ``bytesPerTask`` moved: on disk, that over the read's share."""
    budget = int(options.bytes_per_task / read_share(pieces, target, options.time_bounded))
    return [SliceInput(t) for t in tasks(pieces, budget)] or [SliceInput(())]


def read_input(
    partition: InputPartition, options: SourceOptions, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The batches of one task made by ``inputs``, on an executor."""
    assert isinstance(partition, SliceInput)
    return read_task(partition.pieces, options, target)
