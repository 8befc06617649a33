"""/docs and /redoc must work where nodes run, and that is often a network with no CDN.

FastAPI's stock pages load Swagger UI and ReDoc from a CDN, so offline /docs
was a blank page; the node now serves fastapi-offline's copies itself. The
page's HTML alone cannot show that it renders (a bundle may still fetch a
stylesheet, a font or an image from elsewhere), so a real headless Chromium
loads each page with every host name but 127.0.0.1 unresolvable, and the test
reads the rendered DOM, the screenshot and Chromium's own log of the requests
the page made.

ReDoc's bundle still asks cdn.redoc.ly for its "API docs by Redocly" logo:
offline that one decorative image is missing and the rest renders, which is
why /redoc is kept and that single request is the only one allowed off the node.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from testkit.nodeproc import NodeProcess

IN_CI = os.environ.get("CI") == "true"
PAGES = ["/docs", "/redoc"]
# Requests a page may make off the node (see the module docstring).
OFF_NODE_ALLOWED = {"/redoc": {"https://cdn.redoc.ly/redoc/logo-mini.svg"}}
# What a rendered page has that a page whose scripts failed has not.
RENDERED_MARKS = {
    "/docs": ['class="swagger-ui"', 'class="information-container'],
    "/redoc": ["redoc-wrap", "api-content", "menu-content"],
}
# Chromium without its own calls home (updates, sync, metrics, first-run).
CHROMIUM_QUIET = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--metrics-recording-only",
    # Whatever still tries to leave loopback fails to resolve instead of leaving.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    """Both tokens set: the docs must stay open even where reads need a secret."""
    proc = NodeProcess(tmp_path / "data", token="write-token", read_token="read-token").start()
    yield proc
    proc.stop()


class _Assets(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        wanted = {"script": "src", "link": "href", "img": "src"}.get(tag)
        for name, value in attrs:
            if name == wanted and value:
                self.refs.append((tag, value))


def _off_node_urls(text: str, origin: str) -> list[str]:
    return [u for u in re.findall(r"https?://[^\s\"'<>)]+", text) if not u.startswith(origin)]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", PAGES)
def test_docs_page_loads_every_asset_from_the_node(node: NodeProcess, page: str) -> None:
    r = httpx.get(f"{node.url}{page}")  # no token
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert _off_node_urls(r.text, node.url) == []
    parser = _Assets()
    parser.feed(r.text)
    tags = {tag for tag, _ in parser.refs}
    assert "script" in tags, r.text
    for tag, ref in parser.refs:
        url = urljoin(f"{node.url}{page}", ref)
        assert urlsplit(url).netloc == urlsplit(node.url).netloc, (tag, ref)
        asset = httpx.get(url)  # no token
        assert asset.status_code == 200, (url, asset.status_code)
        assert len(asset.content) >= 1024, (url, len(asset.content))
        kind = asset.headers["content-type"]
        if tag == "script":
            assert "javascript" in kind, (url, kind)
        if url.endswith(".css"):
            assert kind.startswith("text/css"), (url, kind)
    spec = httpx.get(f"{node.url}/openapi.json")
    assert spec.status_code == 200
    assert spec.json()["info"]["title"] == "plateau node"


def _chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        why = "chromium is not installed (apt-get install -y chromium; tools/run-tests does)"
        if IN_CI:
            pytest.fail(f"CI=true never skips: {why}")
        pytest.skip(why)
    return path


@pytest.mark.timeout(120)
@pytest.mark.parametrize("page", PAGES)
def test_docs_page_renders_offline_in_a_real_browser(
    node: NodeProcess, tmp_path: Path, page: str
) -> None:
    chromium = _chromium()
    shot = tmp_path / "page.png"
    netlog = tmp_path / "netlog.json"
    out = subprocess.run(
        [
            chromium,
            *CHROMIUM_QUIET,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--log-net-log={netlog}",
            "--window-size=1280,1024",
            "--virtual-time-budget=5000",
            f"--screenshot={shot}",
            "--dump-dom",
            f"{node.url}{page}",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-4000:]
    dom = out.stdout
    for mark in RENDERED_MARKS[page]:
        assert mark in dom, (mark, out.stderr[-2000:])
    assert "Failed to load API definition" not in dom
    paths = set(httpx.get(f"{node.url}/openapi.json").json()["paths"])
    if page == "/docs":
        assert re.search(r'<h\d class="title"[^>]*>plateau node', dom)
        assert set(re.findall(r'data-path="([^"]*)"', dom)) == paths
    else:
        assert re.search(r"<h1[^>]*>plateau node", dom)
        assert [p for p in paths if p not in dom] == []

    requested = _page_requests(netlog, node.url)
    assert any(u.startswith(f"{node.url}/openapi.json") for u in requested), requested
    assert any(u.endswith(".js") for u in requested), requested
    off_node = {u for u in requested if not u.startswith(f"{node.url}/")}
    assert off_node <= OFF_NODE_ALLOWED.get(page, set()), off_node

    png = shot.read_bytes()
    assert len(png) > 20_000, len(png)
    colours = _png_colour_counts(png)
    assert len(colours) > 16, len(colours)
    assert max(colours.values()) < 0.95 * sum(colours.values()), "mostly one colour"


def _page_requests(netlog: Path, origin: str) -> list[str]:
    """URLs the page itself asked for; Chromium's own calls have no page initiator."""
    text = netlog.read_text()
    try:
        log: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError:  # a log cut short lacks its closing brackets
        log = json.loads(text.rstrip().rstrip(",") + "]}")
    start = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    return [
        e["params"]["url"]
        for e in log["events"]
        if e["type"] == start and e.get("params", {}).get("initiator") == origin
    ]


def _png_colour_counts(data: bytes) -> dict[bytes, int]:
    """Pixel counts by colour of an 8-bit RGB(A) PNG: Pillow is not a dependency."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, []
    width = height = bpp = 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        pos += 12 + n
        if kind == b"IHDR":
            width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour_type in (2, 6), body
            bpp = 3 if colour_type == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    prev = bytearray(stride)
    counts: dict[bytes, int] = {}
    for y in range(height):
        start = y * (stride + 1)
        kind_, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride if kind_ else 0):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind_ == 1:
                line[i] = (line[i] + a) & 255
            elif kind_ == 2:
                line[i] = (line[i] + b) & 255
            elif kind_ == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 255
        for x in range(0, stride, bpp):
            px = bytes(line[x : x + bpp])
            counts[px] = counts.get(px, 0) + 1
        prev = line
    return counts
