"""The archive's key layout: the contract any engine reading the bucket relies on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from plateau.protocol.archive import (
    ArchivedSegment,
    ArchiveManifest,
    ArchiveUrl,
    manifest_key,
    parse_segment_name,
    segment_key,
    segment_name,
)
from plateau.protocol.errors import InvalidInput
from plateau.protocol.topic_config import ArchiveConfig, TopicConfig, TopicConfigRequest


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://bkt", "bkt", ""),
        ("s3://bkt/", "bkt", ""),
        ("s3://bkt/a/b/", "bkt", "a/b"),
        ("s3a://bkt/a", "bkt", "a"),
    ],
)
def test_archive_url_parses_bucket_and_prefix(url: str, bucket: str, prefix: str) -> None:
    parsed = ArchiveUrl.parse(url)
    assert (parsed.bucket, parsed.prefix) == (bucket, prefix)
    assert parsed.s3a() == f"s3a://{bucket}" + (f"/{prefix}" if prefix else "")


@pytest.mark.parametrize("url", ["http://bkt/x", "s3://", "bkt/x", "s3://bkt/x?y=1"])
def test_a_bad_archive_url_is_refused_by_name(url: str) -> None:
    with pytest.raises(InvalidInput, match="archive url"):
        ArchiveUrl.parse(url)


def test_keys_are_hive_partitioned_and_sort_by_index() -> None:
    assert segment_key("events", "0", 0, 1000) == (
        "events/partition=0/00000000000000000000-00000000000000000999.parquet"
    )
    assert manifest_key("events") == "events/_plateau_archive.json"
    names = [segment_name(a, b) for a, b in [(0, 10), (10, 100), (100, 10**12)]]
    assert names == sorted(names)


@given(st.integers(0, 10**18), st.integers(1, 10**6))
def test_a_segment_name_parses_back_to_its_span(first: int, rows: int) -> None:
    assert parse_segment_name(segment_name(first, first + rows)) == (first, first + rows)


@pytest.mark.parametrize("name", ["_plateau_archive.json", "1-2.parquet", "x.parquet"])
def test_other_names_are_not_segments(name: str) -> None:
    assert parse_segment_name(name) is None


def test_an_empty_span_has_no_key() -> None:
    with pytest.raises(ValueError, match="empty span"):
        segment_name(5, 5)


def test_the_manifest_round_trips_and_groups_by_partition() -> None:
    def seg(p: str, start: int, end: int) -> ArchivedSegment:
        return ArchivedSegment(
            partition=p,
            start=start,
            end=end,
            min_time_ms=0,
            max_time_ms=1,
            bytes=10,
            key=segment_key("t", p, start, end),
            etag="00",
            archived_at=1.0,
        )

    manifest = ArchiveManifest(
        topic="t", updated_at=2.0, segments=[seg("1", 5, 9), seg("0", 9, 12), seg("0", 0, 9)]
    )
    again = ArchiveManifest.model_validate_json(manifest.model_dump_json(by_alias=True))
    assert again == manifest
    assert [(s.start, s.end) for s in again.by_partition()["0"]] == [(0, 9), (9, 12)]
    assert again.by_partition()["1"][0].rows == 4


def test_required_follows_enabled_unless_set() -> None:
    assert not ArchiveConfig().is_required()
    assert ArchiveConfig(enabled=True).is_required()
    assert not ArchiveConfig(enabled=True, required=False).is_required()
    assert not ArchiveConfig(enabled=False, required=True).is_required()


def test_a_topic_request_patches_the_archive_section_like_the_others() -> None:
    defaults = TopicConfig()
    on = TopicConfigRequest.model_validate({"archive": {"enabled": True}}).apply_to(
        defaults, defaults
    )
    assert on.archive == ArchiveConfig(enabled=True)
    kept = TopicConfigRequest.model_validate({"partitions": 2}).apply_to(on, defaults)
    assert kept.archive.enabled
    reset = TopicConfigRequest.model_validate({"archive": None}).apply_to(on, defaults)
    assert reset.archive == ArchiveConfig()
