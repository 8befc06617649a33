"""``python -m plateau_operator``: run the operator with kopf's own ``run`` command.

Every namespace by default; ``PLATEAU_OPERATOR_NAMESPACE`` (comma-separated)
narrows it (settings.py has every ``PLATEAU_OPERATOR_*`` setting). Standalone:
one replica (the chart's Deployment uses ``Recreate``), no peering objects to
install. Logs are JSON lines (``PLATEAU_OPERATOR_LOG_FORMAT=plain`` for people
at a terminal); the liveness endpoint is ``:<health port>/healthz``.
"""

from __future__ import annotations

from kopf import cli

from plateau_operator.settings import settings


def main() -> None:
    cfg = settings()
    scope = [arg for ns in cfg.namespace for arg in ("--namespace", ns)] or ["--all-namespaces"]
    health = f"http://0.0.0.0:{cfg.health_port}/healthz"
    args = ["run", "--standalone", *scope, "--liveness", health, "--log-format", cfg.log_format]
    cli.main(args=[*args, "-m", "plateau_operator.handlers"])


if __name__ == "__main__":
    main()
