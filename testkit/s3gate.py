"""A TCP proxy in front of an S3 server that holds requests from a chosen one on.

A fault injector for the archive's tests, never a mock: the S3 server behind it is
real (``testkit.s3server``). It lets a test stop a client (the node's uploader) at a
known point of an upload, e.g. right after a multipart upload was completed and
before the next request, which no signal to either process can hit reliably.
Request lines are read from the bytes the client sends (``METHOD /path HTTP/1.1``;
percent-encoded as sent, so a key's ``=`` shows as ``%3D``).
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Callable

REQUEST = re.compile(rb"(GET|PUT|POST|HEAD|DELETE) (/\S*) HTTP/1\.1\r\n")


class Gate:
    """A TCP proxy to the S3 server that holds every request from the first one for which
    ``hold_when(line, seen)`` is true (``seen``: request lines so far, this one last)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.seen: list[str] = []
        self.hold_when: Callable[[str, list[str]], bool] | None = None
        # requests for which this is true have their connection cut before they reach the
        # server: a network fault on one kind of request (e.g. a multipart part)
        self.cut_when: Callable[[str], bool] | None = None
        self.held = threading.Event()
        self._open = threading.Event()
        self._lock = threading.Lock()  # a leaf over seen and hold_when; no I/O under it
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            upstream = socket.create_connection(("127.0.0.1", self.port))
            threading.Thread(target=self._up, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client), daemon=True).start()

    def _up(self, src: socket.socket, dst: socket.socket) -> None:
        tail = b""
        try:
            while data := src.recv(1 << 16):
                for m in REQUEST.finditer(tail + data):
                    if m.end() <= len(tail):
                        continue
                    line = f"{m.group(1).decode()} {m.group(2).decode(errors='replace')}"
                    with self._lock:
                        self.seen.append(line)
                        hold, cut = self.hold_when, self.cut_when
                        if hold and not self.held.is_set() and hold(line, self.seen):
                            self.held.set()
                    if cut is not None and cut(line):
                        return  # finally: both sides closed, the request never sent
                tail = (tail + data)[-300:]
                if self.held.is_set():
                    self._open.wait()
                    return  # released: this connection's node is dead, drop what it sent
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(src, dst)

    @staticmethod
    def _down(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(src, dst)

    def close(self) -> None:
        """Stop accepting connections (those open go on until either side closes)."""
        self._listener.close()

    def release(self) -> None:
        """Let go: held connections are closed, later ones pass freely."""
        with self._lock:
            self.hold_when = None
        self._open.set()
        self.held.clear()


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()
