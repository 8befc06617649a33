"""The faster full validation refuses exactly what Arrow's own refuses.

Each case builds a (possibly broken) array from raw buffers, as a client's
IPC body would arrive, and compares ``validate_table`` on a table of that one
column (the path appends and recovery take) with
``Array.validate(full=True)``: both accept, or both raise ``ArrowInvalid``.
(``from_buffers`` runs the cheap structural checks that reading an IPC body
runs too, so only what passes them is compared.)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plateau.storage.data.full_validation import (
    binary_view,
    validate_batch,
    validate_table,
)


def _buf(values: list[int], dtype: type = np.int32) -> pa.Buffer:
    return pa.py_buffer(np.array(values, dtype=dtype).tobytes())


def _strings(
    offsets: list[int],
    data: bytes,
    validity: list[bool] | None = None,
    null_count: int = -1,
    large: bool = False,
    offset: int = 0,
    length: int | None = None,
) -> pa.Array:
    n = len(offsets) - 1 - offset if length is None else length
    bitmap = None
    if validity is not None:
        bitmap = pa.py_buffer(np.packbits(np.array(validity, bool), bitorder="little").tobytes())
    typ = pa.large_string() if large else pa.string()
    off = _buf(offsets, np.int64 if large else np.int32)
    return pa.Array.from_buffers(typ, n, [bitmap, off, pa.py_buffer(data)], null_count, offset)


def _arrow_accepts(array: pa.Array) -> bool:
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _ours(array: pa.Array) -> None:
    validate_table(pa.table({"v": array}))


def _ours_accepts(array: pa.Array) -> bool:
    try:
        _ours(array)
    except pa.ArrowInvalid:
        return False
    return True


CASES = {
    "ascii": _strings([0, 2, 5, 5], b"okerr"),
    "ascii large": _strings([0, 2, 5], b"okerr", large=True),
    "non-ascii valid": _strings([0, 2, 4], "éü".encode()),
    "invalid utf-8": _strings([0, 2], b"\xff\xfe"),
    "invalid utf-8 large": _strings([0, 2], b"\xff\xfe", large=True),
    "split multibyte": _strings([0, 1, 2], "é".encode()),  # each half invalid, the whole valid
    "offsets decrease": _strings([0, 4, 2], b"abcd"),
    "offsets past the data in the middle": _strings([0, 9, 2], b"abcd"),
    "null count wrong": _strings([0, 1, 2], b"ab", [True, False], null_count=2),
    "null count right": _strings([0, 1, 2], b"ab", [True, False], null_count=1),
    "garbage under a null": _strings([0, 1, 3], b"a\xff\xfe", [True, False], null_count=1),
    "garbage beside the values": _strings([0, 1, 2], b"ab\xff"),
    "sliced": _strings([0, 1, 2, 3], b"abc", offset=1),
    "all empty": _strings([0, 0, 0], b""),
}


@pytest.mark.parametrize("name", list(CASES))
def test_accepts_and_refuses_what_arrow_does(name: str) -> None:
    array = CASES[name]
    assert _ours_accepts(array) == _arrow_accepts(array), name


def test_the_broken_cases_are_refused() -> None:
    """Guard the comparison above: it would pass if both accepted everything."""
    for name in (
        "invalid utf-8",
        "split multibyte",
        "offsets decrease",
        "offsets past the data in the middle",
        "null count wrong",
    ):
        assert not _ours_accepts(CASES[name]), name


def test_only_ascii_strings_take_the_binary_path() -> None:
    view = binary_view(pa.array(["ok", "timeout", None]))
    assert view is not None and view.type == pa.binary() and view.null_count == 1
    large = binary_view(pa.array(["ok"], pa.large_string()))
    assert large is not None and large.type == pa.large_binary()
    assert binary_view(pa.array(["é"])) is None
    assert binary_view(pa.array([1, 2])) is None
    assert binary_view(pa.array([["a"]])) is None


def test_nested_strings_are_validated_in_full() -> None:
    """A list of strings is not taken apart: Arrow's own validation sees its bad UTF-8."""
    child = _strings([0, 2], b"\xff\xfe")
    nested = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), child)
    with pytest.raises(pa.ArrowInvalid):
        _ours(nested)


def test_table_and_batch_check_every_column_and_chunk() -> None:
    good = pa.array(["a", "b"])
    bad = _strings([0, 2, 1], b"ab")
    validate_table(pa.table({"s": pa.chunked_array([good, good])}))
    with pytest.raises(pa.ArrowInvalid):
        validate_table(pa.table({"s": pa.chunked_array([good, bad])}))
    with pytest.raises(pa.ArrowInvalid):
        validate_batch(pa.record_batch({"i": pa.array([1, 2]), "s": bad}))


def test_a_table_is_refused_for_bad_utf8_beside_ascii_columns() -> None:
    """ASCII columns are checked as binary; a column with a non-ASCII chunk is not, even
    when its other chunks are ASCII: its bad UTF-8 is still found."""
    ascii_col = pa.array(["ok", "timeout"])
    broken = _strings([0, 1, 2], b"\xff\xfe")
    validate_table(pa.table({"a": ascii_col, "b": pa.array(["é", "ü"])}))
    with pytest.raises(pa.ArrowInvalid):
        validate_table(pa.table({"a": ascii_col, "b": broken}))
    with pytest.raises(pa.ArrowInvalid):
        validate_table(pa.table({"b": pa.chunked_array([ascii_col, broken])}))


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.binary(max_size=6), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=-2, max_value=40), min_size=2, max_size=9),
    large=st.booleans(),
)
def test_agrees_with_arrow_on_arbitrary_buffers(
    values: list[bytes], cuts: list[int], large: bool
) -> None:
    """Any bytes, any offsets (growing or not, in bounds or not): the same verdict."""
    data = b"".join(values)
    try:
        array = _strings(cuts, data, large=large)
    except pa.ArrowInvalid:
        return  # refused by the cheap checks that reading an IPC body runs already
    assert _ours_accepts(array) == _arrow_accepts(array)
