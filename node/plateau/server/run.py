"""``plateau node``: open the engine, serve HTTP, close the engine on SIGTERM/SIGINT.

One uvicorn worker: the engine owns the data directory and its partition
writers, so a second process must never open it. httptools and uvloop keep
per-request overhead low; the access log is off unless the log level is
``debug`` (at hundreds of appends per second it costs noticeable CPU).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from types import FrameType

import uvicorn

from plateau.protocol.errors import PlateauError
from plateau.server.app import create_app
from plateau.server.append_front import AppendFront
from plateau.server.config import NodeConfig
from plateau.server.data_plane import DataPlane
from plateau.server.front_wire import adopter
from plateau.server.state import NodeState
from plateau.server.tuning import (
    arrow_pool_in_force,
    count_gc_pauses,
    freeze_startup_heap,
    read_pool_purge_delay_in_force,
    tune_interpreter,
    tune_malloc,
    warm_lazy_imports,
)
from plateau.storage.engine import Engine

log = logging.getLogger("plateau.server")

GRACEFUL_SHUTDOWN_SECONDS = 5
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def parse_bind(bind: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (all interfaces)."""
    text = bind.strip()
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep or not host:
            raise ValueError(f"bad bind address {bind!r}: use [IPv6]:PORT, e.g. [::1]:3030")
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError(f"bad bind address {bind!r}: use HOST:PORT, e.g. 127.0.0.1:3030")
        if ":" in host:
            raise ValueError(f"bad bind address {bind!r}: put IPv6 hosts in brackets, [::1]:3030")
        host = host or "0.0.0.0"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad port in bind address {bind!r}")
    return host, int(port)


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before the engine opens, so a taken port fails fast and recovery is not wasted."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


class NodeServer(uvicorn.Server):
    """uvicorn's server, with three changes for a node.

    Once started, and before the append front accepts, the heap made while
    starting is frozen out of the garbage collector (``server.gc_freeze``).
    A stop signal marks the node not ready at once, before requests drain.
    After a graceful stop the process exits 0 instead of re-raising the signal
    (uvicorn's default, meant for embedding), so supervisors and tests see a
    clean exit when the engine closed cleanly.
    """

    def __init__(
        self, config: uvicorn.Config, state: NodeState, public: socket.socket | None = None
    ) -> None:
        super().__init__(config)
        self.node_state = state
        self._public = public  # with threaded appends: the node's port, served by the front
        self.front: AppendFront | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit:
            return
        if self.node_state.settings.server.gc_freeze:
            # the app and engine are up, no request has come yet: all of it is for keeps
            log.info("%d startup objects kept out of the garbage collector", freeze_startup_heap())
        if self._public is None:
            return
        config, loop = self.config, asyncio.get_running_loop()

        def protocol() -> asyncio.Protocol:  # what uvicorn's own server makes for a connection
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )

        self.front = AppendFront(
            self.node_state, self._public, adopter(loop, protocol), config.timeout_keep_alive
        )
        self.front.start(config.backlog)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # appends under way on the front's threads finish before the engine closes
        if self.front is not None:
            await asyncio.to_thread(self.front.close)
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.node_state.ready = False
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


def run_node(settings: NodeConfig) -> None:
    """Serve until SIGTERM/SIGINT; exits with status 2 and one line on stderr if it cannot start."""
    tune_malloc()
    switch_ms = tune_interpreter(settings.server.gil_switch_interval_ms)
    level = settings.server.log_level
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    pool = arrow_pool_in_force(settings.server.arrow_memory_pool)
    warm_lazy_imports()
    count_gc_pauses()
    sock: socket.socket | None = None
    try:
        sock = bind_socket(*parse_bind(settings.server.bind))
        engine = Engine(settings.storage)
    except (ValueError, PlateauError, OSError) as exc:
        if sock is not None:
            sock.close()
        print(f"error: cannot start node on {settings.server.bind}: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    app = create_app(settings, engine)
    state: NodeState = app.state.plateau
    config = uvicorn.Config(
        DataPlane(app, state),
        http="httptools",
        loop="uvloop",
        lifespan="on",
        workers=1,
        access_log=level == "debug",
        log_level=level,
        log_config=None,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    log.info(
        "plateau node serving %s on http://%s (GIL switch interval %g ms, Arrow memory pool %s, "
        "read pool purge delay %s)",
        settings.storage.data_dir,
        settings.server.bind,
        switch_ms,
        pool,
        read_pool_purge_delay_in_force(),
    )
    public: socket.socket | None = None
    if settings.server.threaded_appends:
        # the front owns the node's port; uvicorn gets only what the front hands it, and
        # listens on a socket nothing else can reach (an abstract Unix socket of this process)
        public, sock = sock, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(f"\0plateau-node-{os.getpid()}-{id(sock)}")
    try:
        NodeServer(config, state, public).run(sockets=[sock])
    finally:
        if not state.engine_closed:
            state.engine_closed = True
            engine.close()
