"""The operator's own settings: one object, read once from ``PLATEAU_OPERATOR_*``.

The chart sets every one of them (charts/plateau/values.yaml documents the
values); the defaults are what an operator run by hand outside the chart gets.
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from plateau_operator.spec import DEFAULT_IMAGE


class RolloutMode(StrEnum):
    SERIAL = "serial"  # nodes that follow the operator's image roll one at a time
    OPT_IN = "opt-in"  # only nodes annotated plateau.dev/follow-operator-image roll


def _split(value: object) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PLATEAU_OPERATOR_", frozen=True)

    namespace: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Namespaces watched (empty: all)."
    )
    pod_namespace: str = Field(
        default="", description="The operator's own namespace (downward API)."
    )
    node_image: str = Field(default=DEFAULT_IMAGE, description="Image of nodes without spec.image.")
    resync_seconds: float = Field(
        default=60.0, gt=0, description="Seconds between full re-applies."
    )
    usage_seconds: float = Field(
        default=5.0,
        ge=0,
        description="Seconds between polls of each node's usage into status (0: none).",
    )
    metrics_port: int = Field(default=8080, ge=0, description="Prometheus metrics port (0: none).")
    health_port: int = Field(default=8081, ge=0)
    stall_seconds: float = Field(default=300.0, gt=0, description="A reconcile older is wedged.")
    log_format: str = "json"
    network_policy: bool = Field(default=True, description="One NetworkPolicy per node.")
    allowed_namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Namespaces every node admits (Prometheus')."
    )
    allow_endpoint_override: bool = Field(
        default=False,
        description="Honour the plateau.dev/endpoint annotation (operator off-cluster).",
    )
    rollout: RolloutMode = RolloutMode.SERIAL
    delete_wait_seconds: float = Field(
        default=60.0,
        ge=0,
        description="A topic's deletion waits this long for its node, then lets go.",
    )

    @field_validator("namespace", "allowed_namespaces", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> list[str]:
        """The chart passes lists as ``a,b`` (NoDecode keeps them from JSON parsing)."""
        return _split(value)


@lru_cache(maxsize=1)
def settings() -> OperatorSettings:
    return OperatorSettings()
