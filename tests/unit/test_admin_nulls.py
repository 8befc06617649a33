"""``PUT /admin/topics`` with explicit nulls: the node's default, never a 500.

A GitOps tool or the operator sends partial objects with nulls; schemathesis
once found that ``{"segment": {"format": null, ...}}`` failed validation inside
the engine and answered 500.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from plateau.protocol.topic_config import TopicConfig, TopicConfigRequest
from plateau.server.app import create_app
from plateau.settings import NodeSettings
from plateau.storage.config import StorageSettings
from plateau.storage.engine import Engine

DEFAULTS = TopicConfig.model_validate(
    {"retention": {"max_age_seconds": 3600}, "segment": {"format": "arrow", "max_rows": 7}}
)


def request(body: dict[str, object]) -> TopicConfigRequest:
    return TopicConfigRequest.model_validate(body)


def test_null_means_the_default_and_absent_keeps_the_value() -> None:
    base = TopicConfig.model_validate(
        {
            "partitions": 3,
            "retention": {"max_bytes": 10, "max_age_seconds": 5},
            "segment": {"format": "parquet", "max_rows": 99, "max_bytes": 1000},
        }
    )
    got = request({"segment": {"format": None, "max_rows": None}}).apply_to(base, DEFAULTS)
    assert got.segment.format == "arrow" and got.segment.max_rows == 7
    assert got.segment.max_bytes == 1000  # left out: kept
    assert got.retention == base.retention and got.partitions == 3
    got = request({"retention": {"max_age_seconds": None}}).apply_to(base, DEFAULTS)
    assert got.retention.max_age_seconds == 3600 and got.retention.max_bytes == 10
    got = request({"retention": None, "segment": None, "partitions": None}).apply_to(base, DEFAULTS)
    assert got.retention == DEFAULTS.retention and got.segment == DEFAULTS.segment
    assert got.partitions == 3  # partitions never decrease: null keeps them


def test_explicit_nulls_over_http_are_defaults_and_partitions_never_shrink(
    tmp_path: Path,
) -> None:
    settings = NodeSettings(storage=StorageSettings(data_dir=tmp_path / "data"))
    engine = Engine(settings.storage)
    app = create_app(settings, engine)
    found_by_fuzzer = {
        "segment": {"format": None, "max_rows": None, "max_bytes": None, "max_age_seconds": 1.0}
    }

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://node") as c,
        ):
            r = await c.put("/admin/topics/x", json=found_by_fuzzer)
            assert r.status_code == 201, r.text
            segment = r.json()["segment"]
            default = settings.storage.topic_defaults.segment
            assert segment["format"] == default.format
            assert segment["max_rows"] == default.max_rows
            assert segment["max_age_seconds"] == 1.0
            assert (await c.put("/admin/topics/x", json={"partitions": 4})).status_code == 200
            r = await c.put("/admin/topics/x", json={"partitions": 2})
            assert r.status_code == 409 and "never decrease" in r.json()["message"]
            assert (await c.get("/admin/topics/x")).json()["partitions"] == 4

    asyncio.run(scenario())
