"""Property tests of the append parsers: any body is stored whole or refused with a 4xx.

Random bytes, damaged Arrow IPC files and streams (bytes flipped, cut short,
spliced) and arbitrary JSON go through the same path as an HTTP append
(``codecs.decode_append`` then ``Engine.append``). Every outcome must be a
stored table or a ``PlateauError`` with a 4xx status (the data plane turns
anything else into a 500), and a refused body must leave the partition as it
was: same span, same rows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plateau.protocol import ARROW_FILE, ARROW_STREAM, JSON
from plateau.protocol.errors import PlateauError
from plateau.protocol.topic_config import TopicConfigRequest
from plateau.server.codecs import decode_append
from plateau.storage.config import StorageSettings
from plateau.storage.engine import Engine
from testkit.arrowhttp import ipc_file, ipc_stream

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    data = Path(tmp_path_factory.mktemp("fuzz")) / "data"
    e = Engine(StorageSettings(data_dir=data))
    e.put_topic("t", TopicConfigRequest.model_validate({"segment": {"max_rows": 50}}))
    yield e
    e.close()


def comparable(value: object) -> object:
    """``value`` with each NaN made a marker: a stored NaN (a JSON ``NaN``, or damaged bytes
    read as a float) never equals itself, so two reads of unchanged rows compared unequal
    and a refused append was blamed for it."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list):
        return [comparable(v) for v in value]
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    return value


def state(engine: Engine) -> tuple[int, int, object]:
    usage = engine.topic_usage("t").partitions["0"]
    rows = engine.read_partition("t", "0", 0, 10_000).table.to_pylist()
    return usage.span.start, usage.span.end, comparable(rows)


def attempt(engine: Engine, media: str, body: bytes) -> None:
    before = state(engine)
    try:
        table = decode_append(media, body)
        span = engine.append("t", "0", table)
    except PlateauError as exc:
        assert 400 <= exc.status < 500, (exc.status, exc)
        assert state(engine) == before, "a refused append changed what is stored"
        return
    assert span.end - span.start == table.num_rows
    assert state(engine)[1] == before[1] + table.num_rows


SAMPLE = pa.table(
    {
        "x": pa.array([1, 2, 3], pa.int64()),
        "s": pa.array(["a", None, "ccc"]),
        "l": pa.array([[1], [], None], pa.list_(pa.int32())),
        "time": pa.array([1_700_000_000_000] * 3, pa.int64()),
    }
)
VALID = {ARROW_FILE: ipc_file(SAMPLE), ARROW_STREAM: ipc_stream(SAMPLE)}


@st.composite
def damaged(draw: st.DrawFn, media: str) -> bytes:
    data = bytearray(VALID[media])
    for _ in range(draw(st.integers(1, 4))):
        how = draw(st.sampled_from(["flip", "cut", "splice"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if how == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif how == "cut":
            del data[at:]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
    return bytes(data)


@SETTINGS
@given(body=st.binary(max_size=512), media=st.sampled_from([ARROW_FILE, ARROW_STREAM, JSON]))
def test_random_bytes_are_refused_or_stored_whole(engine: Engine, body: bytes, media: str) -> None:
    attempt(engine, media, body)


@SETTINGS
@given(data=st.data(), media=st.sampled_from([ARROW_FILE, ARROW_STREAM]))
def test_damaged_arrow_bodies_are_refused_or_stored_whole(
    engine: Engine, data: st.DataObject, media: str
) -> None:
    attempt(engine, media, data.draw(damaged(media)))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)
RECORD = st.dictionaries(
    st.sampled_from(["time", "x", "y", "", "z.w"]) | st.text(max_size=4), JSON_VALUES, max_size=4
)


def test_a_stored_nan_is_not_taken_for_a_change(
    tmp_path: Path,
) -> None:
    """The comparison the properties rely on: NaN rows read twice are the same rows."""
    e = Engine(StorageSettings(data_dir=tmp_path / "data"))
    try:
        e.put_topic("t", TopicConfigRequest())
        attempt(e, JSON, b'[{"x": NaN, "y": [1.5, NaN]}]')
        assert math.isnan(e.read_partition("t", "0", 0, 10).table.column("x")[0].as_py())
        attempt(e, ARROW_FILE, b"not an arrow file")  # refused: the same rows are stored
    finally:
        e.close()


@SETTINGS
@given(
    body=st.one_of(
        JSON_VALUES,
        st.lists(RECORD, max_size=5),
        st.fixed_dictionaries({"records": st.lists(RECORD | JSON_VALUES, max_size=5)}),
    )
)
def test_any_json_is_refused_or_stored_whole(engine: Engine, body: object) -> None:
    attempt(engine, JSON, json.dumps(body).encode())
