"""The micro-batch cap of the stream reader: at most the limit, fair, always progressing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from plateau.spark.stream import cap

PARTS = ["a", "b", "c"]


@given(
    st.lists(st.integers(0, 1000), min_size=3, max_size=3),
    st.lists(st.integers(0, 1000), min_size=3, max_size=3),
    st.integers(1, 2000),
)
def test_cap(starts: list[int], more: list[int], limit: int) -> None:
    start = dict(zip(PARTS, starts, strict=True))
    end = {p: start[p] + m for p, m in zip(PARTS, more, strict=True)}
    capped = cap(start, end, limit)
    taken = {p: capped[p] - start[p] for p in PARTS}
    assert all(0 <= taken[p] <= end[p] - start[p] for p in PARTS)
    pending = sum(more)
    assert sum(taken.values()) == min(pending, limit)  # as much as allowed, never more
    if pending > limit:  # fair: a partition with rows left got at least an even share
        share = limit // sum(1 for m in more if m)
        assert all(taken[p] >= min(share, end[p] - start[p]) for p in PARTS)
