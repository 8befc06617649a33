"""Topic iteration one page ahead: the next page is prepared while this one is sent and used.

Why: a reader iterating a topic sends the cursor from one reply to get the
next, so reading the segments and encoding the reply (about half of the
node's time per page) sits between every two requests, and with one reader
the node's second core stays idle. After a page that has more to read, the
pages for its ``next`` cursor and the one after it are prepared on
one background thread; when those requests come, the reply is there (or is
awaited, never computed twice).

What a reader may notice: a page prepared ahead shows the topic as it was up
to ``MAX_AGE_SECONDS`` before the request. That is only ever a full page
(``RecordLimited``, ``ByteLimited``, ``SchemaChange``); which rows come from
which partition may differ from a page computed later, but the cursor stays
exact, so nothing is skipped or read twice. Pages ending the iteration
(``All``) are never prepared ahead, so a reader at the tail always sees the
newest rows. Deleting or changing a topic forgets its pages.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import Response

from plateau.protocol import (
    ARCHIVED_RECORDS_HEADER,
    ITERATION_STATUS_HEADER,
    JSON,
    JSON_ENVELOPE,
    JSON_RECORDS,
)
from plateau.protocol.focus import DataFocus
from plateau.protocol.values import Order, RecordStatus
from plateau.server.codecs import encode_arrow
from plateau.server.jsonout import dumps, table_rows
from plateau.server.metrics import PAGES_AHEAD
from plateau.storage.engine import Engine
from plateau.storage.types import TimeRange, TopicRead

log = logging.getLogger(__name__)
_PREPARED = PAGES_AHEAD.labels(outcome="prepared")
_USED = PAGES_AHEAD.labels(outcome="used")
_EXPIRED = PAGES_AHEAD.labels(outcome="expired")

MAX_AGE_SECONDS = 2.0
MAX_PAGES = 4
"""Pages kept at once (each at most ``server.max_page_bytes``); the oldest goes first."""


@dataclass(frozen=True)
class PageRequest:
    """Everything a topic page depends on; equal requests get equal pages."""

    topic: str
    cursor: str  # the cursor as canonical JSON
    limit: int
    order: Order
    times: TimeRange | None
    selected: tuple[str, ...] | None
    max_bytes: int
    media: str
    focus: DataFocus | None = None

    @classmethod
    def of(
        cls,
        topic: str,
        cursor: dict[str, int],
        limit: int,
        order: Order,
        times: TimeRange | None,
        selected: list[str] | None,
        max_bytes: int,
        media: str,
        focus: DataFocus | None = None,
    ) -> PageRequest:
        return cls(
            topic,
            json.dumps(cursor, sort_keys=True),
            limit,
            order,
            times,
            tuple(selected) if selected is not None else None,
            max_bytes,
            media,
            focus,
        )

    def after(self, next_cursor: dict[str, int]) -> PageRequest:
        return PageRequest(
            self.topic,
            json.dumps(next_cursor, sort_keys=True),
            self.limit,
            self.order,
            self.times,
            self.selected,
            self.max_bytes,
            self.media,
            self.focus,
        )


@dataclass
class Page:
    body: bytes | memoryview
    headers: dict[str, str]
    media: str
    status: RecordStatus
    next: dict[str, int]
    request: PageRequest
    made: float = field(default_factory=time.monotonic)

    def response(self) -> Response:
        return Response(self.body, headers=self.headers, media_type=self.media)


class PageAhead:
    """Pages prepared ahead by request; used from the event loop and the worker thread."""

    def __init__(self, engine: Engine, enabled: bool = True) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._pages: OrderedDict[PageRequest, Future[Page]] = OrderedDict()
        self._worker = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="page-ahead") if enabled else None
        )

    async def take(self, request: PageRequest) -> Page | None:
        """The page prepared for ``request`` if it is still fresh, else None (compute it)."""
        with self._lock:
            future = self._pages.pop(request, None)
        if future is None:
            return None
        try:
            # a page that is ready is taken as it is: awaiting a finished future through
            # wrap_future still costs a wakeup of the event loop (a self-pipe write) per page
            page = future.result() if future.done() else await asyncio.wrap_future(future)
        except Exception:  # the request computes it again and reports its own error
            _EXPIRED.inc()
            return None
        if time.monotonic() - page.made > MAX_AGE_SECONDS:
            _EXPIRED.inc()
            return None
        _USED.inc()
        return page

    def prepare_next(self, request: PageRequest, page: Page) -> None:
        """After ``page`` was served for ``request``, keep the next two pages of its cursor ready.

        The next page is queued now; the one after it as soon as the next is
        ready (its cursor is known only then), so the worker never waits for
        the reader to ask.
        """
        if self._worker is None or page.status == RecordStatus.ALL:
            return
        future = self._queue(request.after(page.next))
        if future is not None:
            # outside the lock: a callback on a finished future runs at once, in this thread
            future.add_done_callback(self._queue_after)

    def _queue_after(self, done: Future[Page]) -> None:
        if done.cancelled() or done.exception() is not None:
            return
        page = done.result()
        if page.status != RecordStatus.ALL:
            self._queue(page.request.after(page.next))

    def _queue(self, request: PageRequest) -> Future[Page] | None:
        """The future of ``request``'s page, queued now unless it already is."""
        assert self._worker is not None
        with self._lock:
            future = self._pages.get(request)
            if future is not None:
                return future
            try:
                future = self._worker.submit(topic_page, self._engine, request)
            except RuntimeError:  # shut down: the node is stopping
                return None
            self._pages[request] = future
            while len(self._pages) > MAX_PAGES:
                self._pages.popitem(last=False)
                _EXPIRED.inc()
        future.add_done_callback(_count_prepared)
        return future

    def forget(self, topic: str) -> None:
        """Drop the pages of ``topic`` (deleted or reconfigured)."""
        with self._lock:
            for request in [r for r in self._pages if r.topic == topic]:
                del self._pages[request]
                _EXPIRED.inc()

    def close(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            self._pages.clear()


def _count_prepared(future: Future[Page]) -> None:
    if not future.cancelled() and future.exception() is None:
        _PREPARED.inc()


def topic_page(engine: Engine, request: PageRequest) -> Page:
    """One page of topic iteration, encoded (also run ahead by ``PageAhead``)."""
    result: TopicRead = engine.iterate_topic(
        request.topic,
        json.loads(request.cursor),
        request.limit,
        request.order,
        request.times,
        list(request.selected) if request.selected is not None else None,
        request.max_bytes,
        request.focus,
    )
    status = json.dumps({"status": str(result.status), "next": result.next})
    headers = {ITERATION_STATUS_HEADER: status}
    if result.archived:  # rows read back from the object-storage archive
        headers[ARCHIVED_RECORDS_HEADER] = str(result.archived)
    body: bytes | memoryview
    media = request.media
    if media == JSON:  # plateau's: the records alone, status and cursor in the header
        body, media = dumps(table_rows(result.table)), JSON_RECORDS
    elif media == JSON_ENVELOPE:
        rows = table_rows(result.table)
        envelope: dict[str, Any] = {"records": rows, "status": str(result.status)}
        envelope["next"] = result.next
        if result.archived:
            envelope["archived"] = result.archived
        body = dumps(envelope)
    else:
        body = encode_arrow(result.table, media, {"status": status})
    return Page(body, headers, media, result.status, result.next, request)
