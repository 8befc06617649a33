"""The Argo CD health check (deploy/argocd/health.lua), run in a real Lua runtime
against statuses the operator's own code writes."""

from __future__ import annotations

from typing import Any

import pytest
from lupa import LuaRuntime

from plateau_operator.status import set_condition
from testkit.kubeapi import ROOT

SCRIPT = (ROOT / "deploy" / "argocd" / "health.lua").read_text()


def health(obj: dict[str, Any]) -> tuple[str, str]:
    lua = LuaRuntime(unpack_returned_tuples=True)

    def table(value: Any) -> Any:
        if isinstance(value, dict):
            return lua.table_from({k: table(v) for k, v in value.items()})
        if isinstance(value, list):
            return lua.table_from([table(v) for v in value])
        return value

    lua.globals().obj = table(obj)
    hs = lua.execute(SCRIPT)
    return str(hs["status"]), str(hs["message"])


def resource(
    generation: int, observed: int | None, *conds: tuple[str, bool, str]
) -> dict[str, Any]:
    conditions: list[dict[str, Any]] | None = None
    for kind, ok, reason in conds:
        conditions = set_condition(conditions, kind, ok, reason, f"{reason} message", observed or 0)
    status: dict[str, Any] = {}
    if observed is not None:
        status = {"observedGeneration": observed, "conditions": conditions}
    return {"metadata": {"generation": generation}, "status": status}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (resource(1, None), "Progressing"),  # not reconciled yet
        (resource(2, 1, ("Ready", True, "Synced")), "Progressing"),  # a newer spec not seen
        (resource(1, 1, ("Ready", True, "Synced")), "Healthy"),
        (resource(1, 1, ("Ready", False, "OverBudget")), "Degraded"),
        (resource(1, 1, ("Ready", False, "Invalid")), "Degraded"),
        (resource(1, 1, ("Ready", False, "NodeNotFound")), "Degraded"),
        (resource(1, 1, ("Ready", False, "NodeUnreachable")), "Degraded"),
        # a PlateauNode starting, rolling, and unable to grow its volume
        (
            resource(
                1,
                1,
                ("Ready", False, "NotReady"),
                ("Progressing", True, "Starting"),
                ("Degraded", False, "Healthy"),
            ),
            "Progressing",
        ),
        (
            resource(
                1,
                1,
                ("Ready", True, "NodeReady"),
                ("Progressing", True, "RollingUpdate"),
                ("Degraded", False, "Healthy"),
            ),
            "Progressing",
        ),
        (
            resource(
                1,
                1,
                ("Ready", True, "NodeReady"),
                ("Progressing", False, "Stable"),
                ("Degraded", False, "Healthy"),
            ),
            "Healthy",
        ),
        (
            resource(
                1,
                1,
                ("Ready", True, "NodeReady"),
                ("Progressing", False, "Stable"),
                ("Degraded", True, "ExpansionUnsupported"),
            ),
            "Degraded",
        ),
    ],
)
def test_health_follows_the_conditions(obj: dict[str, Any], expected: str) -> None:
    status, message = health(obj)
    assert status == expected
    assert message  # Argo CD shows it beside the status
