"""One owner per topic, over HTTP against a real node (DESIGN.md 5.1).

A second ``PlateauTopic`` naming a topic another one owns must neither change
nor delete it; a re-created resource (same kind, namespace, name; new uid)
takes its topic back; an ownerless topic is taken only with ``adopt``. Every
409 names its rule in ``reason``, and a request that keeps or lowers a budget
is never refused for the budget.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from plateau.protocol import JSON
from testkit.arrowhttp import append
from testkit.nodeproc import NodeProcess

TOKEN = "owner-token"
GB = 10**9


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    """One node with room for every test's topics (each test uses names of its own)."""
    data = tmp_path_factory.mktemp("owner") / "data"
    proc = NodeProcess(data, token=TOKEN, args=["--capacity-bytes", str(1000 * GB)]).start()
    yield proc
    proc.stop()


def owner(namespace: str = "team-a", name: str = "events", uid: str = "uid-1") -> dict[str, str]:
    return {"kind": "PlateauTopic", "namespace": namespace, "name": name, "uid": uid}


def put(c: httpx.Client, topic: str, body: dict[str, Any] | None = None) -> httpx.Response:
    return c.put(f"/admin/topics/{topic}", json=body or {})


def get(c: httpx.Client, topic: str) -> dict[str, Any]:
    r = c.get(f"/admin/topics/{topic}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def refused(r: httpx.Response, reason: str) -> dict[str, Any]:
    """A 409 with the machine-readable reason beside the usual message and code."""
    assert r.status_code == 409, r.text
    body: dict[str, Any] = r.json()
    assert body["code"] == 409 and body["message"] and body["reason"] == reason, body
    return body


def test_created_with_owner_and_a_second_claimant_changes_nothing(shared: NodeProcess) -> None:
    a, b = owner(), owner(namespace="team-b")
    with shared.client() as c:
        r = put(c, "claimed", {"owner": a, "retention": {"max_bytes": GB}})
        assert r.status_code == 201, r.text
        reply = r.json()
        assert reply["owner"] == a and reply["claim"] == "created"
        assert reply["previous_owner"] is None and reply["retention"]["max_bytes"] == GB
        assert get(c, "claimed")["owner"] == a

        before = get(c, "claimed")
        body = refused(
            put(c, "claimed", {"owner": b, "retention": {"max_bytes": 2 * GB}}), "OwnerConflict"
        )
        assert body["owner"] == a  # names who holds it
        assert "team-a/events" in body["message"] and "team-b/events" in body["message"]
        assert get(c, "claimed") == before  # budget and owner as they were

        r = put(c, "claimed", {"owner": a, "retention": {"max_bytes": 3 * GB}})
        assert r.status_code == 200, r.text
        assert r.json()["claim"] == "owned" and r.json()["previous_owner"] is None
        assert get(c, "claimed")["retention"]["max_bytes"] == 3 * GB

        # an admin (no owner in the request) works as before and leaves the owner alone
        r = put(c, "claimed", {"partitions": 2})
        assert r.status_code == 200, r.text
        assert r.json()["claim"] == "admin" and r.json()["owner"] == a
        assert get(c, "claimed")["owner"] == a and get(c, "claimed")["partitions"] == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"owner": {"kind": "PlateauTopic", "namespace": "team-a", "name": "events"}},  # no uid
        {"owner": {**owner(), "namespace": ""}},
        {"owner": {**owner(), "uid": 7}},
        {"owner": {**owner(), "extra": "x"}},
        {"owner": "team-a/events"},
        {"owner": owner(), "adopt": "please"},
    ],
)
def test_malformed_owner_is_400_and_changes_nothing(shared: NodeProcess, bad: Any) -> None:
    with shared.client() as c:
        assert put(c, "shape", {"owner": owner(uid="shape")}).status_code in (200, 201)
        before = get(c, "shape")
        r = put(c, "shape", {**bad, "retention": {"max_bytes": 5 * GB}})
        assert r.status_code == 400, r.text
        assert set(r.json()) == {"message", "code"}
        assert get(c, "shape") == before


def test_delete_naming_another_owner_deletes_nothing(shared: NodeProcess) -> None:
    a = owner(name="kept", uid="uid-kept")
    with shared.client() as c:
        assert put(c, "kept", {"owner": a}).status_code == 201
        assert append(c, "kept", "0", pa.table({"x": [1, 2, 3]})).status_code == 200
        body = refused(
            c.delete("/admin/topics/kept", params={"owner_uid": "uid-other"}), "OwnerConflict"
        )
        assert body["owner"] == a
        rows = c.get(
            "/topic/kept/partition/0/records",
            params={"start": 0},
            headers={"accept": JSON},
        )
        assert [r["x"] for r in rows.json()] == [1, 2, 3]  # plateau's bare array
        assert get(c, "kept")["owner"] == a

        assert c.delete("/admin/topics/kept", params={"owner_uid": "uid-kept"}).status_code == 204
        assert c.get("/admin/topics/kept").status_code == 404

        # an ownerless topic: a delete naming an owner is refused, one without goes ahead
        assert put(c, "loose").status_code == 201
        body = refused(
            c.delete("/admin/topics/loose", params={"owner_uid": "uid-kept"}), "OwnerConflict"
        )
        assert body["owner"] is None
        assert c.get("/admin/topics/loose").status_code == 200
        assert c.delete("/admin/topics/loose").status_code == 204


def test_recreated_resource_reclaims_its_topic(shared: NodeProcess) -> None:
    old, new = owner(name="again", uid="uid-old"), owner(name="again", uid="uid-new")
    with shared.client() as c:
        assert put(c, "again", {"owner": old, "retention": {"max_bytes": GB}}).status_code == 201
        r = put(c, "again", {"owner": new, "retention": {"max_bytes": 2 * GB}})
        assert r.status_code == 200, r.text
        reply = r.json()
        assert reply["claim"] == "reclaimed"
        assert reply["owner"] == new and reply["previous_owner"] == old
        got = get(c, "again")
        assert got["owner"]["uid"] == "uid-new" and got["retention"]["max_bytes"] == 2 * GB
        # the old uid no longer deletes it
        refused(c.delete("/admin/topics/again", params={"owner_uid": "uid-old"}), "OwnerConflict")


def test_ownerless_topic_is_taken_only_with_adopt(shared: NodeProcess) -> None:
    a, b = owner(name="legacy", uid="uid-a"), owner(namespace="team-b", name="x", uid="uid-b")
    with shared.client() as c:
        r = put(c, "handmade", {"retention": {"max_bytes": GB}})
        assert r.status_code == 201 and r.json()["owner"] is None and r.json()["claim"] == "created"
        assert get(c, "handmade")["owner"] is None
        r = put(c, "handmade", {})
        assert r.status_code == 200 and r.json()["claim"] == "unowned"

        body = refused(
            put(c, "handmade", {"owner": a, "retention": {"max_bytes": 2 * GB}}), "OwnerConflict"
        )
        assert body["owner"] is None and "adopt" in body["message"]
        assert get(c, "handmade")["owner"] is None
        assert get(c, "handmade")["retention"]["max_bytes"] == GB

        r = put(c, "handmade", {"owner": a, "adopt": True, "retention": {"max_bytes": 2 * GB}})
        assert r.status_code == 200, r.text
        assert r.json()["claim"] == "adopted"
        assert r.json()["owner"] == a and r.json()["previous_owner"] is None
        assert get(c, "handmade")["retention"]["max_bytes"] == 2 * GB

        # adopt also takes a topic from another owner, saying whose it was
        r = put(c, "handmade", {"owner": b, "adopt": True})
        assert r.status_code == 200 and r.json()["claim"] == "adopted"
        assert r.json()["previous_owner"] == a and get(c, "handmade")["owner"] == b
        # the owner it holds needs no adopt
        assert put(c, "handmade", {"owner": b}).json()["claim"] == "owned"


def test_every_409_names_its_rule(shared: NodeProcess) -> None:
    with shared.client() as c:
        assert put(c, "rules", {"partitions": 3}).status_code == 201
        body = refused(put(c, "rules", {"partitions": 2}), "PartitionsDecrease")
        assert "never decrease" in body["message"] and "owner" not in body
        body = refused(put(c, "rules", {"retention": {"max_bytes": 10**15}}), "OverBudget")
        assert "does not fit" in body["message"] and "owner" not in body
        body = refused(put(c, "rules-new", {"retention": {"max_bytes": 10**15}}), "OverBudget")
        assert c.get("/admin/topics/rules-new").status_code == 404
        assert get(c, "rules")["partitions"] == 3
        # the other errors keep their two fields
        r = c.get("/admin/topics/nowhere")
        assert r.status_code == 404 and set(r.json()) == {"message", "code"}


def test_keeping_or_lowering_a_budget_is_accepted_over_capacity(tmp_path: Path) -> None:
    """Raising the reserve leaves the node's budgets over its limit; the operator's next
    reconcile sends the same config, and a team cuts its budget: neither may be refused."""
    data = tmp_path / "data"
    cap = ["--capacity-bytes", str(1000)]
    a = owner(name="big", uid="uid-big")
    proc = NodeProcess(data, token=TOKEN, args=cap, env={"PLATEAU_STORAGE__RESERVE_FRACTION": "0"})
    with proc.start().client() as c:
        assert put(c, "big", {"owner": a, "retention": {"max_bytes": 600}}).status_code == 201
        assert put(c, "small", {"retention": {"max_bytes": 300}}).status_code == 201
    proc.stop()

    over = NodeProcess(
        data, token=TOKEN, args=cap, env={"PLATEAU_STORAGE__RESERVE_FRACTION": "0.5"}
    )
    try:
        with over.start().client() as c:
            node = c.get("/admin/node").json()
            assert node["allocated_bytes"] == 900 > node["capacity_bytes"] - node["reserve_bytes"]
            same = get(c, "big")
            full = {k: same[k] for k in ("partitions", "retention", "segment")}
            for body in ({}, full, {"owner": a, **full}, {"segment": {"max_rows": 10}}):
                r = put(c, "big", body)
                assert r.status_code == 200, (body, r.text)
            r = put(c, "big", {"owner": a, "retention": {"max_bytes": 550}})  # still over
            assert r.status_code == 200, r.text
            assert put(c, "small", {"retention": {"max_bytes": 300}}).status_code == 200
            refused(put(c, "big", {"retention": {"max_bytes": 551}}), "OverBudget")
            refused(put(c, "fresh", {"retention": {"max_bytes": 0}}), "OverBudget")
            got = get(c, "big")
            assert got["retention"]["max_bytes"] == 550 and got["segment"]["max_rows"] == 10
            assert c.get("/admin/node").json()["allocated_bytes"] == 850
    finally:
        over.stop()
