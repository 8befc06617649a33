"""List parameters in every form clients send them: plain repeats, ``name[]`` and
serde_qs' indexed ``name[N]`` (plateau's Rust client, percent-encoded)."""

from __future__ import annotations

import pytest
from starlette.datastructures import QueryParams

from plateau.protocol.errors import InvalidInput
from plateau.protocol.focus import DataFocus
from plateau.server.params import data_focus, list_params


def test_every_form_and_order() -> None:
    query = QueryParams(
        "dataset%5B1%5D=b&dataset%5B0%5D=a&partition_filter[]=p1&partition_filter=p0"
        "&dataset.exclude=x&dataset.exclude%5B%5D=y&other[0]=z"
    )
    lists = list_params(query)
    assert lists["dataset"] == ["a", "b"]  # by index
    assert lists["partition_filter"] == ["p1", "p0"]  # as given
    assert lists["dataset.exclude"] == ["x", "y"]
    assert "other" not in lists


def test_focus_from_serde_qs() -> None:
    query = QueryParams(
        "start=0&page_size=100&dataset%5B0%5D=inputs&dataset%5B1%5D=outputs"
        "&dataset.exclude%5B0%5D=outputs.x&dataset.separator=.&dataset.max_bytes=1024"
    )
    assert data_focus(query) == DataFocus(("inputs", "outputs"), ("outputs.x",), ".", 1024)
    assert data_focus(QueryParams("start=0")) is None


@pytest.mark.parametrize("query", ["dataset.include=x", "datasets=x", "dataset%5Bx%5D=a"])
def test_unknown_focus_keys_are_refused(query: str) -> None:
    with pytest.raises(InvalidInput, match="unknown query parameter"):
        data_focus(QueryParams(query))
