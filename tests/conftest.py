"""Every test runs with the lock-order check on (``plateau.storage.catalog.locks``): an engine
lock taken out of order raises at once, in process and in node subprocesses (which
inherit the environment), whether or not that run's timing would deadlock.

The archive's tests share one real S3 server (SeaweedFS, ``testkit.s3server``) per
session, started only when a test first asks for ``s3server``, ``s3bucket`` or
``s3root`` (about 11 s); each test gets a fresh bucket (``s3bucket``) or a fresh
prefix of its module's bucket (``s3root``), so that tests never see each other's
objects. ``tools/run-tests`` builds ``weed`` and sets ``PLATEAU_WEED``; without it
the first use builds it (minutes, cached). With ``CI=true`` a server that cannot
be built or started fails the test, never skips it.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from plateau.storage.catalog.locks import CHECK_ENV
from plateau.storage.config import StorageSettings
from plateau.storage.engine import Engine
from testkit.s3server import S3Server, weed_binary

os.environ.setdefault(CHECK_ENV, "1")

_bucket_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def s3server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One real SeaweedFS S3 server on loopback for the whole session."""
    try:
        server = S3Server(tmp_path_factory.mktemp("s3server"), weed_binary()).start()
    except (OSError, RuntimeError) as exc:
        why = f"no S3 server (SeaweedFS: tools/cluster-build --only seaweedfs, PLATEAU_WEED): {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true never skips: {why}", pytrace=False)
        pytest.skip(why)
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def s3bucket(s3server: S3Server, request: pytest.FixtureRequest) -> str:
    """A new, empty bucket on the session's S3 server, named after the test (S3 rules:
    3-63 lowercase letters, digits and hyphens)."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())
    name = f"t{next(_bucket_numbers):04d}-{stem}"[:63].rstrip("-")
    return s3server.create_bucket(name)


@pytest.fixture(scope="module")
def module_bucket(s3server: S3Server, request: pytest.FixtureRequest) -> str:
    """One bucket for a test module whose tests each take a prefix of it (``s3root``)."""
    stem = request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")
    return s3server.create_bucket(f"m{next(_bucket_numbers):03d}-{stem}"[:63].rstrip("-"))


@pytest.fixture
def s3root(module_bucket: str, request: pytest.FixtureRequest) -> str:
    """``bucket/prefix`` of this test's own archive, in its module's bucket."""
    stem = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())
    return f"{module_bucket}/{next(_bucket_numbers):04d}-{stem}"[:200]


EngineFactory = Callable[..., Engine]


@pytest.fixture
def make_engine(tmp_path: Path) -> Iterator[EngineFactory]:
    """Engines on ``tmp_path/data``; all closed at the end of the test."""
    engines: list[Engine] = []

    def make(**kwargs: object) -> Engine:
        settings = StorageSettings(data_dir=tmp_path / "data", **kwargs)  # type: ignore[arg-type]
        engine = Engine(settings)
        engines.append(engine)
        return engine

    yield make
    for e in engines:
        e.close()
