"""``python -m plateau_operator``: run the operator with kopf's own ``run`` command.

Every namespace by default; ``PLATEAU_OPERATOR_NAMESPACE`` (comma-separated)
narrows it. Standalone: one replica (the chart's Deployment uses ``Recreate``),
no peering objects to install. Logs are JSON lines (``PLATEAU_OPERATOR_LOG_FORMAT``
= ``plain`` for people at a terminal); the liveness endpoint is
``:PLATEAU_OPERATOR_HEALTH_PORT/healthz`` (8081), metrics are on
``:PLATEAU_OPERATOR_METRICS_PORT/metrics`` (8080).
"""

from __future__ import annotations

import os

from kopf import cli


def main() -> None:
    env = os.environ.get
    namespaces = [ns for ns in env("PLATEAU_OPERATOR_NAMESPACE", "").split(",") if ns]
    scope = [arg for ns in namespaces for arg in ("--namespace", ns)] or ["--all-namespaces"]
    health = f"http://0.0.0.0:{env('PLATEAU_OPERATOR_HEALTH_PORT', '8081')}/healthz"
    logs = ["--log-format", env("PLATEAU_OPERATOR_LOG_FORMAT", "json")]
    args = ["run", "--standalone", *scope, "--liveness", health, *logs]
    cli.main(args=[*args, "-m", "plateau_operator.handlers"])


if __name__ == "__main__":
    main()
