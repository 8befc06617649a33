"""The node's stack with nothing of the node: uvicorn (httptools, uvloop, as the node runs
it), a bare ASGI app that collects the body, and one hop to a thread for the O_DIRECT
write and fdatasync. ``python floor_uvicorn.py ROOT PORT``.
"""

from __future__ import annotations

import asyncio
import mmap
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import uvicorn

from floor_files import Files, aligned

files = Files(Path(sys.argv[1]))
pool = ThreadPoolExecutor(8)
REPLY = b'{"ok":true}'


def write(path: str, chunks: list[bytes]) -> None:
    n = sum(len(c) for c in chunks)
    buf = mmap.mmap(-1, max(aligned(n), 4096))
    pos = 0
    for c in chunks:
        buf[pos : pos + len(c)] = c
        pos += len(c)
    with memoryview(buf) as view:
        files.get(path).append(view[: aligned(n)])
    buf.close()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    chunks: list[bytes] = []
    more = True
    while more:
        message = await receive()
        if message.get("body"):
            chunks.append(message["body"])
        more = message.get("more_body", False)
    status, body = 404, b""
    if scope["method"] == "POST":
        await asyncio.get_running_loop().run_in_executor(pool, write, scope["path"], chunks)
        status, body = 200, REPLY
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[2]),
        http="httptools",
        loop="uvloop",
        log_level="warning",
    )
