"""Every read path's options (``format("plateau")``, ``read_topic``), checked once, up front.

Spark hands a data source its options as strings; every mistake is reported
here, naming the option, before a task starts (a bad option found inside a
task surfaces as a Python traceback wrapped in a Java one). Names follow
Spark's Kafka source where the meaning is the same (``startingOffsets``,
``failOnDataLoss``, ``maxRecordsPerTrigger``); Spark passes them
case-insensitively, so they are matched lowercased.

In url mode the token defaults to the environment variable ``PLATEAU_TOKEN``
(what ``plateau spark-conf --mode url`` puts in the pods from the node's
Secret), read where the read is planned, on the driver: the token then travels
with the plan to the tasks, as a ``token`` option does.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from plateau.protocol import MAX_PAGE_SIZE
from plateau.protocol.archive import ArchiveUrl
from plateau.protocol.errors import InvalidInput
from plateau.protocol.names import NAME_PATTERN

EARLIEST = -2  # Kafka's: a partition's first index still stored
LATEST = -1  # Kafka's: a partition's end (the next index to be appended)
DEFAULT_URL_SPLIT_ROWS = 4_000_000
DEFAULT_BYTES_PER_TASK = 128 * 1024 * 1024  # as Spark's spark.sql.files.maxPartitionBytes
TOKEN_ENV = "PLATEAU_TOKEN"  # url mode's token when no option 'token' is given (as the CLI's)

OffsetSpec = Literal["earliest", "latest"] | dict[str, int]


class OptionError(ValueError):
    """A bad option; the message names it."""


@dataclass(frozen=True)
class ArchiveS3:
    """How the Python readers reach the archive (pyarrow's S3 client); ``None`` fields
    fall back to the standard AWS environment. ``read_topic``/``read_stream`` fill them
    from Spark's ``fs.s3a.*`` settings, so the S3A settings stay the only ones to give."""

    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    access_key: str | None = None
    secret_key: str | None = None
    session_token: str | None = None


@dataclass(frozen=True)
class PartitionChoice:
    """Which partitions: all, a list, or a regular expression (``regex:...``)."""

    names: tuple[str, ...] | None = None
    pattern: str | None = None

    def admits(self, partition: str) -> bool:
        if self.names is not None:
            return partition in self.names
        if self.pattern is not None:
            return re.fullmatch(self.pattern, partition) is not None
        return True


@dataclass(frozen=True)
class SourceOptions:
    """Everything a read needs to know, as plain values (pickled to every task)."""

    topic: str
    path: str | None = None
    url: str | None = None
    token: str | None = None
    archive: str | None = None  # the archive's root as "bucket/prefix" (s3a:// left off)
    archive_s3: ArchiveS3 = ArchiveS3()
    partitions: PartitionChoice = PartitionChoice()
    starting: OffsetSpec = "earliest"
    ending: OffsetSpec = "latest"
    starting_ms: int | None = None  # inclusive
    ending_ms: int | None = None  # exclusive
    max_records_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    columns: tuple[str, ...] | None = None
    dataset: tuple[str, ...] = ()
    dataset_exclude: tuple[str, ...] = ()
    url_page_rows: int = MAX_PAGE_SIZE  # the node's largest page: fewest requests
    url_split_rows: int = DEFAULT_URL_SPLIT_ROWS
    bytes_per_task: int = DEFAULT_BYTES_PER_TASK
    # narrowed by filters Spark pushed down (``pushdown``), never by the user directly
    only_partitions: frozenset[str] | None = None
    index_from: int | None = None
    index_until: int | None = None  # exclusive

    @property
    def time_bounded(self) -> bool:
        return self.starting_ms is not None or self.ending_ms is not None


KNOWN = {
    "path": "a node's data directory (read-only is enough)",
    "url": "a node's HTTP address, e.g. http://plateau-a.ns:3030",
    "token": f"the node's read token (url mode; default: ${TOKEN_ENV})",
    "archive": "the topic's object-storage archive, s3a://bucket/prefix: the whole history",
    "archive.endpoint": "format('plateau'): the archive's S3 endpoint (read_topic: fs.s3a.*)",
    "archive.region": "format('plateau'): the archive's S3 region",
    "archive.pathstyle": "format('plateau'): true for path-style S3 requests",
    "archive.accesskey": "format('plateau'): S3 access key (default: $AWS_ACCESS_KEY_ID)",
    "archive.secretkey": "format('plateau'): S3 secret key (default: $AWS_SECRET_ACCESS_KEY)",
    "archive.sessiontoken": "format('plateau'): S3 session token (default: $AWS_SESSION_TOKEN)",
    "topic": "the topic to read",
    "partitions": "partition names, comma-separated or a JSON list, or regex:<pattern>",
    "startingoffsets": 'earliest, latest or JSON {"partition": index}; -2 earliest, -1 latest',
    "endingoffsets": 'latest, or JSON {"partition": index} (exclusive); -1 latest',
    "startingtimestamp": "epoch milliseconds or RFC 3339, inclusive",
    "endingtimestamp": "epoch milliseconds or RFC 3339, exclusive",
    "maxrecordspertrigger": "streaming: at most this many records per micro-batch",
    "failondataloss": "true (default): fail when retention deleted records still to read",
    "columns": "the columns to read, comma-separated or a JSON list",
    "dataset": "url mode: the node's data focus, paths to keep",
    "dataset.exclude": "url mode: the node's data focus, paths to drop",
    "url.pagerows": f"url mode: rows per HTTP page (default and most {MAX_PAGE_SIZE})",
    "url.splitrows": f"url mode: indexes per Spark task (default {DEFAULT_URL_SPLIT_ROWS})",
    "bytespertask": f"path mode: segment bytes per Spark task (default {DEFAULT_BYTES_PER_TASK})",
}


def parse(options: Mapping[str, Any]) -> SourceOptions:
    """Check ``options`` (as Spark gives them: strings, any case) and return them parsed."""
    opts = {str(k).lower(): v for k, v in options.items() if v is not None}
    unknown = sorted(set(opts) - set(KNOWN))
    if unknown:
        raise OptionError(
            f"unknown option {unknown[0]!r}; plateau's options are: {', '.join(sorted(KNOWN))}"
        )
    path = _text(opts, "path")
    url = _text(opts, "url")
    if path and url:
        raise OptionError(
            "give either option 'path' (a data directory) or 'url' (a node), not both"
        )
    if not path and not url:
        raise OptionError(
            "option 'path' (a node's data directory) or option 'url' (a node's address) is required"
        )
    if url and not re.match(r"https?://", url):
        raise OptionError(f"option 'url' must start with http:// or https://, got {url!r}")
    topic = _text(opts, "topic")
    if not topic:
        raise OptionError("option 'topic' is required")
    if NAME_PATTERN.fullmatch(topic) is None:
        raise OptionError(f"option 'topic': {topic!r} is not a valid topic name")
    dataset = _names(opts, "dataset") or ()
    exclude = _names(opts, "dataset.exclude") or ()
    if (dataset or exclude) and not url:
        raise OptionError(
            "options 'dataset' and 'dataset.exclude' are the node's data focus: url mode only "
            "(with 'path', choose columns with option 'columns')"
        )
    starting_ms = _timestamp(opts, "startingtimestamp", "startingTimestamp")
    ending_ms = _timestamp(opts, "endingtimestamp", "endingTimestamp")
    if starting_ms is not None and ending_ms is not None and ending_ms <= starting_ms:
        raise OptionError(
            f"option 'endingTimestamp' ({ending_ms}) must be after 'startingTimestamp' "
            f"({starting_ms}): the range is [start, end)"
        )
    return SourceOptions(
        topic=topic,
        path=path,
        url=url.rstrip("/") if url else None,
        token=_token(opts) if url else None,
        archive=_archive(opts),
        archive_s3=ArchiveS3(
            endpoint=_text(opts, "archive.endpoint"),
            region=_text(opts, "archive.region"),
            path_style=_bool(opts, "archive.pathstyle", "archive.pathStyle", default=False),
            access_key=_text(opts, "archive.accesskey"),
            secret_key=_text(opts, "archive.secretkey"),
            session_token=_text(opts, "archive.sessiontoken"),
        ),
        partitions=_partitions(opts),
        starting=_offsets(opts, "startingoffsets", "startingOffsets", ending=False),
        ending=_offsets(opts, "endingoffsets", "endingOffsets", ending=True),
        starting_ms=starting_ms,
        ending_ms=ending_ms,
        max_records_per_trigger=_positive(opts, "maxrecordspertrigger", "maxRecordsPerTrigger"),
        fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", default=True),
        columns=_names(opts, "columns"),
        dataset=dataset,
        dataset_exclude=exclude,
        url_page_rows=_positive(opts, "url.pagerows", "url.pageRows", MAX_PAGE_SIZE)
        or MAX_PAGE_SIZE,
        url_split_rows=_positive(opts, "url.splitrows", "url.splitRows") or DEFAULT_URL_SPLIT_ROWS,
        bytes_per_task=_positive(opts, "bytespertask", "bytesPerTask") or DEFAULT_BYTES_PER_TASK,
    )


def _text(opts: dict[str, Any], key: str) -> str | None:
    value = opts.get(key)
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _archive(opts: dict[str, Any]) -> str | None:
    """``s3a://bucket/prefix`` (or ``s3://``) as ``bucket/prefix``."""
    text = _text(opts, "archive")
    if text is None:
        return None
    try:
        return ArchiveUrl.parse(text).root()
    except InvalidInput as e:
        raise OptionError(f"option 'archive': {e} (like s3a://bucket/prefix)") from None


def _token(opts: dict[str, Any]) -> str | None:
    """The option, else ``$PLATEAU_TOKEN`` (blank: none)."""
    return _text(opts, "token") or (os.environ.get(TOKEN_ENV, "").strip() or None)


def _names(opts: dict[str, Any], key: str) -> tuple[str, ...] | None:
    """A list given as a JSON array, a Python list or comma-separated text."""
    value = opts.get(key)
    if value is None:
        return None
    if isinstance(value, list | tuple):
        items = [str(v) for v in value]
    else:
        text = str(value).strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as e:
                raise OptionError(f"option {key!r}: not a JSON list: {e}") from None
            if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
                raise OptionError(f"option {key!r}: a JSON list of strings is needed")
            items = parsed
        else:
            items = [v.strip() for v in text.split(",")]
    items = [v for v in items if v]
    if not items:
        raise OptionError(f"option {key!r} is empty")
    if len(set(items)) != len(items):
        raise OptionError(f"option {key!r} names a column twice: {items}")
    return tuple(items)


def _partitions(opts: dict[str, Any]) -> PartitionChoice:
    value = opts.get("partitions")
    if value is None:
        return PartitionChoice()
    text = value if isinstance(value, list | tuple) else str(value).strip()
    if isinstance(text, str) and text.startswith("regex:"):
        pattern = text[len("regex:") :]
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(
                f"option 'partitions': bad regular expression {pattern!r}: {e}"
            ) from None
        return PartitionChoice(pattern=pattern)
    names = _names(opts, "partitions") or ()
    for name in names:
        if NAME_PATTERN.fullmatch(name) is None:
            raise OptionError(f"option 'partitions': {name!r} is not a valid partition name")
    return PartitionChoice(names=names)


def _offsets(opts: dict[str, Any], key: str, label: str, ending: bool) -> OffsetSpec:
    value = opts.get(key)
    if value is None:
        return "latest" if ending else "earliest"
    if isinstance(value, dict):
        parsed: Any = value
    else:
        text = str(value).strip()
        if text in ("earliest", "latest"):
            if ending and text == "earliest":
                raise OptionError(f"option {label!r}: 'earliest' cannot end a read")
            return text  # type: ignore[return-value]
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as e:
            raise OptionError(
                f"option {label!r}: 'earliest', 'latest' or a JSON object of partition to "
                f'index (like {{"0": 1200, "1": -2}}) is needed; not JSON: {e}'
            ) from None
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(
            f'option {label!r}: a JSON object of partition to index is needed, like {{"0": 1200}}'
        )
    out: dict[str, int] = {}
    for partition, index in parsed.items():
        if NAME_PATTERN.fullmatch(str(partition)) is None:
            raise OptionError(f"option {label!r}: {partition!r} is not a valid partition name")
        if isinstance(index, bool) or not isinstance(index, int):
            raise OptionError(f"option {label!r}: the index of {partition!r} must be an integer")
        low = LATEST if ending else EARLIEST
        if index < low:
            special = "-1 (latest)" if ending else "-2 (earliest) or -1 (latest)"
            raise OptionError(
                f"option {label!r}: index {index} of {partition!r}: use an index >= 0 or {special}"
            )
        out[str(partition)] = index
    return out


def _timestamp(opts: dict[str, Any], key: str, label: str) -> int | None:
    """Epoch milliseconds from an integer or RFC 3339 text (naive times are UTC)."""
    value = _text(opts, key)
    if value is None:
        return None
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    try:
        moment = datetime.fromisoformat(value.replace("z", "Z"))
    except ValueError:
        raise OptionError(
            f"option {label!r}: epoch milliseconds or an RFC 3339 time is needed "
            f"(like 2026-11-24T10:00:00Z), got {value!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _positive(opts: dict[str, Any], key: str, label: str, most: int | None = None) -> int | None:
    value = _text(opts, key)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise OptionError(
            f"option {label!r}: a positive integer is needed, got {value!r}"
        ) from None
    if number <= 0:
        raise OptionError(f"option {label!r}: a positive integer is needed, got {number}")
    if most is not None and number > most:
        raise OptionError(f"option {label!r}: at most {most}, got {number}")
    return number


def _bool(opts: dict[str, Any], key: str, label: str, default: bool) -> bool:
    value = _text(opts, key)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise OptionError(f"option {label!r}: true or false, got {value!r}")


def data_dir(options: SourceOptions) -> Path:
    assert options.path is not None
    return Path(options.path.removeprefix("file://"))
