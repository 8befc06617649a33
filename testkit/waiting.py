"""Waiting in tests for something another thread or process makes true.

One helper, so every test's wait has a deadline, says what it waited for and
shows the last value it saw; tests pick the interval that suits what they poll
(an attribute every millisecond, a kube-apiserver every few tenths of a second).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], T], what: str, timeout: float = 60.0, interval: float = 0.05
) -> T:
    """Call ``check`` until it returns something truthy, and return that; fail after
    ``timeout`` seconds naming ``what`` and the last value seen."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")
