"""plateau.spark's option parsing, task grouping and micro-batch capping, without a JVM."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plateau.protocol.values import Span
from plateau.spark.options import OptionError, parse
from plateau.spark.plan import Slice, resolve, tasks

BASE = {"path": "/data", "topic": "t"}


def test_defaults_and_case_insensitive_names() -> None:
    o = parse({"PATH": "/data", "Topic": "t"})
    assert (o.path, o.topic, o.starting, o.ending, o.fail_on_data_loss) == (
        "/data", "t", "earliest", "latest", True,
    )  # fmt: skip
    o = parse({**BASE, "STARTINGOFFSETS": '{"0": 5, "a": -2}', "failondataloss": "False"})
    assert o.starting == {"0": 5, "a": -2} and o.fail_on_data_loss is False


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("1700000000000", 1_700_000_000_000),
        ("2023-11-14T22:13:20Z", 1_700_000_000_000),
        ("2023-11-14T23:13:20+01:00", 1_700_000_000_000),
        ("2023-11-14T22:13:20.5", 1_700_000_000_500),  # naive: UTC
    ],
)
def test_timestamps(value: str, ms: int) -> None:
    assert parse({**BASE, "startingTimestamp": value}).starting_ms == ms


def test_lists_and_regex() -> None:
    assert parse({**BASE, "partitions": "0, 2"}).partitions.names == ("0", "2")
    assert parse({**BASE, "partitions": '["0","2"]'}).partitions.names == ("0", "2")
    choice = parse({**BASE, "partitions": "regex:[a-c]-\\d+"}).partitions
    assert choice.admits("b-12") and not choice.admits("d-1") and not choice.admits("xb-1")
    assert parse({**BASE, "columns": "v,_index"}).columns == ("v", "_index")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": "t"}, "option 'path'"),
        ({**BASE, "url": "http://x"}, "not both"),
        ({"url": "ftp://x", "topic": "t"}, "option 'url'"),
        ({"path": "/d"}, "option 'topic' is required"),
        ({**BASE, "topic": "Bad Name"}, "option 'topic'"),
        ({**BASE, "startingOffsets": "{"}, "option 'startingOffsets'"),
        ({**BASE, "startingOffsets": "[1]"}, "option 'startingOffsets'"),
        ({**BASE, "startingOffsets": '{"0": -3}'}, "index -3"),
        ({**BASE, "endingOffsets": '{"0": -2}'}, "option 'endingOffsets'"),
        ({**BASE, "endingOffsets": "earliest"}, "cannot end"),
        ({**BASE, "startingOffsets": '{"0": true}'}, "integer"),
        ({**BASE, "startingTimestamp": "5", "endingTimestamp": "5"}, "must be after"),
        ({**BASE, "maxRecordsPerTrigger": "0"}, "maxRecordsPerTrigger"),
        ({**BASE, "maxRecordsPerTrigger": "many"}, "maxRecordsPerTrigger"),
        ({**BASE, "failOnDataLoss": "yes"}, "failOnDataLoss"),
        ({**BASE, "columns": "v,v"}, "twice"),
        ({**BASE, "columns": ""}, "option 'columns' is empty"),
        ({**BASE, "partitions": "regex:("}, "bad regular expression"),
        ({**BASE, "dataset": "a"}, "url mode only"),
        ({**BASE, "url.pageRows": "10001", "path": None, "url": "http://x"}, "at most 10000"),
        ({**BASE, "startingoffset": "earliest"}, "unknown option 'startingoffset'"),
    ],
)
def test_bad_options_name_the_option(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse(options)


def test_offsets_resolve_against_the_stored_span() -> None:
    stored = Span(100, 500)
    assert resolve("earliest", "0", stored, False, "x") == 100
    assert resolve("latest", "0", stored, False, "x") == 500
    assert resolve({"0": -2}, "0", stored, False, "x") == 100
    assert resolve({"0": -1}, "0", stored, True, "x") == 500
    assert resolve({"1": 7}, "0", stored, True, "x") == 500  # not named: the default
    assert resolve({"0": 50}, "0", stored, False, "x") == 50  # below start: data loss, later
    with pytest.raises(OptionError, match="past it"):
        resolve({"0": 501}, "0", stored, True, "endingOffsets")


@given(st.lists(st.integers(min_value=0, max_value=300), max_size=40), st.integers(1, 500))
def test_tasks_keep_order_and_size(sizes: list[int], per_task: int) -> None:
    pieces = [Slice("0", i, i + 1, bytes=b) for i, b in enumerate(sizes)]
    groups = tasks(pieces, per_task)
    assert [p for g in groups for p in g] == pieces  # every slice once, in order
    for g in groups:
        assert all(p.bytes for p in g) or len(g) == 1  # unknown sizes go alone
        assert len(g) == 1 or sum(p.bytes for p in g) <= per_task
