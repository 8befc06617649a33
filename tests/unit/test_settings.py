"""Settings: defaults < YAML < environment < flags, and the README documents every knob."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from plateau.settings import load_settings
from plateau.settings_doc import env_name, knobs

README = Path(__file__).resolve().parents[2] / "README.md"


def test_sources_in_order_of_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "node.yaml"
    cfg.write_text(
        "storage:\n  data_dir: /from/yaml\n  min_free_bytes: 5\n"
        "  topic_defaults:\n    segment: {format: arrow}\n"
        "server:\n  bind: 0.0.0.0:1\n"
    )
    monkeypatch.delenv("PLATEAU_CONFIG", raising=False)
    monkeypatch.setenv("PLATEAU_STORAGE__MIN_FREE_BYTES", "7")
    monkeypatch.setenv("PLATEAU_SERVER__BIND", "0.0.0.0:2")
    s = load_settings(cfg, server={"bind": "127.0.0.1:3"})
    assert s.storage.data_dir == Path("/from/yaml")  # YAML over default
    assert s.storage.topic_defaults.segment.format == "arrow"  # nested YAML
    assert s.storage.min_free_bytes == 7  # environment over YAML
    assert s.server.bind == "127.0.0.1:3"  # flag over environment
    assert s.storage.topic_defaults.segment.max_rows == 1_000_000  # untouched default


def test_nested_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLATEAU_CONFIG", raising=False)
    monkeypatch.setenv("PLATEAU_STORAGE__TOPIC_DEFAULTS__RETENTION__MAX_BYTES", "123")
    assert load_settings().storage.topic_defaults.retention.max_bytes == 123


def test_bad_values_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLATEAU_CONFIG", raising=False)
    with pytest.raises(ValidationError):
        load_settings(storage={"durability": {"mode": "sometimes"}})
    bad = tmp_path / "bad.yaml"
    bad.write_text("storage:\n  no_such_knob: 1\n")
    with pytest.raises(ValidationError):
        load_settings(bad)
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "missing.yaml")


def test_readme_documents_every_knob() -> None:
    text = README.read_text()
    missing = [d for d, _, _ in knobs() if f"`{d}`" not in text or env_name(d) not in text]
    assert not missing, f"README lacks {missing}: paste `python -m plateau.settings_doc`"
    assert all(desc for _, _, desc in knobs()), "every knob needs a description"
