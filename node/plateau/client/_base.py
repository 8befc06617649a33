"""What the sync and async clients share: settings, headers, request building, and how an
operation of ``plateau.client.operations`` becomes a method."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import httpx

from plateau.client import operations as ops
from plateau.client.errors import ConnectionFailed, PlateauClientError
from plateau.client.wire import RetryPolicy

DEFAULT_URL = "http://127.0.0.1:3030"


def as_method(method: Callable[..., Any], operation: Callable[..., Any]) -> None:
    """Give ``method``, which drives ``operation`` with the client's state, the operation's
    name, docstring and parameters, so that ``help()`` and ``inspect`` show them; the types
    come from the ParamSpec of the function that made ``method``."""
    method.__name__ = method.__qualname__ = operation.__name__
    method.__doc__ = operation.__doc__
    parameters = list(inspect.signature(operation).parameters.values())[1:]  # without state
    self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    method.__signature__ = inspect.Signature([self, *parameters])  # type: ignore[attr-defined]


TransportT = TypeVar("TransportT", httpx.BaseTransport, httpx.AsyncBaseTransport)


class ClientBase(Generic[TransportT]):
    """Connection settings; ``self._state`` is what every operation takes first. Each client
    opens its connection pool on its kind of transport (``_open``)."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        transport: TransportT | None = None,
    ) -> None:
        if "://" not in url:
            url = f"http://{url}"
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"user-agent": "plateau-client"}
        if token:
            self._headers["authorization"] = f"Bearer {token}"
        self._state = ops.ClientState(retry=retry or RetryPolicy())
        self._open(transport)

    def _open(self, transport: TransportT | None) -> None:
        raise NotImplementedError

    def _connection_failed(self, exc: httpx.HTTPError) -> PlateauClientError:
        """Say what went wrong in the user's terms, and whether the request went out."""
        detail = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.UnsupportedProtocol):
            return PlateauClientError(None, f"bad node URL {self.url!r}: {detail}")
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
            return ConnectionFailed(f"cannot reach the node at {self.url}: {detail}", False)
        if isinstance(exc, httpx.TimeoutException):
            return ConnectionFailed(
                f"no reply from the node at {self.url} within {self.timeout:g}s"
            )
        return ConnectionFailed(f"connection to the node at {self.url} failed: {detail}")

    @staticmethod
    def _request_args(call: ops.Call) -> dict[str, Any]:
        return {
            "params": list(call.params),
            "headers": dict(call.headers),
            "content": call.content,
            "json": call.json,
        }
