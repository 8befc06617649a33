"""Values of the wire contract: a span of record indexes, an iteration status, an order.

The node, the Python client and the Spark readers all speak in these, so they live in
the protocol, below every layer that uses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class Span:
    """An end-exclusive range of indexes, as in plateau's ``{"start","end"}``."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start

    def to_json(self) -> dict[str, int]:
        return {"start": self.start, "end": self.end}


class RecordStatus(StrEnum):
    """plateau's iteration status, sent in ``plateau.protocol.ITERATION_STATUS_HEADER``."""

    ALL = "All"
    SCHEMA_CHANGE = "SchemaChange"
    RECORD_LIMITED = "RecordLimited"
    BYTE_LIMITED = "ByteLimited"


class Order(StrEnum):
    ASC = "asc"
    DESC = "desc"
