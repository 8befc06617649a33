"""``GET /admin/node?topics=true``: the node's figures and every topic's usage in one call,
which the operator polls (one call per node) to keep its statuses up with ingest."""

from __future__ import annotations

import httpx
import pyarrow as pa

from plateau.client import PlateauClient
from testkit.arrowhttp import append
from testkit.nodeproc import NodeProcess


def test_node_usage_with_topics_gives_each_topics_usage_as_get_topic_does(
    node: NodeProcess,
) -> None:
    with httpx.Client(base_url=node.url, headers=node.headers()) as c:
        for name, budget in (("a", 1 << 20), ("b.two", 2 << 20)):
            r = c.put(f"/admin/topics/{name}", json={"retention": {"max_bytes": budget}})
            assert r.status_code == 201, r.text
        table = pa.table({"x": [1, 2, 3], "time": pa.array([1_700_000_000_000] * 3, pa.int64())})
        append(c, "a", "0", table)

        plain = c.get("/admin/node").json()
        assert "topic_usage" not in plain  # the plain reply is as it was
        full = c.get("/admin/node", params={"topics": "true"}).json()
        assert full["allocated_bytes"] == 3 << 20 and full["topics"] == 2
        assert set(full["topic_usage"]) == {"a", "b.two"}
        for name in ("a", "b.two"):
            assert full["topic_usage"][name] == c.get(f"/admin/topics/{name}").json()["usage"]
        assert full["topic_usage"]["a"]["records"] == 3
        assert full["used_bytes"] == sum(u["bytes"] for u in full["topic_usage"].values())

        bad = c.get("/admin/node", params={"topics": "maybe"})
        assert bad.status_code in (400, 422) and "topics" in bad.text
        denied = httpx.get(f"{node.url}/admin/node", params={"topics": "true"})
        assert denied.status_code == 401

    with PlateauClient(node.url, token=node.token) as client:
        info = client.node_info(topics=True)
        assert info.topic_usage is not None and info.topic_usage["a"].records == 3
        assert client.node_info().topic_usage is None
