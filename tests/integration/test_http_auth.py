"""Bearer tokens: writes and admin need the write token; reads need the read token if set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from plateau.protocol import ARROW_FILE
from testkit.nodeproc import NodeProcess


def body() -> bytes:
    table = pa.table({"v": [1, 2]})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def do_append(url: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        f"{url}/topic/t/partition/0",
        content=body(),
        headers={**headers, "content-type": ARROW_FILE},
    )


def reads(url: str, headers: dict[str, str]) -> list[httpx.Response]:
    return [
        httpx.get(f"{url}/topics", headers=headers),
        httpx.get(f"{url}/topic/t", headers=headers),
        httpx.get(f"{url}/topic/t/partition/0/records", params={"start": 0}, headers=headers),
        httpx.post(f"{url}/topic/t/records", content=b"{}", headers=headers),
    ]


def open_routes(url: str) -> list[httpx.Response]:
    return [httpx.get(f"{url}{path}") for path in ("/ok", "/healthz", "/readyz", "/metrics")] + [
        httpx.get(f"{url}/docs"),
        httpx.get(f"{url}/openapi.json"),
    ]


def test_write_token_guards_writes_and_admin_only(node: NodeProcess) -> None:
    for headers in ({}, bearer("wrong"), {"Authorization": "test-token"}):
        r = do_append(node.url, headers)
        assert r.status_code == 401, r.text
        assert r.json()["code"] == 401
        assert r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(f"{node.url}/admin/node").status_code == 401

    assert do_append(node.url, bearer("test-token")).status_code == 200
    assert do_append(node.url, {"Authorization": "bearer test-token"}).status_code == 200
    assert httpx.get(f"{node.url}/admin/node", headers=bearer("test-token")).status_code == 200

    # Reads are open when only a write token is configured (plateau's readers send none).
    for r in reads(node.url, {}):
        assert r.status_code == 200, r.text
    for r in open_routes(node.url):
        assert r.status_code == 200, r.url

    text = httpx.get(f"{node.url}/metrics").text
    assert 'plateau_rejected_appends_total{reason="unauthorized"} 3.0' in text


@pytest.fixture
def read_token_node(tmp_path: Path) -> Iterator[NodeProcess]:
    proc = NodeProcess(tmp_path / "data", token="w-token", read_token="r-token").start()
    yield proc
    proc.stop()


def test_read_token_separation(read_token_node: NodeProcess) -> None:
    url = read_token_node.url
    assert do_append(url, bearer("w-token")).status_code == 200
    # The read token cannot write or administer.
    assert do_append(url, bearer("r-token")).status_code == 401
    assert httpx.get(f"{url}/admin/topics/t", headers=bearer("r-token")).status_code == 401
    # Reads need the read token or the write token.
    for headers in ({}, bearer("wrong")):
        for r in reads(url, headers):
            assert r.status_code == 401, r.url
            assert r.json() == {"message": r.json()["message"], "code": 401}
    for token in ("r-token", "w-token"):
        for r in reads(url, bearer(token)):
            assert r.status_code == 200, (r.url, r.text)
    for r in open_routes(url):
        assert r.status_code == 200, r.url


def test_no_token_means_everything_open(open_node: NodeProcess) -> None:
    assert do_append(open_node.url, {}).status_code == 200
    assert httpx.get(f"{open_node.url}/admin/node").status_code == 200
    for r in reads(open_node.url, {}):
        assert r.status_code == 200
