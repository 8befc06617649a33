"""Arrow's full validation of an appended table, with its UTF-8 check done faster for ASCII.

Every appended table is fully validated before a byte is stored: offsets in
bounds and growing, null counts true to their bitmaps, string values valid
UTF-8. A reader trusts all of that. Arrow checks UTF-8 value by value, which
is slow for the short strings users send most (model names, status codes,
regions): 55 us for a column of 10,000 twenty-byte strings, 60% of validating
an inference-log batch and 0.2 of the node's 1.3 cores on that workload
(``perf``, bench/ingest_vs_rs.py's ``compressible`` workload).

So a ``string`` or ``large_string`` array whose whole data buffer is ASCII
(Arrow's max over its bytes, a few us for 200 kB; not numpy, which the node
does not depend on) is validated as ``binary`` over the same buffers: Arrow
still checks its offsets and null count, and ASCII bytes are valid UTF-8 one
by one, so every value cut from them is too. Any other array
(a non-ASCII byte anywhere in the buffer, nested or dictionary types, string
views) gets Arrow's own full validation, unchanged.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

ASCII_LIMIT = 0x80

_AS_BINARY = {pa.string(): pa.binary(), pa.large_string(): pa.large_binary()}


def validate_table(table: pa.Table) -> None:
    """``table.validate(full=True)``, faster; raises ``pa.ArrowInvalid`` as it does.

    One full validation of the whole table, with its ASCII string columns
    swapped for their binary views: every pyarrow call drops and retakes the
    GIL, a hand-off to another append's thread each time, so one call for the
    table rather than one per column (19 for the inference-log workload).
    """
    columns: list[pa.ChunkedArray] = []
    swapped = False
    for column in table.columns:
        views = [binary_view(chunk) for chunk in column.chunks]
        if views and all(v is not None for v in views):
            columns.append(pa.chunked_array(views, type=views[0].type))  # type: ignore[union-attr]
            swapped = True
        else:
            columns.append(column)  # a non-ASCII chunk: the column is checked as it is
    checked = pa.Table.from_arrays(columns, names=table.column_names) if swapped else table
    checked.validate(full=True)


def validate_batch(batch: pa.RecordBatch) -> None:
    """``batch.validate(full=True)``, faster; raises ``pa.ArrowInvalid`` as it does.

    Through ``validate_table``, so that recovery and appends check alike."""
    validate_table(pa.Table.from_batches([batch]))


def binary_view(array: pa.Array) -> pa.Array | None:
    """The array as binary over the same buffers if its data is all ASCII; else None.

    The null count passed on is the one the body declared (pyarrow counts the
    bitmap only when none was declared), so the binary's full validation still
    checks it against the bitmap.
    """
    binary = _AS_BINARY.get(array.type)
    if binary is None or not _ascii_data(array):
        return None
    return pa.Array.from_buffers(
        binary, len(array), array.buffers(), array.null_count, array.offset
    )


def _ascii_data(array: pa.Array) -> bool:
    """True if the array's whole data buffer (not only the values) is ASCII."""
    buffers = array.buffers()
    if len(buffers) != 3:
        return False
    data = buffers[2]
    if data is None or data.size == 0:
        return True  # every value is empty: nothing to check
    high = pc.max(pa.Array.from_buffers(pa.uint8(), data.size, [None, data])).as_py()
    return int(high) < ASCII_LIMIT
