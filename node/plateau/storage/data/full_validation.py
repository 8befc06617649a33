"""Arrow's full validation of an appended table, in one call.

Every appended table is fully validated before a byte is stored: offsets in
bounds and growing, null counts true to their bitmaps, string values valid
UTF-8. A reader trusts all of that.

Why one call and nothing clever: every pyarrow call that works in C++ drops
the GIL and takes it back, and with four appends in the engine at once each
take waits for another thread's Python, up to the 1 ms switch interval. An
earlier version checked each string column's bytes for ASCII first
(``pc.max``) and validated the ASCII ones as ``binary``, skipping Arrow's
value-by-value UTF-8 check: a third of the CPU of validating an inference-log
batch on one thread (180 against 450 us), but five more hand-offs and twenty
more pyarrow calls per append. On the node it lost: Arrow's own validation in
one call, interleaved pairs of ``bench/ab_nodes.py``, cut the ``decode`` stage
from 3.3 to 1.7 ms and raised the rate 1.22x, 1.25x, 1.10x (ML log) and 1.08x,
1.02x (random values), with 8-15% less CPU a row.

A second try kept the one Arrow call (the string columns swapped for their
``binary`` views) and checked their bytes for ASCII in Python instead
(``str(memoryview, "ascii")``: no hand-off). On one thread it halved the
validation of an inference-log batch (499 -> 220 us); on the node it lost
again, three interleaved pairs at 0.97x, 0.92x, 0.85x the rate, the decode
stage 2.3 -> 3.0 ms. With four appends at once the node is bound by the GIL,
not by its two cores: the 160 us of Python it added per append, under the
GIL, cost more than the 450 us of C++ it saved outside it.
"""

from __future__ import annotations

import pyarrow as pa


def validate_table(table: pa.Table) -> None:
    """``table.validate(full=True)``: raises ``pa.ArrowInvalid`` for anything a reader
    could not trust."""
    table.validate(full=True)


def validate_batch(batch: pa.RecordBatch) -> None:
    """The same check for one batch (recovery reads the open file back batch by batch)."""
    batch.validate(full=True)
