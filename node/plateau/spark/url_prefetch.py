"""Url mode (``format("plateau")``): a task fetches its next page while Spark takes this one.

Why: a task's pages were sequential, so the node built page k+1 only after
Spark had taken page k, and the node's time, the network's and Spark's
added up per page. With the fetch on a thread they overlap: on one 2-core
machine holding the node and Spark both, where little is idle to overlap,
url mode read 1-8% faster (interleaved pairs, 9.5M rows, all columns); across
a network the transfer time is hidden as well.

Synchronization: one bounded queue between the fetching thread and the
task's thread; no lock is held while fetching. The fetching thread owns the
producer (the HTTP client inside it) from start to close. When the consumer
stops early (a ``limit``, a failed task), it sets ``stop`` and returns at
once; the thread notices within ``POLL_SECONDS`` of its current fetch ending
and closes the producer itself.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")

POLL_SECONDS = 0.1
_END = object()


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def read_ahead(produce: Generator[T, None, None], depth: int = 1) -> Generator[T, None, None]:
    """``produce``'s items in order, computed on a thread up to ``depth`` items ahead."""
    slots: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item: object) -> bool:
        while not stop.is_set():
            try:
                slots.put(item, timeout=POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in produce:
                if not offer(item):
                    return
            offer(_END)
        except BaseException as e:  # handed to the consumer, raised where it reads
            offer(_Failed(e))
        finally:
            produce.close()

    thread = threading.Thread(target=run, name="plateau-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = slots.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        stop.set()
