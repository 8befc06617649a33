"""Python client for a plateau node's HTTP API, sync (``PlateauClient``) and async
(``AsyncPlateauClient``).

    from plateau.client import PlateauClient

    with PlateauClient("http://127.0.0.1:3030", token=...) as client:
        span = client.append("events", "0", table)
        for page in client.iterate("events"):
            handle(page.table)
"""

from plateau.client.aio import AsyncPlateauClient
from plateau.client.errors import (
    AuthError,
    BadRequestError,
    BusyError,
    ConflictError,
    ConnectionFailed,
    NotFoundError,
    PartialAppendError,
    PayloadTooLargeError,
    PlateauClientError,
    RecordTooLargeError,
    UnavailableError,
)
from plateau.client.sync import PlateauClient
from plateau.client.topic_settings import TopicSettings
from plateau.client.wire import PartitionPage, RetryPolicy, TopicInfo, TopicPage
from plateau.protocol.focus import DataFocus

__all__ = [
    "AsyncPlateauClient",
    "AuthError",
    "BadRequestError",
    "BusyError",
    "ConflictError",
    "ConnectionFailed",
    "DataFocus",
    "NotFoundError",
    "PartialAppendError",
    "PartitionPage",
    "PayloadTooLargeError",
    "PlateauClient",
    "PlateauClientError",
    "RecordTooLargeError",
    "RetryPolicy",
    "TopicInfo",
    "TopicPage",
    "TopicSettings",
    "UnavailableError",
]
