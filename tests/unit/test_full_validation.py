"""Full validation refuses every broken array a client's IPC body can carry.

Each case builds an array from raw buffers, as a client's IPC body would
arrive (``from_buffers`` runs only the cheap structural checks that reading an
IPC body runs too), and runs ``validate_table`` on a table of that one column
and ``validate_batch`` on a batch of it: the paths appends and recovery take.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plateau.storage.data.full_validation import validate_batch, validate_table


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


def _accepted(array: pa.Array) -> bool:
    """Both paths' verdict; they must agree."""
    try:
        validate_table(pa.table({"v": array}))
        table_ok = True
    except pa.ArrowInvalid:
        table_ok = False
    try:
        validate_batch(pa.record_batch({"v": array}))
        batch_ok = True
    except pa.ArrowInvalid:
        batch_ok = False
    assert table_ok == batch_ok
    return table_ok


GOOD = {
    "ascii": _strings([0, 2, 5, 5], b"okerr"),
    "ascii large": _strings([0, 2, 5], b"okerr", large=True),
    "non-ascii valid": _strings([0, 2, 4], "éü".encode()),
    "null count right": _strings([0, 1, 2], b"ab", [True, False], null_count=1),
    "garbage under a null": _strings([0, 1, 3], b"a\xff\xfe", [True, False], null_count=1),
    "garbage beside the values": _strings([0, 1, 2], b"ab\xff"),
    "sliced": _strings([0, 1, 2, 3], b"abc", offset=1),
    "all empty": _strings([0, 0, 0], b""),
}

BROKEN = {
    "invalid utf-8": _strings([0, 2], b"\xff\xfe"),
    "invalid utf-8 large": _strings([0, 2], b"\xff\xfe", large=True),
    "split multibyte": _strings([0, 1, 2], "é".encode()),  # each half invalid, the whole valid
    "offsets decrease": _strings([0, 4, 2], b"abcd"),
    "offsets past the data in the middle": _strings([0, 9, 2], b"abcd"),
    "null count wrong": _strings([0, 1, 2], b"ab", [True, False], null_count=2),
}


@pytest.mark.parametrize("name", list(GOOD))
def test_sound_arrays_are_accepted(name: str) -> None:
    assert _accepted(GOOD[name]), name


@pytest.mark.parametrize("name", list(BROKEN))
def test_broken_arrays_are_refused(name: str) -> None:
    assert not _accepted(BROKEN[name]), name


def test_nested_strings_are_validated_in_full() -> None:
    child = _strings([0, 2], b"\xff\xfe")
    nested = pa.ListArray.from_arrays(pa.array([0, 1], pa.int32()), child)
    assert not _accepted(nested)


def test_table_and_batch_check_every_column_and_chunk() -> None:
    good = pa.array(["a", "b"])
    bad = _strings([0, 2, 1], b"ab")
    validate_table(pa.table({"s": pa.chunked_array([good, good])}))
    with pytest.raises(pa.ArrowInvalid):
        validate_table(pa.table({"s": pa.chunked_array([good, bad])}))
    with pytest.raises(pa.ArrowInvalid):
        validate_table(pa.table({"a": pa.array(["ok", "timeout"]), "b": bad}))
    with pytest.raises(pa.ArrowInvalid):
        validate_batch(pa.record_batch({"i": pa.array([1, 2]), "s": bad}))


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.binary(max_size=6), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=-2, max_value=40), min_size=2, max_size=9),
    large=st.booleans(),
)
def test_arbitrary_buffers_are_accepted_only_when_every_value_is_sound(
    values: list[bytes], cuts: list[int], large: bool
) -> None:
    """Any bytes, any offsets: accepted exactly when the offsets grow within the data
    and every value decodes as UTF-8 (worked out here in Python, not by Arrow)."""
    data = b"".join(values)
    try:
        array = _strings(cuts, data, large=large)
    except pa.ArrowInvalid:
        return  # refused by the cheap checks that reading an IPC body runs already
    sound = all(0 <= a <= b <= len(data) for a, b in itertools.pairwise(cuts))
    if sound:
        try:
            for a, b in itertools.pairwise(cuts):
                data[a:b].decode("utf-8")
        except UnicodeDecodeError:
            sound = False
    assert _accepted(array) == sound
