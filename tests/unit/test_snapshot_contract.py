"""``snapshot.json`` as a contract: documents written before still read, newer ones are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plateau.protocol.snapshot import (
    SNAPSHOT_FILE,
    SNAPSHOT_VERSION,
    SnapshotError,
    SnapshotVersionError,
    decode,
    encode,
)
from plateau.spark.options import OptionError
from plateau.spark.path_listing import load_snapshot
from plateau.storage.snapshot_writer import SnapshotWriter

# Written by the node before plateau.protocol.snapshot existed (SnapshotWriter over dicts and
# SegmentRow.to_json, at commit 693f363): the bytes a data directory from then holds.
VERSION_1 = (
    b'{"generation":1,"topics":{"empty":{"config":{"partitions":1,"retention":{"max_age_seconds"'
    b':null,"max_bytes":1073741824},"segment":{"compression":null,"format":"arrow",'
    b'"max_age_seconds":60.0,"max_bytes":67108864,"max_rows":1000000}},"partitions":{"0":'
    b'{"end":0,"segments":[],"start":0}}},"events":{"config":{"partitions":2,"retention":'
    b'{"max_age_seconds":3600,"max_bytes":1073741824},"segment":{"compression":null,"format":'
    b'"parquet","max_age_seconds":60.0,"max_bytes":67108864,"max_rows":150}},"partitions":{"0":'
    b'{"end":250,"segments":[{"bytes":4711,"end_index":100,"first_index":0,"format":"parquet",'
    b'"id":1,"max_time_ms":1763000099000,"min_time_ms":1763000000000,"path":'
    b'"topics/events/0/00000000000000000000.parquet","rows":100},{"bytes":6502,"end_index":250,'
    b'"first_index":100,"format":"parquet","id":3,"max_time_ms":1763000249000,"min_time_ms":'
    b'1763000100000,"path":"topics/events/0/00000000000000000100.parquet","rows":150}],"start":0},'
    b'"1":{"end":0,"segments":[],"start":0}}}},"version":1,"written_at":1795657700.3914185}'
)


def test_a_version_1_document_written_by_the_old_node_decodes() -> None:
    snapshot = decode(VERSION_1)
    assert (snapshot.version, snapshot.generation) == (1, 1)
    assert snapshot.written_at == 1795657700.3914185
    assert sorted(snapshot.topics) == ["empty", "events"]
    events = snapshot.topics["events"]
    assert events.config.partitions == 2 and events.config.segment.max_rows == 150
    assert events.config.retention.max_age_seconds == 3600
    assert snapshot.topics["empty"].config.segment.format == "arrow"
    p0 = events.partitions["0"]
    assert (p0.start, p0.end) == (0, 250)
    second = p0.segments[1]
    assert (second.id, second.first_index, second.end_index, second.rows) == (3, 100, 250, 150)
    assert (second.bytes, second.format) == (6502, "parquet")
    assert (second.min_time_ms, second.max_time_ms) == (1763000100000, 1763000249000)
    assert second.path == "topics/events/0/00000000000000000100.parquet"
    assert events.partitions["1"].segments == ()


def test_encode_writes_the_same_document_and_decode_reads_it_back() -> None:
    snapshot = decode(VERSION_1)
    data = encode(snapshot)
    written = json.loads(data)
    for topic in written["topics"].values():  # added since, at its default: old readers skip it
        assert topic["config"].pop("archive") == {"enabled": False, "required": None}
    assert written == json.loads(VERSION_1)  # same keys and values: old readers read it
    assert decode(data) == snapshot


def test_fields_a_later_node_adds_are_ignored() -> None:
    doc = json.loads(VERSION_1)
    doc["hint"] = "new"
    doc["topics"]["events"]["config"]["segment"]["dictionary"] = True
    doc["topics"]["events"]["partitions"]["0"]["segments"][0]["checksum"] = "abc"
    assert decode(json.dumps(doc).encode()) == decode(VERSION_1)


@pytest.mark.parametrize("shape", ["same", "other"])
def test_a_newer_version_is_refused_by_name(shape: str) -> None:
    doc = json.loads(VERSION_1) if shape == "same" else {"topics": [], "layout": "v2"}
    doc["version"] = SNAPSHOT_VERSION + 1
    with pytest.raises(SnapshotVersionError, match="upgrade plateau-k8s") as caught:
        decode(json.dumps(doc).encode())
    assert caught.value.version == SNAPSHOT_VERSION + 1
    assert "snapshot version 2; this reader knows version 1" in str(caught.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", r"not a plateau snapshot: Invalid JSON"),
        (b"[]", r"not a plateau snapshot: Input should be an object"),
        (b'{"version":"1","generation":1,"written_at":0,"topics":{}}', r"^not a plateau.*version"),
        (
            VERSION_1.replace(b'"end":250,', b""),
            r"not a plateau snapshot: topics\.events\.partitions\.0\.end: Field required$",
        ),
    ],
)
def test_a_malformed_document_is_refused_with_where(data: bytes, message: str) -> None:
    with pytest.raises(SnapshotError, match=message):
        decode(data)


def test_spark_names_the_path_option_and_the_version(tmp_path: Path) -> None:
    doc = json.loads(VERSION_1) | {"version": 7}
    (tmp_path / SNAPSHOT_FILE).write_text(json.dumps(doc))
    with pytest.raises(OptionError, match=r"option 'path': .* has version 7; this reader knows"):
        load_snapshot(tmp_path)
    (tmp_path / SNAPSHOT_FILE).write_bytes(b"{")
    with pytest.raises(OptionError, match=r"option 'path': cannot read .*snapshot\.json: not a"):
        load_snapshot(tmp_path)
    (tmp_path / SNAPSHOT_FILE).write_bytes(VERSION_1)
    assert load_snapshot(tmp_path) == decode(VERSION_1)


def test_the_writer_continues_the_generation_of_an_old_document(tmp_path: Path) -> None:
    (tmp_path / SNAPSHOT_FILE).write_bytes(VERSION_1)
    SnapshotWriter(tmp_path).write([])
    written = decode((tmp_path / SNAPSHOT_FILE).read_bytes())
    assert (written.version, written.generation, written.topics) == (1, 2, {})
    SnapshotWriter(tmp_path).write([])
    assert decode((tmp_path / SNAPSHOT_FILE).read_bytes()).generation == 3
