"""Arbitrary Arrow schemas, nested too, come back exactly as appended: open and sealed."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plateau.protocol.snapshot import SNAPSHOT_FILE, decode
from testkit.arrowhttp import append, read
from testkit.nodeproc import NodeProcess

primitive = st.sampled_from(
    [
        pa.bool_(),
        pa.int8(),
        pa.int16(),
        pa.int32(),
        pa.int64(),
        pa.uint8(),
        pa.uint32(),
        pa.uint64(),
        pa.float32(),
        pa.float64(),
        pa.string(),
        pa.large_string(),
        pa.binary(),
        pa.large_binary(),
        pa.binary(7),
        pa.date32(),
        pa.timestamp("ms"),
        pa.timestamp("us", "UTC"),
        pa.decimal128(12, 3),
        pa.time64("us"),
    ]
)


def nested(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    return st.one_of(
        children.map(pa.list_),
        children.map(pa.large_list),
        children.map(lambda t: pa.list_(t, 3)),
        st.lists(children, min_size=1, max_size=3).map(
            lambda ts: pa.struct([pa.field(f"f{i}", t) for i, t in enumerate(ts)])
        ),
        st.tuples(st.sampled_from([pa.int32(), pa.string()]), children).map(
            lambda kv: pa.map_(*kv)
        ),
    )


types = st.recursive(primitive, nested, max_leaves=5)


def values(t: pa.DataType) -> st.SearchStrategy[object]:
    """Python values of type ``t``, with nulls, for ``pa.array(..., type=t)``."""
    if pa.types.is_boolean(t):
        base: st.SearchStrategy[object] = st.booleans()
    elif pa.types.is_integer(t):
        bits = t.bit_width
        lo, hi = (
            (0, 2**bits - 1)
            if pa.types.is_unsigned_integer(t)
            else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        )
        base = st.integers(lo, hi)
    elif pa.types.is_floating(t):
        base = st.floats(allow_nan=False, width=t.bit_width)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        base = st.text(max_size=10)
    elif pa.types.is_fixed_size_binary(t):
        base = st.binary(min_size=t.byte_width, max_size=t.byte_width)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        base = st.binary(max_size=10)
    elif pa.types.is_date(t):
        base = st.dates()
    elif pa.types.is_timestamp(t):
        base = st.integers(0, 2**40).map(lambda v: pa.scalar(v, t).as_py())
    elif pa.types.is_time(t):
        base = st.times()
    elif pa.types.is_decimal(t):
        base = st.decimals(
            min_value=-(10**8), max_value=10**8, places=3, allow_nan=False, allow_infinity=False
        )
    elif pa.types.is_fixed_size_list(t):
        base = st.lists(values(t.value_type), min_size=t.list_size, max_size=t.list_size)
    elif pa.types.is_map(t):
        base = st.lists(
            st.tuples(values(t.key_type).filter(lambda k: k is not None), values(t.item_type)),
            max_size=3,
        )
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        base = st.lists(values(t.value_type), max_size=3)
    elif pa.types.is_struct(t):
        base = st.fixed_dictionaries(
            {t.field(i).name: values(t.field(i).type) for i in range(t.num_fields)}
        )
    else:
        raise AssertionError(t)
    return st.one_of(st.none(), base)


@st.composite
def tables(draw: st.DrawFn) -> pa.Table:
    fields = draw(st.lists(types, min_size=1, max_size=4))
    rows = draw(st.integers(min_value=1, max_value=30))
    columns = {}
    for i, t in enumerate(fields):
        items = draw(st.lists(values(t), min_size=rows, max_size=rows))
        columns[f"c{i}"] = pa.array(items, type=t)
    return pa.table(columns)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = NodeProcess(tmp_path_factory.mktemp("prop") / "data").start()
    yield proc
    proc.stop()


counter = itertools.count()


def wait_sealed(data_dir: Path, topic: str, rows: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        listed = decode((data_dir / SNAPSHOT_FILE).read_bytes()).topics.get(topic)
        part = listed.partitions.get("0") if listed is not None else None
        if part is not None and part.end >= rows:
            return
        time.sleep(0.02)
    raise AssertionError("segment was not sealed")


def same(got: pa.Table, sent: pa.Table) -> bool:
    got = got.drop_columns(["time"])
    return bool(got.schema.equals(sent.schema)) and got.to_pylist() == sent.to_pylist()


@pytest.mark.parametrize("fmt", ["arrow", "parquet"])
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(table=tables())
def test_any_schema_round_trips(node: NodeProcess, fmt: str, table: pa.Table) -> None:
    topic = f"prop-{fmt}-{next(counter)}"
    with httpx.Client(base_url=node.url, timeout=30) as c:
        c.put(
            f"/admin/topics/{topic}",
            json={"segment": {"format": fmt, "max_rows": 1}},
        ).raise_for_status()
        r = append(c, topic, "0", table)
        assert r.status_code == 200, r.text
        assert r.json()["span"] == {"start": 0, "end": table.num_rows}
        from_open, _ = read(c, topic, "0", 0)
        assert same(from_open, table)
        # a second append rolls the first segment: it is then read from its sealed file
        append(c, topic, "0", pa.table({"marker": [1]})).raise_for_status()
        wait_sealed(node.data_dir, topic, table.num_rows)
        from_sealed, status = read(c, topic, "0", 0)
        assert same(from_sealed, table)
        assert json.loads(status) == "SchemaChange"  # plateau: the status alone
        c.delete(f"/admin/topics/{topic}").raise_for_status()
