"""What the routes share: the engine, the settings and whether the node takes traffic."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from starlette.requests import Request

from plateau.server.body_pool import BodyPool
from plateau.server.config import NodeConfig
from plateau.server.inflight import BodyBudget
from plateau.server.iteration_prefetch import PageAhead
from plateau.storage.catalog.memory import export_memory_metrics
from plateau.storage.engine import Engine

APPEND_THREADS = 64
BODY_POOL_MAX_IDLE_BYTES = 256 << 20  # at most; a 16th of a smaller budget (server/body_pool.py)


@dataclass
class NodeState:
    settings: NodeConfig
    engine: Engine
    ready: bool = False
    engine_closed: bool = False
    write_tokens: list[bytes] = field(default_factory=list)
    read_tokens: list[bytes] = field(default_factory=list)
    bodies: BodyBudget = field(init=False)
    pages: PageAhead = field(init=False)
    appenders: ThreadPoolExecutor = field(init=False)
    body_pool: BodyPool = field(init=False)

    def __post_init__(self) -> None:
        memory = self.engine.memory
        server = self.settings.server
        self.bodies = BodyBudget(
            memory.reserve_bodies(server.max_inflight_bytes), memory, server.inflight_wait_seconds
        )
        export_memory_metrics(memory)
        self.pages = PageAhead(self.engine, self.settings.server.iterate_ahead)
        # appends run here, not in anyio's thread pool: a plain executor hands work over
        # in half the time (0.65 -> 0.31 ms an append, bench/ingest.py's queue stage);
        # bounded by the body budget, not by this count
        self.appenders = ThreadPoolExecutor(APPEND_THREADS, thread_name_prefix="append")
        # regions for large bodies: the idle ones within their own part of the budget (taken
        # from the open segments' share), lent and idle ones within that and the parts of the
        # bodies and open segments, which count the bodies the lent ones hold
        idle = memory.reserve_body_pool(BODY_POOL_MAX_IDLE_BYTES)
        self.body_pool = BodyPool(memory.segments_limit + memory.bodies_limit + idle, idle)
        memory.body_pool_used = lambda: self.body_pool.idle_bytes
        auth = self.settings.auth
        token = auth.token.get_secret_value().encode() if auth.token else None
        read = auth.read_token.get_secret_value().encode() if auth.read_token else None
        self.write_tokens = [token] if token else []
        self.read_tokens = [t for t in (read, token) if t] if read else []


def node_state(request: Request) -> NodeState:
    state: NodeState = request.app.state.plateau
    return state
