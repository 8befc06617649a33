"""plateau's data focus, case by case against tables of expected columns.

The first cases are plateau's own (``transport/src/lib.rs``, ``test_focus``
on ``nested_chunk``); the rest use an inference-log schema with what plateau
users ask of it: structs in structs, a list of structs, a tensor-like
fixed-size list and a binary column.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from plateau.protocol.errors import InvalidInput
from plateau.protocol.focus import DataFocus, data_bytes


def nested_chunk() -> pa.Table:
    """plateau's ``nested_chunk``: time, child{grandchild{index}, index}."""
    index = pa.array(range(5), pa.int64())
    grandchild = pa.StructArray.from_arrays([index], ["index"])
    child = pa.StructArray.from_arrays([grandchild, index], ["grandchild", "index"])
    return pa.table({"time": index, "child": child})


N = 6
TENSOR = pa.list_(pa.float32(), 4)


def inference_logs() -> pa.Table:
    tensor = pa.array([[float(i), i + 0.5, i + 1.0, i + 1.5] for i in range(N)], TENSOR)
    label = pa.array([f"img-{i}" for i in range(N)])
    inputs = pa.StructArray.from_arrays([tensor, label], ["tensor", "label"])
    classes = pa.array(
        [[{"name": "cat", "p": 0.1 * i}, {"name": "dog", "p": 1 - 0.1 * i}] for i in range(N)],
        pa.list_(pa.struct([("name", pa.string()), ("p", pa.float64())])),
    )
    outputs = pa.StructArray.from_arrays(
        [pa.array([0.5 + i for i in range(N)], pa.float32()), classes], ["score", "classes"]
    )
    model = pa.StructArray.from_arrays(
        [pa.array(["resnet"] * N), pa.array([3] * N, pa.int32())], ["name", "version"]
    )
    metadata = pa.StructArray.from_arrays(
        [model, pa.array(range(N), pa.int64())], ["model", "latency_ms"]
    )
    return pa.table(
        {
            "time": pa.array(range(1000, 1000 + N), pa.int64()),
            "inputs": inputs,
            "outputs": outputs,
            "metadata": metadata,
            "blob": pa.array([bytes([i]) * 100 for i in range(N)], pa.binary()),
        }
    )


@pytest.mark.parametrize(
    ("focus", "columns"),
    [
        # plateau's test_focus, verbatim
        (DataFocus(("child",)), ["grandchild", "index"]),
        (DataFocus(("time",)), ["time"]),
        (DataFocus(("child",), separator="."), ["child.grandchild.index", "child.index"]),
        (
            DataFocus(("time", "child"), separator="."),
            ["time", "child.grandchild.index", "child.index"],
        ),
        (DataFocus(("*",), separator="."), ["time", "child.grandchild.index", "child.index"]),
        (
            DataFocus(("*",), ("time",), separator="."),
            ["child.grandchild.index", "child.index"],
        ),
        (DataFocus(("*",), ("child.grandchild",), separator="."), ["time", "child.index"]),
        (DataFocus(("*",), ("child",), separator="."), ["time"]),
        # beyond plateau's tests: a nested path without separator is one column name
        (DataFocus(("child", "time")), ["child", "time"]),
        (DataFocus((), ("time",)), ["grandchild", "index"]),  # exclude alone: * minus it
    ],
)
def test_plateaus_own_cases(focus: DataFocus, columns: list[str]) -> None:
    assert focus.apply(nested_chunk()).column_names == columns


@pytest.mark.parametrize(
    ("focus", "columns"),
    [
        # a single struct: its fields are the table
        (DataFocus(("inputs",)), ["tensor", "label"]),
        # two structs flattened, depth first, keys joined with the separator
        (
            DataFocus(("inputs", "outputs"), separator="."),
            ["inputs.tensor", "inputs.label", "outputs.score", "outputs.classes"],
        ),
        # excluding one of two structs leaves the other, unnested
        (DataFocus(("inputs", "outputs"), ("outputs",)), ["tensor", "label"]),
        (
            DataFocus(("*",), ("metadata/model", "blob"), separator="/"),
            [
                "time",
                "inputs/tensor",
                "inputs/label",
                "outputs/score",
                "outputs/classes",
                "metadata/latency_ms",
            ],
        ),
        (
            DataFocus(("metadata.model.name", "time"), separator="."),
            ["metadata.model.name", "time"],
        ),
        # with a separator even one struct is flattened, under its path
        (
            DataFocus(("metadata.model",), separator="."),
            ["metadata.model.name", "metadata.model.version"],
        ),
        (DataFocus(("outputs.classes",), separator="."), ["outputs.classes"]),
        (DataFocus(("time", "blob")), ["time", "blob"]),
        (DataFocus(("blob", "time")), ["blob", "time"]),  # in the order asked
    ],
)
def test_inference_log_cases(focus: DataFocus, columns: list[str]) -> None:
    assert focus.apply(inference_logs()).column_names == columns


def test_values_come_through_unchanged_and_nested_lists_stay_whole() -> None:
    table = inference_logs()
    got = DataFocus(("inputs", "outputs"), separator=".").apply(table)
    inputs = table.column("inputs").combine_chunks()
    outputs = table.column("outputs").combine_chunks()
    assert got.column("inputs.tensor").to_pylist() == inputs.field("tensor").to_pylist()
    assert got.column("inputs.tensor").type == TENSOR
    assert got.column("outputs.classes").to_pylist() == outputs.field("classes").to_pylist()
    assert got.num_rows == N


def test_max_bytes_nulls_a_column_too_large_keeping_its_type() -> None:
    table = inference_logs()
    # tensor: 6 rows x 4 float32 = 96 bytes; label: 6 x 5 chars = 30 bytes
    focus = DataFocus(("inputs", "time"), separator=".", max_bytes=50)
    got = focus.apply(table)
    assert got.column_names == ["inputs.tensor", "inputs.label", "time"]
    assert got.column("inputs.tensor").null_count == N
    assert got.column("inputs.tensor").type == TENSOR
    assert got.column("inputs.label").to_pylist() == [f"img-{i}" for i in range(N)]
    assert got.column("time").null_count == 0  # 48 bytes
    blob = DataFocus(("blob",), max_bytes=599).apply(table)
    assert blob.column("blob").null_count == N and blob.column("blob").type == pa.binary()
    assert DataFocus(("blob",), max_bytes=600).apply(table).column("blob").null_count == 0


def test_data_bytes_counts_values_of_the_slice_only() -> None:
    strings = pa.array(["aa", "bbb", "c", None])
    assert data_bytes(strings) == 6
    assert data_bytes(strings.slice(1, 2)) == 4
    assert data_bytes(pa.array([[1, 2], [3]], pa.list_(pa.int64()))) == 24
    assert data_bytes(pa.array([1.0, 2.0], pa.float32())) == 8


@pytest.mark.parametrize(
    ("focus", "message"),
    [
        (DataFocus(("nope",)), "dataset path 'nope': no column 'nope'"),
        (DataFocus(("inputs.nope",), separator="."), "no field 'nope' in 'inputs'"),
        (DataFocus(("time.x",), separator="."), "'time' is not a struct"),
        (DataFocus(("metadata.model",)), "no column 'metadata.model'"),  # no separator
        (DataFocus(("time",), ("time",)), "leaves no column"),
    ],
)
def test_a_path_that_matches_nothing_is_an_error_naming_it(focus: DataFocus, message: str) -> None:
    with pytest.raises(InvalidInput, match=message.replace(".", r"\.")) as err:
        focus.apply(inference_logs())
    assert err.value.status == 400


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset": ("",)}, "1 to 1024 characters"),
        ({"separator": ""}, "separator must not be empty"),
        ({"max_bytes": -1}, "max_bytes must be >= 0"),
        ({"exclude": tuple(str(i) for i in range(1001))}, "at most 1000 paths"),
    ],
)
def test_malformed_focus_is_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        DataFocus(**kwargs)  # type: ignore[arg-type]


def test_columns_to_read_are_the_first_steps_in_schema_order() -> None:
    schema = inference_logs().schema
    assert DataFocus().columns(schema) is None  # no focus: everything
    assert DataFocus(("outputs.score", "inputs.label"), separator=".").columns(schema) == (
        "inputs",
        "outputs",
    )
    assert DataFocus((), ("blob", "metadata")).columns(schema) == ("time", "inputs", "outputs")
    assert DataFocus(("nope",)).columns(schema) is None  # read all: apply names the path
    assert DataFocus(("time",), ("time",)).columns(schema) is None
    assert DataFocus(max_bytes=10).columns(schema) == tuple(schema.names)


def test_schema_metadata_is_kept() -> None:
    table = nested_chunk().replace_schema_metadata({"testing": "123"})
    for focus in (DataFocus(("child",)), DataFocus(("child", "time"))):
        assert focus.apply(table).schema.metadata == {b"testing": b"123"}
