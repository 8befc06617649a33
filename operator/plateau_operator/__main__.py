"""``python -m plateau_operator``: run the operator with kopf's own ``run`` command.

Every namespace by default; ``PLATEAU_OPERATOR_NAMESPACE`` (comma-separated)
narrows it. Standalone: one replica (the chart's Deployment uses ``Recreate``),
no peering objects to install.
"""

from __future__ import annotations

import os

from kopf import cli


def main() -> None:
    namespaces = [ns for ns in os.environ.get("PLATEAU_OPERATOR_NAMESPACE", "").split(",") if ns]
    scope = [arg for ns in namespaces for arg in ("--namespace", ns)] or ["--all-namespaces"]
    cli.main(args=["run", "--standalone", *scope, "-m", "plateau_operator.handlers"])


if __name__ == "__main__":
    main()
