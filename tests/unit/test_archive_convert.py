"""An arrow segment is archived as the Parquet file a parquet topic would have sealed
(same row groups, dictionaries and rows), with plateau's span in its footer, converted
one row group at a time; a parquet segment goes up as it is."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from plateau.storage.archive.convert import clean_tmp, stage
from plateau.storage.catalog.manifest import SegmentRow
from plateau.storage.data.sealed_writer import PARQUET_ROW_GROUP, write_sealed
from plateau.storage.types import Index, SegmentId


def table(n: int) -> pa.Table:
    return pa.table(
        {
            "time": pa.array(range(n), pa.int64()),
            "key": pa.array([f"k{i % 5}" for i in range(n)]),
            "v": pa.array([i * 0.5 for i in range(n)]),
        }
    )


def row(path: str, fmt: str, first: int, n: int) -> SegmentRow:
    return SegmentRow(
        SegmentId(7), "t", "p", fmt, Index(first), Index(first + n), 0, 0, n, path, 0.0
    )


@pytest.mark.parametrize("n", [10, PARQUET_ROW_GROUP, 2 * PARQUET_ROW_GROUP + 1234])
@pytest.mark.parametrize("stream_only", [False, True])
def test_arrow_segment_becomes_the_parquet_a_parquet_topic_seals(
    tmp_path: Path, n: int, stream_only: bool
) -> None:
    whole = table(n)
    local = tmp_path / "seg.arrow"
    sink = pa.OSFile(str(local), "wb")
    writer = pa.ipc.new_file(sink, whole.schema)
    for batch in whole.to_batches(max_chunksize=3000):  # appends arrive in small batches
        writer.write_batch(batch)
    if stream_only:  # sealed in place on a full volume: no footer
        sink.flush()
    else:
        writer.close()
    sink.close()
    staged = stage(row("seg.arrow", "arrow", 1000, n), tmp_path, clean_tmp(tmp_path), "zstd")
    assert staged.temporary and staged.span_in_footer and staged.rows == n
    got = pq.ParquetFile(staged.path)
    assert got.read().equals(whole)
    reference = tmp_path / "ref.parquet"
    write_sealed(reference, whole, "parquet", "zstd")
    ref = pq.ParquetFile(reference).metadata
    meta = got.metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [
        ref.row_group(i).num_rows for i in range(ref.num_row_groups)
    ]
    kv = meta.metadata
    assert (
        kv[b"plateau.first_index"] == b"1000" and kv[b"plateau.end_index"] == str(1000 + n).encode()
    )
    assert kv[b"plateau.topic"] == b"t" and kv[b"plateau.partition"] == b"p"
    encodings = meta.row_group(0).column(1).encodings
    assert any("DICTIONARY" in e for e in encodings)  # repeated keys keep their dictionary
    assert [f.name for f in staged.fields()] == ["time", "key", "v"]
    staged.discard()
    assert not staged.path.exists()


def test_parquet_segment_goes_up_as_it_is(tmp_path: Path) -> None:
    local = tmp_path / "seg.parquet"
    write_sealed(local, table(100), "parquet", "zstd")
    staged = stage(row("seg.parquet", "parquet", 0, 100), tmp_path, clean_tmp(tmp_path), "zstd")
    assert staged.path == local and not staged.temporary and staged.rows == 100
    staged.discard()
    assert local.exists()
