"""How a read over archive and node is cut (``plateau.spark.archive_plan``): each index
from exactly one side, archived indexes from the archive even when still local, a hole
the node still has read from the node, a hole neither has reported as data loss, the
manifest's time spans pruning whole objects."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pytest

from plateau.protocol.archive import ArchivedSegment, ArchiveManifest, segment_key
from plateau.protocol.values import Span
from plateau.spark.archive_plan import ARCHIVED, ArchiveListing, footer_schema
from plateau.spark.options import SourceOptions, parse
from plateau.spark.plan import DataLoss, Slice, batch_ranges, plan


class NodeSpans:
    """The node's side as a listing of plain spans (url mode's slices: no files)."""

    def __init__(self, spans: dict[str, Span]) -> None:
        self._spans = spans

    def spans(self) -> dict[str, Span]:
        return dict(self._spans)

    def schema(self, partitions: Sequence[str]) -> pa.Schema:
        return pa.schema([("v", pa.int64())])

    def slices(self, partition: str, span: Span, options: SourceOptions) -> list[Slice]:
        return [Slice(partition, span.start, span.end)]


def seg(p: str, start: int, end: int) -> ArchivedSegment:
    return ArchivedSegment(
        partition=p, start=start, end=end, min_time_ms=start * 10, max_time_ms=end * 10 - 1,
        bytes=1000, key=segment_key("t", p, start, end), etag="0" * 32, archived_at=0.0,
    )  # fmt: skip


def listing(segments: list[ArchivedSegment], node: dict[str, Span]) -> ArchiveListing:
    manifest = ArchiveManifest(topic="t", updated_at=0.0, segments=segments)
    return ArchiveListing(manifest, NodeSpans(node), "s3a://b/pfx", lambda f, n: pa.schema([]))


def cut(lst: ArchiveListing, **raw: str) -> list[tuple[str, int, int, bool]]:
    options = parse({"url": "http://n", "topic": "t", "archive": "s3a://b/pfx", **raw})
    return [
        (s.partition, s.start, s.end, s.format == ARCHIVED)
        for s in plan(lst, batch_ranges(lst, options), options)
    ]


def test_archive_first_then_node_each_index_once() -> None:
    lst = listing([seg("0", 0, 100), seg("0", 100, 200)], {"0": Span(150, 260)})
    assert lst.spans() == {"0": Span(0, 260)}
    # [150, 200) is archived and still local: read from the archive only
    assert cut(lst) == [("0", 0, 100, True), ("0", 100, 200, True), ("0", 200, 260, False)]
    assert cut(lst, startingOffsets='{"0": 120}', endingOffsets='{"0": 210}') == [
        ("0", 120, 200, True),
        ("0", 200, 210, False),
    ]
    first = plan(lst, {"0": Span(120, 130)}, parse({"url": "http://n", "topic": "t"}))[0]
    assert (first.file, first.first_index, first.file_end) == (
        "s3a://b/pfx/t/partition=0/00000000000000000100-00000000000000000199.parquet",
        100,
        200,
    )


def test_a_hole_the_node_has_is_read_there() -> None:
    lst = listing([seg("0", 0, 100), seg("0", 200, 300)], {"0": Span(50, 320)})
    assert cut(lst) == [("0", 0, 100, True), ("0", 100, 320, False)]


def test_a_hole_neither_has_is_data_loss() -> None:
    lst = listing([seg("0", 0, 100), seg("0", 200, 300)], {"0": Span(250, 320)})
    with pytest.raises(DataLoss, match=r"\[100, 200\)"):
        cut(lst)
    assert cut(lst, failOnDataLoss="false") == [
        ("0", 0, 100, True),
        ("0", 200, 300, True),
        ("0", 300, 320, False),
    ]


def test_time_bounds_prune_archived_objects() -> None:
    lst = listing([seg("0", 0, 100), seg("0", 100, 200), seg("1", 0, 100)], {})
    # [1000, 1500) ms: segment [100, 200) only (its times are 1000..1999)
    assert cut(lst, startingTimestamp="1000", endingTimestamp="1500") == [("0", 100, 200, True)]
    assert cut(lst, partitions="1") == [("1", 0, 100, True)]


def test_footer_alone_gives_the_schema() -> None:
    import io

    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table({"v": list(range(50_000)), "s": ["x"] * 50_000}), out)
    data = out.getvalue()
    assert footer_schema(data[-4096:], "f").names == ["v", "s"]
    with pytest.raises(ValueError):
        footer_schema(data[-12:], "f")  # the footer is longer: its length is asked for


def test_archive_option_is_checked() -> None:
    from plateau.spark.options import OptionError

    assert parse({"url": "http://n", "topic": "t", "archive": "s3://b/p/"}).archive == "b/p"
    assert parse({"url": "http://n", "topic": "t", "archive": "s3a://b"}).archive == "b"
    for bad in ("http://b/p", "s3a://", "b/p"):
        with pytest.raises(OptionError, match="option 'archive'"):
            parse({"url": "http://n", "topic": "t", "archive": bad})
