"""The sync and async clients offer the same operations with the same parameters.

Both bind each operation of ``plateau.client.operations`` once; these checks
fail if an operation is added to one client only, or if a method's
parameters drift from its operation's.
"""

from __future__ import annotations

import inspect
from typing import Any

from plateau.client import AsyncPlateauClient, PlateauClient
from plateau.client import operations as ops

LIFECYCLE = {"close", "aclose"}  # each client's own way to close, the only difference


def _api(cls: type) -> dict[str, Any]:
    return {
        name: value
        for name, value in vars(cls).items()
        if not name.startswith("_") and callable(value) and name not in LIFECYCLE
    }


def test_both_clients_have_the_same_operations_and_signatures() -> None:
    sync, aio = _api(PlateauClient), _api(AsyncPlateauClient)
    assert sync.keys() == aio.keys()
    assert sync.keys() >= {"append", "read", "read_all", "iterate", "put_topic", "node_info"}
    for name in sync:
        assert inspect.signature(sync[name]) == inspect.signature(aio[name]), name
        assert sync[name].__doc__ == aio[name].__doc__, name


def test_methods_show_their_operations_parameters() -> None:
    """What ``help()`` and ``inspect`` see: the operation's parameters after the state."""
    for name, method in _api(PlateauClient).items():
        operation = getattr(ops, name)
        wanted = list(inspect.signature(operation).parameters.values())[1:]
        assert list(inspect.signature(method).parameters.values())[1:] == wanted, name
        assert method.__doc__ and method.__doc__ == operation.__doc__, name
    bound = inspect.signature(PlateauClient("http://127.0.0.1:1").read)
    assert list(bound.parameters)[:3] == ["topic", "partition", "start"]


def test_async_methods_are_coroutines_and_streams_are_not() -> None:
    for name, method in _api(AsyncPlateauClient).items():
        assert inspect.iscoroutinefunction(method) == (name not in {"read_all", "iterate"}), name
