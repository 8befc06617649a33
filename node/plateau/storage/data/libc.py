"""C library calls Python's standard library does not offer, through ``ctypes``.

Why ``ctypes``: it releases the GIL for the call, so a call that takes time in
the kernel (populating pages, starting writeback) does not stop the node's other
threads. Each is looked up once; None where this libc lacks it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from typing import Any

_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME, use_errno=True) if _LIBC_NAME is not None else None


def libc_function(name: str, argtypes: list[Any]) -> Callable[..., int] | None:
    """``name`` from the C library, taking ``argtypes`` and returning an int; or None."""
    fn = getattr(_LIBC, name, None) if _LIBC is not None else None
    if fn is None:
        return None
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn  # type: ignore[no-any-return]
