"""No event loop: a thread per connection on blocking sockets, each request's body read
with ``recv_into`` straight into a page-aligned buffer (the GIL released), written with
O_DIRECT and fdatasynced by the same thread, then answered. Only what the benchmark's
driver sends is understood (Content-Length bodies, keep-alive); anything else closes
the connection. ``python floor_threaded.py ROOT PORT``.
"""

from __future__ import annotations

import mmap
import socket
import sys
import threading
from pathlib import Path

from floor_files import Files, aligned

files = Files(Path(sys.argv[1]))
MAX_BODY = 64 << 20
REPLY = b'{"ok":true}'
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(REPLY),
    REPLY,
)
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"


def serve(conn: socket.socket) -> None:
    buf = mmap.mmap(-1, MAX_BODY)
    view = memoryview(buf)
    pending = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in pending:
                data = conn.recv(65536)
                if not data:
                    return
                pending += data
            head, _, pending = pending.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            method, path, _ = lines[0].split(b" ", 2)
            length = 0
            for line in lines[1:]:
                key, _, value = line.partition(b":")
                if key.strip().lower() == b"content-length":
                    length = int(value)
            if length > MAX_BODY:
                return
            got = min(len(pending), length)
            view[:got] = pending[:got]
            pending = pending[got:]
            while got < length:
                n = conn.recv_into(view[got:length])
                if not n:
                    return
                got += n
            if method != b"POST":
                conn.sendall(NOT_FOUND)
                continue
            files.get(path.decode()).append(view[: aligned(length)])
            conn.sendall(OK)


def main() -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(sys.argv[2])))
    listener.listen(64)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
