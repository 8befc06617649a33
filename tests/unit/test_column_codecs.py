"""Per-column compression and batches written as sent: what lands in the segment file.

Each test appends through the engine and then reads the sealed file the way
users' tools do (pyarrow's file and stream readers) and the bytes on disk.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plateau.protocol.topic_config import SegmentConfig, TopicConfigRequest
from plateau.server.codecs import decode_append_messages
from plateau.storage.config import StorageSettings
from plateau.storage.data.arrow_footer import record_batch_blocks
from plateau.storage.data.column_codecs import MIN_SAVING, ColumnPlan
from plateau.storage.data.ipc_messages import buffers_per_column, read_layout
from plateau.storage.engine import Engine
from plateau.storage.recovery import STREAM_START
from tests.conftest import EngineFactory
from tests.unit.conftest import wait_for

ROWS = 4000
ARROW_FILE = "application/vnd.apache.arrow.file"


def mixed(seed: int, rows: int = ROWS) -> pa.Table:
    """Random floats (incompressible) beside repetitive strings and small ints."""
    rng = random.Random(seed)
    return pa.table(
        {
            "time": pa.array(range(seed * rows, (seed + 1) * rows), pa.int64()),
            "noise": pa.array([rng.random() for _ in range(rows)], pa.float64()),
            "model": pa.array([rng.choice(["resnet"] * 9 + ["bert"]) for _ in range(rows)]),
            "status": pa.array([rng.choice([200] * 9 + [404]) for _ in range(rows)], pa.int32()),
            "tags": pa.array([[rng.random(), 1.0] if i % 7 else None for i in range(rows)]),
        }
    )


def body(table: pa.Table, compression: str | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_file(sink, table.schema, options=options) as w:
        w.write_table(table)
    return bytes(sink.getvalue())


def segment_topic(e: Engine, topic: str, **segment: object) -> None:
    e.put_topic(topic, TopicConfigRequest.model_validate({"segment": segment}))


def append_body(e: Engine, topic: str, data: bytes) -> None:
    table, messages = decode_append_messages(ARROW_FILE, data)
    e.append(topic, "0", table, messages)


def sealed_files(e: Engine, topic: str, fmt: str) -> list[Path]:
    wait_for(lambda: bool(list((e.data_dir / "topics" / topic / "0").glob(f"*.{fmt}"))))
    return sorted((e.data_dir / "topics" / topic / "0").glob(f"*.{fmt}"))


def message_codecs(schema: pa.Schema, message: pa.Message) -> dict[str, str]:
    """Per column of one record batch message: "packed" when a buffer is compressed."""
    counts = buffers_per_column(schema)
    assert counts is not None
    layout = read_layout(message.metadata)
    cols: dict[str, str] = {}
    at = 0
    for name, n in zip(schema.names, counts, strict=True):
        kinds = set()
        for off, length in layout.buffers[at : at + n]:
            if length == 0:
                continue
            if not layout.compressed:
                kinds.add("raw")
                continue
            prefix = int.from_bytes(message.body[off : off + 8], "little", signed=True)
            kinds.add("raw" if prefix == -1 else "packed")
        cols[name] = "packed" if "packed" in kinds else "raw"
        at += n
    return cols


def batch_codecs(path: Path) -> list[dict[str, str]]:
    """Per batch of an Arrow file (from its footer), per column: raw or packed."""
    schema = pa.ipc.open_file(path).schema
    out = []
    with path.open("rb") as f:
        for offset, meta_len, body_len in [
            (b.offset, b.meta_length, b.body_length) for b in record_batch_blocks(f.fileno())
        ]:
            f.seek(offset)
            message = pa.ipc.read_message(f.read(meta_len + body_len))
            out.append(message_codecs(schema, message))
    return out


def write_ahead_codecs(path: Path) -> list[dict[str, str]]:
    """Per batch of an open segment's file (a stream after the file magic): raw or packed."""
    data = pa.py_buffer(path.read_bytes())[STREAM_START:]
    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(data))
    schema = pa.ipc.read_schema(reader.read_next_message())
    out = []
    for message in reader:  # to the end of the stream (O_DIRECT's zero padding reads as it)
        assert message.type == "record batch"
        out.append(message_codecs(schema, message))
    return out


def test_default_compresses_only_the_columns_that_shrink(make_engine: EngineFactory) -> None:
    e = make_engine()
    segment_topic(e, "t", format="arrow", max_rows=3 * ROWS, max_age_seconds=1.0)
    tables = [mixed(i) for i in range(3)]
    for t in tables:
        append_body(e, "t", body(t))
    [path] = sealed_files(e, "t", "arrow")
    # users' readers: the file reader (footer) and the stream reader (recovery) agree
    assert pa.ipc.open_file(path).read_all().equals(pa.concat_tables(tables))
    with path.open("rb") as f:
        f.seek(8)
        assert pa.ipc.open_stream(f).read_all().equals(pa.concat_tables(tables))
    for cols in batch_codecs(path):
        assert cols["noise"] == "raw"
        assert cols["model"] == "packed" and cols["status"] == "packed" and cols["time"] == "packed"
    columns = e.topic_usage("t").columns
    assert columns["noise"].codec == "none" and columns["noise"].ratio == pytest.approx(
        1.0, abs=0.01
    )
    assert columns["model"].codec == "lz4" and columns["model"].ratio <= 1 - MIN_SAVING
    assert columns["model"].raw_bytes > columns["model"].stored_bytes > 0


def test_uncompressed_batches_are_written_as_the_client_sent_them(
    make_engine: EngineFactory,
) -> None:
    e = make_engine()
    segment_topic(e, "t", format="arrow", compression="none", max_rows=ROWS, max_age_seconds=0.5)
    data = body(mixed(1))
    append_body(e, "t", data)
    [path] = sealed_files(e, "t", "arrow")
    table, messages = decode_append_messages(ARROW_FILE, data)
    assert messages is not None
    sent = messages[0].body.to_pybytes()
    on_disk = path.read_bytes()
    assert sent in on_disk  # the body's batch, byte for byte
    assert pa.ipc.open_file(path).read_all().equals(table)


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_an_explicit_codec_compresses_every_column(make_engine: EngineFactory, codec: str) -> None:
    e = make_engine()
    segment_topic(e, "t", format="arrow", compression=codec, max_rows=ROWS, max_age_seconds=0.5)
    append_body(e, "t", body(mixed(2)))
    [path] = sealed_files(e, "t", "arrow")
    assert pa.ipc.open_file(path).read_all().equals(mixed(2))
    columns = e.topic_usage("t").columns
    assert {c.codec for c in columns.values()} == {codec}


def test_a_client_compressed_body_is_stored_as_sent_and_reads_back(
    make_engine: EngineFactory,
) -> None:
    e = make_engine()
    segment_topic(e, "t", format="arrow", max_rows=2 * ROWS, max_age_seconds=1.0)
    append_body(e, "t", body(mixed(3), "zstd"))
    append_body(e, "t", body(mixed(4)))
    [path] = sealed_files(e, "t", "arrow")
    assert pa.ipc.open_file(path).read_all().equals(pa.concat_tables([mixed(3), mixed(4)]))
    got = e.read_partition("t", "0", 0, 10 * ROWS).table
    assert got.equals(pa.concat_tables([mixed(3), mixed(4)]))


def test_each_segment_judges_its_columns_anew(make_engine: EngineFactory) -> None:
    """A column that turns repetitive is compressed from the next segment on."""
    e = make_engine()
    segment_topic(e, "t", format="arrow", max_rows=ROWS, max_age_seconds=0.5)
    first = mixed(5)
    second = mixed(6).set_column(1, "noise", pa.array([0.5] * ROWS))
    append_body(e, "t", body(first))
    append_body(e, "t", body(second))
    wait_for(lambda: len(list((e.data_dir / "topics/t/0").glob("*.arrow"))) == 2)
    a, b = sorted((e.data_dir / "topics/t/0").glob("*.arrow"))
    assert batch_codecs(a)[0]["noise"] == "raw"
    assert batch_codecs(b)[0]["noise"] == "packed"
    assert e.topic_usage("t").columns["noise"].codec == "lz4"


def test_parquet_compresses_only_the_columns_that_shrink(make_engine: EngineFactory) -> None:
    e = make_engine()
    segment_topic(e, "t", format="parquet", max_rows=ROWS, max_age_seconds=0.5)
    append_body(e, "t", body(mixed(7)))
    [path] = sealed_files(e, "t", "parquet")
    meta = pq.read_metadata(path)
    codecs = {
        meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i).compression
        for i in range(meta.num_columns)
    }
    assert codecs["noise"] == "UNCOMPRESSED"
    assert codecs["model"] == "ZSTD" and codecs["tags.list.element"] in ("ZSTD", "UNCOMPRESSED")
    assert pq.read_table(path).equals(mixed(7))
    wait_for(lambda: "noise" in e.topic_usage("t").columns)
    columns = e.topic_usage("t").columns
    assert columns["noise"].codec == "none" and columns["model"].codec == "zstd"
    # explicit zstd: every column
    segment_topic(e, "z", format="parquet", compression="zstd", max_rows=ROWS, max_age_seconds=0.5)
    append_body(e, "z", body(mixed(8)))
    [path] = sealed_files(e, "z", "parquet")
    meta = pq.read_metadata(path)
    assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {"ZSTD"}


def test_parquet_write_ahead_compresses_only_the_columns_that_shrink(tmp_path: Path) -> None:
    """The write-ahead file, fsynced on every append, holds lz4 where a column shrinks
    (half the bytes of an ML log the writers wait for); after an unclean stop the rows
    are recovered from it exactly, and the Parquet file sealed from them is the same."""
    settings = StorageSettings(data_dir=tmp_path / "data")
    e = Engine(settings)
    segment_topic(e, "t", format="parquet", max_rows=10 * ROWS)
    # an explicit codec names the Parquet file's: its write-ahead is written as sent
    segment_topic(e, "z", format="parquet", compression="zstd", max_rows=10 * ROWS)
    tables = [mixed(i) for i in range(2)]
    for t in tables:
        append_body(e, "t", body(t))
    append_body(e, "z", body(mixed(3)))
    [wal] = (settings.data_dir / "topics/t/0").glob("*.open")
    assert len(write_ahead_codecs(wal)) == 2
    for cols in write_ahead_codecs(wal):
        assert cols["noise"] == "raw"
        assert cols["model"] == "packed" and cols["status"] == "packed"
    [wal] = (settings.data_dir / "topics/z/0").glob("*.open")
    assert {c for cols in write_ahead_codecs(wal) for c in cols.values()} == {"raw"}
    e._closed.set()  # abandoned as by kill -9: no seal, no footer
    e._lock_file.close()
    again = Engine(settings)
    try:
        got = again.read_partition("t", "0", 0, 10 * ROWS).table
        assert got.equals(pa.concat_tables(tables))
    finally:
        again.close()  # seals the recovered rows
    [path] = (settings.data_dir / "topics/t/0").glob("*.parquet")
    assert pq.read_table(path).equals(pa.concat_tables(tables))


def test_a_batch_that_would_save_little_is_written_as_sent(make_engine: EngineFactory) -> None:
    """A timestamp alone in a table of random values: not worth a message built anew."""
    e = make_engine()
    segment_topic(e, "t", format="arrow", max_rows=ROWS, max_age_seconds=0.5)
    rng = random.Random(11)
    table = pa.table(
        {
            "time": pa.array(range(ROWS), pa.int64()),
            **{f"r{i}": pa.array([rng.random() for _ in range(ROWS)]) for i in range(8)},
        }
    )
    data = body(table)
    append_body(e, "t", data)
    [path] = sealed_files(e, "t", "arrow")
    _, messages = decode_append_messages(ARROW_FILE, data)
    assert messages is not None
    assert messages[0].body.to_pybytes() in path.read_bytes()  # byte for byte
    columns = e.topic_usage("t").columns
    assert {c.codec for c in columns.values()} == {"none"}
    assert pa.ipc.open_file(path).read_all().equals(table)


def test_buffers_that_did_not_shrink_in_the_sample_are_not_tried_again() -> None:
    """A string column's offsets (incrementing ints) never shrink under lz4 while its
    values do: the plan tries only the buffers that shrank in the sample, writes the
    others raw, and the batch reads back the same."""
    table = mixed(0)
    batch = table.to_batches()[0]
    message = pa.ipc.read_message(batch.serialize())
    plan = ColumnPlan.choose(table.schema, SegmentConfig(format="arrow"), message)
    counts = buffers_per_column(table.schema)
    assert counts is not None and plan.buffers is not None
    model = table.schema.get_field_index("model")
    first = sum(counts[:model])  # validity, offsets, values
    assert plan.compress[model]
    assert plan.buffers[first + 1 : first + 3] == (False, True)
    encoded = plan.encode(message)
    written = pa.ipc.read_message(pa.py_buffer(b"".join(bytes(p) for p in encoded.pieces)))
    assert pa.ipc.read_record_batch(written, table.schema).equals(batch)
    offsets_at, _ = read_layout(written.metadata).buffers[first + 1]
    prefix = written.body[offsets_at : offsets_at + 8]
    assert int.from_bytes(prefix, "little", signed=True) == -1  # stored raw, not tried
