"""The configuration reference, generated from the settings tree.

The README's table is this module's output (``python -m plateau.settings_doc``);
a unit test fails when a knob is missing from the README, so the docs cannot
drift from the code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from plateau.settings import NodeSettings


def knobs(
    model: type[BaseModel] = NodeSettings, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, Any, str]]:
    """(dotted name, default, description) of every leaf setting."""
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from knobs(ann, (*prefix, name))
            continue
        default = field.get_default(call_default_factory=True)
        yield ".".join((*prefix, name)), default, field.description or ""


def env_name(dotted: str) -> str:
    return "PLATEAU_" + dotted.upper().replace(".", "__")


def markdown() -> str:
    lines = [
        "| setting (YAML path) | environment variable | default | meaning |",
        "|---|---|---|---|",
    ]
    for dotted, default, text in knobs():
        shown = "unset" if default is None else f"`{default}`"
        lines.append(f"| `{dotted}` | `{env_name(dotted)}` | {shown} | {text} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
