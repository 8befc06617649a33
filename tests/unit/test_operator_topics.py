"""What a topic's Events say a PUT changed: pure functions over the node's replies."""

from __future__ import annotations

from typing import Any

from plateau.protocol.replies import Claim, TopicPutReply, TopicStatus, TopicUsage
from plateau.protocol.topic_config import TopicConfig, TopicOwner
from plateau_operator.status import merge_patch, status_patch
from plateau_operator.topics import change_notes, config_of, describe_config

GiB, MiB = 1 << 30, 1 << 20


def config(partitions: int = 1, budget: int = GiB, age: int | None = None) -> dict[str, Any]:
    return {
        "partitions": partitions,
        "retention": {"max_bytes": budget, "max_age_seconds": age},
        "segment": {"format": "parquet", "max_rows": 1000, "max_bytes": 64 * MiB},
    }


def reply(partitions: int = 1, budget: int = GiB, age: int | None = None) -> TopicConfig:
    return TopicConfig.model_validate(config(partitions, budget, age))


def test_a_budget_change_and_other_settings_are_told_apart_old_to_new() -> None:
    notes = change_notes("events", "ingest", reply(), reply(2, 512 * MiB, 86400))
    assert notes == [
        ("BudgetChanged", "budget of topic 'events' on node 'ingest': 1.0Gi → 512.0Mi"),
        ("Configured", "topic 'events' on node 'ingest': partitions 1 → 2; "
                       "retention.max_age_seconds unset → 86400"),
    ]  # fmt: skip
    assert change_notes("events", "ingest", reply(), reply()) == []


def test_replies_compare_by_configuration_alone() -> None:
    owner = TopicOwner(kind="PlateauTopic", namespace="n", name="t", uid="a")
    usage = TopicUsage(bytes=10, records=1, oldest_time_ms=None, newest_time_ms=None, partitions={})
    get = TopicStatus.model_validate({**config(), "owner": owner, "usage": usage})
    put = TopicPutReply.model_validate(
        {**config(), "owner": owner, "claim": Claim.OWNED, "previous_owner": None}
    )
    assert config_of(get) == config_of(put)
    assert describe_config(reply(4)) == "4 partitions, budget 1.0Gi"
    assert describe_config(reply(1)) == "1 partition, budget 1.0Gi"


def test_a_status_patch_removes_what_is_gone_and_is_empty_when_nothing_changed() -> None:
    old = {"usage": {"bytes": 5, "oldestTime": "t0", "partitions": {"0": {"end": 5}}}, "x": 1}
    new = {"usage": {"bytes": 0, "partitions": {"0": {"end": 5}}}}
    assert status_patch(old, new) == {"usage": {"bytes": 0, "oldestTime": None}}
    assert status_patch(old, {"usage": old["usage"]}) == {}
    assert merge_patch({"a": [1]}, {"a": [2]}) == {"a": [2]}  # lists are replaced whole
