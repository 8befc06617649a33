"""url mode's token: the option, else ``$PLATEAU_TOKEN`` (no JVM:
tests/spark/test_spark_token_env.py reads a real node that way)."""

from __future__ import annotations

import pytest

from plateau.spark.options import parse

URL = {"url": "http://n:3030", "topic": "t"}


def test_the_token_option_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATEAU_TOKEN", "from-env")
    assert parse({**URL, "token": "given"}).token == "given"
    assert parse({**URL, "TOKEN": "given"}).token == "given"
    assert parse(URL).token == "from-env"
    assert parse({**URL, "token": " "}).token == "from-env"  # blank: not given
    # path mode reads the volume: no token, none carried
    assert parse({"path": "/data", "topic": "t"}).token is None


def test_no_token_anywhere_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLATEAU_TOKEN", raising=False)
    assert parse(URL).token is None
    monkeypatch.setenv("PLATEAU_TOKEN", "  ")
    assert parse(URL).token is None
