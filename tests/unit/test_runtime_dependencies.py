"""The node runs on its own dependencies: numpy and pandas come only with the ``spark`` extra.

The node's image installs ``pyproject.toml``'s ``dependencies`` and nothing else, so a
module of the node that imports numpy (or pandas, pyspark) starts in development, where
the extras are installed, and crashes in the pod at import. Every module outside
``plateau.spark`` (and the CLI's ``spark`` command, which needs the extra by design) is
imported here in a fresh interpreter where those packages cannot be imported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

NODE = Path(__file__).resolve().parents[2] / "node"
EXTRAS = ("numpy", "pandas", "pyspark")
SPARK_ONLY = ("plateau.spark", "plateau.cli.spark")

PROGRAM = f"""
import importlib, pkgutil, sys
for name in {EXTRAS!r}:
    sys.modules[name] = None  # "import numpy" raises ImportError from here on
import plateau
failed = []
for info in pkgutil.walk_packages(plateau.__path__, "plateau."):
    if info.name.startswith({SPARK_ONLY!r}):
        continue
    try:
        importlib.import_module(info.name)
    except ImportError as exc:
        failed.append(f"{{info.name}}: {{exc}}")
print("\\n".join(failed))
"""


def modules_needing_extras(root: Path) -> list[str]:
    """``PROGRAM`` run on the ``plateau`` package under ``root``: one line per module that
    could not be imported, ``name: error``."""
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return [line for line in out.stdout.splitlines() if line]


def test_node_modules_import_without_the_spark_extra() -> None:
    failed = modules_needing_extras(NODE)
    assert failed == [], failed


def test_the_check_names_a_module_that_imports_numpy(tmp_path: Path) -> None:
    """Guard the test above: the same program, on a package with one module importing
    numpy, names that module (and not the spark-only ones)."""
    package = tmp_path / "plateau"
    (package / "spark").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "fine.py").write_text("import json\n")
    (package / "tensors.py").write_text("import numpy\n")
    (package / "spark" / "__init__.py").write_text("import pandas\n")
    failed = modules_needing_extras(tmp_path)
    assert [line.split(":")[0] for line in failed] == ["plateau.tensors"]
