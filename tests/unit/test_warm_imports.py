"""A node pays for pyarrow's lazy imports before it serves, not on its first appends.

Each case runs in a fresh interpreter, as the node starts: what the first Parquet seal
and the first append without a ``time`` column import is what a serving node would
stall on (the import holds the GIL: 2.3 s for pandas where no bytecode is written).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

FIRST_WORK = """
import json, sys, tempfile
from pathlib import Path
import plateau.server.run  # what the node has loaded when it starts
from plateau.server.tuning import warm_lazy_imports
if WARM:
    warm_lazy_imports()
import pyarrow as pa
from plateau.storage.data.sealed_writer import write_sealed
from plateau.storage.data.validation import prepare
before = set(sys.modules)
table = prepare(pa.table({"v": pa.array(range(1000), pa.int64())}), "parquet")
write_sealed(Path(tempfile.mkdtemp()) / "s.parquet", table, "parquet", "zstd", adaptive=True)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def imported_by_first_work(warm: bool) -> list[str]:
    code = FIRST_WORK.replace("WARM", repr(warm))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout))


def test_after_the_warm_up_the_first_seal_and_stamp_import_nothing() -> None:
    assert imported_by_first_work(warm=True) == []


def test_without_it_they_would_import_pandas_where_installed() -> None:
    """The case the warm-up exists for (pandas is installed with the spark extra, which
    the test environment always has): proves the test above can fail."""
    assert importlib.util.find_spec("pandas") is not None, "the test environment has pandas"
    assert "pandas" in imported_by_first_work(warm=False)
