"""Topic owners through ``plateau.client`` (sync and async, in step) and the CLI.

The operator reaches the node only through this client, so a refused claim
must come back as a ``ConflictError`` it can branch on (``reason``) and
report (``owner``) without parsing the message.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from plateau.cli import app
from plateau.client import AsyncPlateauClient, ConflictError, PlateauClient
from plateau.protocol.replies import Claim
from plateau.protocol.topic_config import TopicOwner
from testkit.nodeproc import NodeProcess

TOKEN = "client-token"
A = {"kind": "PlateauTopic", "namespace": "team-a", "name": "events", "uid": "uid-a"}
B = {"kind": "PlateauTopic", "namespace": "team-b", "name": "events", "uid": "uid-b"}
OWNER_A, OWNER_B = TopicOwner.model_validate(A), TopicOwner.model_validate(B)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    data = tmp_path_factory.mktemp("owner-client") / "data"
    proc = NodeProcess(data, token=TOKEN, args=["--capacity-bytes", str(10**12)]).start()
    yield proc
    proc.stop()


def test_sync_client_conflicts_carry_reason_and_owner(shared: NodeProcess) -> None:
    with PlateauClient(shared.url, token=TOKEN) as c:
        created = c.put_topic("sync-t", owner=A, max_bytes=10**9)
        assert created.claim == Claim.CREATED and created.owner == OWNER_A

        with pytest.raises(ConflictError) as refused:
            c.put_topic("sync-t", owner=B, max_bytes=2 * 10**9)
        assert refused.value.reason == "OwnerConflict" and refused.value.owner == A
        assert c.get_topic("sync-t").retention.max_bytes == 10**9

        with pytest.raises(ConflictError) as refused:
            c.put_topic("sync-t", max_bytes=10**15)
        assert refused.value.reason == "OverBudget" and refused.value.owner is None
        with pytest.raises(ConflictError) as refused:
            c.put_topic("sync-t", partitions=2)
            c.put_topic("sync-t", partitions=1)
        assert refused.value.reason == "PartitionsDecrease"

        # body= passes owner and adopt through as the operator sends them
        reply = c.put_topic("sync-t", body={"owner": B, "adopt": True})
        assert reply.claim == Claim.ADOPTED and reply.previous_owner == OWNER_A

        with pytest.raises(ConflictError) as refused:
            c.delete_topic("sync-t", owner_uid="uid-a")
        assert refused.value.reason == "OwnerConflict" and refused.value.owner == B
        assert "sync-t" in c.topics()
        c.delete_topic("sync-t", owner_uid="uid-b")
        assert "sync-t" not in c.topics()


def test_async_client_is_in_step(shared: NodeProcess) -> None:
    async def scenario() -> None:
        async with AsyncPlateauClient(shared.url, token=TOKEN) as c:
            await c.put_topic("async-t", owner=A)
            with pytest.raises(ConflictError) as refused:
                await c.put_topic("async-t", owner=B)
            assert refused.value.reason == "OwnerConflict" and refused.value.owner == A
            reply = await c.put_topic("async-t", owner=B, adopt=True)
            assert reply.claim == Claim.ADOPTED and reply.owner == OWNER_B
            with pytest.raises(ConflictError) as refused:
                await c.delete_topic("async-t", owner_uid="uid-a")
            assert refused.value.owner == B
            await c.delete_topic("async-t", owner_uid="uid-b")
            assert "async-t" not in await c.topics()

    asyncio.run(scenario())


def test_cli_shows_the_owner_and_deletes_without_one(shared: NodeProcess) -> None:
    env = {"PLATEAU_URL": shared.url, "PLATEAU_TOKEN": TOKEN}
    with PlateauClient(shared.url, token=TOKEN) as c:
        c.put_topic("cli-t", owner=A)
    shown = CliRunner().invoke(app, ["topic", "get", "cli-t"], env=env)
    assert shown.exit_code == 0, shown.stderr
    assert json.loads(shown.stdout)["owner"] == A
    gone = CliRunner().invoke(app, ["topic", "delete", "cli-t", "--yes"], env=env)
    assert gone.exit_code == 0, gone.stderr
    with PlateauClient(shared.url, token=TOKEN) as c:
        assert "cli-t" not in c.topics()
