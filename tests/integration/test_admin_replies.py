"""The client parses a real node's admin replies into plateau.protocol's reply models.

The node builds these replies from the same models (``plateau.protocol.replies``),
so a field added on one side and not the other would show here: every reply must
validate into its model and come back out as the very JSON the node sent.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pyarrow as pa
from pydantic import BaseModel
from typer.testing import CliRunner

from plateau.cli import app
from plateau.client import AsyncPlateauClient, PlateauClient
from plateau.protocol.replies import Claim, NodeInfo, TopicPutReply, TopicStatus
from plateau.protocol.topic_config import TopicOwner
from testkit.nodeproc import NodeProcess

OWNER = {"kind": "PlateauTopic", "namespace": "team-a", "name": "events", "uid": "uid-a"}


def same_json(model: BaseModel, raw: httpx.Response) -> None:
    assert raw.status_code == 200, raw.text
    assert model.model_dump(mode="json") == raw.json()


def test_sync_client_returns_typed_admin_replies(node: NodeProcess) -> None:
    with PlateauClient(node.url, token=node.token) as client:
        created = client.put_topic("typed", partitions=2, max_bytes=1 << 20, owner=OWNER)
        assert isinstance(created, TopicPutReply)
        assert created.claim == Claim.CREATED and created.owner == TopicOwner(**OWNER)
        assert created.partitions == 2 and created.retention.max_bytes == 1 << 20
        client.append("typed", "1", pa.table({"x": [1, 2, 3]}))

        status = client.get_topic("typed")
        assert isinstance(status, TopicStatus)
        assert status.usage.records == 3 and status.usage.partitions["1"].span.end == 3
        info = client.node_info(topics=True)
        assert isinstance(info, NodeInfo) and info.topics == 1
        assert info.topic_usage == {"typed": status.usage}
        assert set(info.memory.parts) == {"open_segments", "read_cache", "bodies", "body_pool"}

    with httpx.Client(base_url=node.url, headers=node.headers()) as raw:
        same_json(status, raw.get("/admin/topics/typed"))
        plain = raw.get("/admin/node")
        assert "topic_usage" not in plain.json()
        parsed = NodeInfo.model_validate(plain.json())
        assert parsed.model_dump(mode="json", exclude={"topic_usage"}) == plain.json()
        again = raw.put("/admin/topics/typed", json={})
        assert TopicPutReply.model_validate(again.json()).model_dump(mode="json") == again.json()


def test_async_client_returns_the_same_models(node: NodeProcess) -> None:
    with PlateauClient(node.url, token=node.token) as client:
        client.put_topic("both", partitions=1)

    async def read() -> tuple[TopicStatus, NodeInfo, TopicPutReply]:
        async with AsyncPlateauClient(node.url, token=node.token) as client:
            status = await client.get_topic("both")
            info = await client.node_info(topics=True)
            reply = await client.put_topic("both", max_bytes=2 << 20)
            return status, info, reply

    status, info, reply = asyncio.run(read())
    assert status.partitions == 1 and status.owner is None
    assert info.topic_usage is not None and info.topic_usage["both"] == status.usage
    assert reply.claim == Claim.UNOWNED and reply.retention.max_bytes == 2 << 20


def test_cli_prints_the_replies_as_the_node_sent_them(node: NodeProcess) -> None:
    env = {"PLATEAU_URL": node.url, "PLATEAU_TOKEN": node.token or ""}
    with PlateauClient(node.url, token=node.token) as client:
        client.put_topic("shown", partitions=1)
    with httpx.Client(base_url=node.url, headers=node.headers()) as raw:
        for args, path in ((["topic", "get", "shown"], "/admin/topics/shown"),
                           (["node-info"], "/admin/node")):  # fmt: skip
            shown = CliRunner().invoke(app, args, env=env)
            assert shown.exit_code == 0, shown.stderr
            sent = raw.get(path).json()
            if path == "/admin/node":  # free disk and memory move between the two calls
                assert set(json.loads(shown.stdout)) == set(sent)  # no topic_usage: null
            else:
                assert json.loads(shown.stdout) == sent
