"""The focused-read line of bench/read.py: 2 of 20 columns with ``dataset`` against all 20.

    python bench/read.py --focus [--format parquet|arrow] [--columns mixed|int64]
        [--rows 2000000] [--rounds 3]

Fills topic ``wide`` (4 partitions; ``time`` plus 20 columns of random values:
``--columns mixed``, shaped like inference logs, or ``int64``, see
``wide_table``), then iterates the whole topic in Arrow in
interleaved pairs: all columns, then ``dataset[]=c00&dataset[]=c01``. Each
pass runs on a freshly started node (every segment sealed, nothing decoded
yet: a history scan reads each row once; the kernel's page cache stays warm
for both). Interleaving pairs, and reporting the median of each pair's ratio,
keeps the machine's drift out of the comparison. The last stdout line is one
JSON object (see bench/README.md).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from common import (
    NODE_START_S,
    NODE_STOP_S,
    GiB,
    append_round_robin,
    arrow_file_body,
    cleanup,
    create_topic,
    disk_budget,
    log,
    make_data_dir,
)
from testkit.nodeproc import NodeProcess

TOPIC = "wide"
COLUMNS = 20
FOCUSED = ("c00", "c01")
BATCH = 10_000


def wide_table(rows: int, seed: int, start_ms: int, kind: str = "mixed") -> pa.Table:
    """``time`` and ``COLUMNS`` columns of random values.

    ``int64``: all int64 (the cheapest columns there are to decode and send).
    ``mixed`` (the default), shaped like inference logs: by turns float64,
    int64, a 24-character string and a 4-float32 tensor (fixed-size list).
    """
    rng = random.Random(seed)
    data: dict[str, pa.Array] = {"time": pa.array(range(start_ms, start_ms + rows), pa.int64())}
    for i in range(COLUMNS):
        turn = i % 4 if kind == "mixed" else 1
        if turn == 0:
            values = pa.py_buffer(rng.randbytes(8 * rows))
            ints = pa.Array.from_buffers(pa.uint64(), rows, [None, values])
            data[f"c{i:02d}"] = pc.divide(pc.cast(ints, pa.float64(), safe=False), float(2**64))
        elif turn == 1:
            values = pa.py_buffer(rng.randbytes(8 * rows))
            data[f"c{i:02d}"] = pa.Array.from_buffers(pa.int64(), rows, [None, values])
        elif turn == 2:
            text = rng.randbytes(12 * rows).hex().encode()  # 24 hex characters a row
            offsets = pa.array(range(0, 24 * rows + 1, 24), pa.int32()).buffers()[1]
            data[f"c{i:02d}"] = pa.Array.from_buffers(
                pa.string(), rows, [None, offsets, pa.py_buffer(text)]
            )
        else:
            floats = pa.Array.from_buffers(
                pa.float32(), 4 * rows, [None, pa.py_buffer(rng.randbytes(16 * rows))]
            )
            data[f"c{i:02d}"] = pa.FixedSizeListArray.from_arrays(floats, 4)
    return pa.table(data)


def fill(url: str, rows: int, partitions: int, kind: str) -> None:
    bodies = [arrow_file_body(wide_table(BATCH, seed, seed * BATCH, kind)) for seed in range(8)]
    append_round_robin(url, TOPIC, bodies, -(-rows // BATCH), partitions, clients=4)


def run(
    args: Any,
    iterate: Callable[[str, int, list[tuple[str, str]]], Any],
) -> dict[str, Any]:
    """Fill, then ``args.rounds`` pairs of passes; ``iterate(url, node_pid, extra_params)``
    runs one measured topic iteration and returns its ``Pass``."""
    data_dir, temp_root = make_data_dir(args.data_dir, "plateau-bench-focus-")
    budget, capacity = disk_budget(data_dir, 4 * GiB)
    node = NodeProcess(data_dir, args=["--capacity-bytes", str(capacity)])
    try:
        node.start(timeout=NODE_START_S)
        create_topic(
            node.url,
            TOPIC,
            {
                "partitions": 4,
                "segment": {"format": args.format},
                "retention": {"max_bytes": budget},
            },
        )
        log(f"filling {args.rows:,} rows of {COLUMNS} {args.columns} columns ({args.format})")
        fill(node.url, args.rows, 4, args.columns)
        focus = [("dataset[]", name) for name in FOCUSED]
        full: list[Any] = []
        focused: list[Any] = []
        for _ in range(args.rounds):
            for passes, extra in ((full, []), (focused, focus)):
                # a fresh node for every pass: nothing decoded yet, as for a history scan
                # (the kernel's page cache stays warm for both)
                node.stop(timeout=NODE_STOP_S)
                node = NodeProcess(data_dir, args=["--capacity-bytes", str(capacity)])
                node.start(timeout=NODE_START_S)
                passes.append(iterate(node.url, node.pid, extra))
    except BaseException:
        log(f"node log tail:\n{node.log()}")
        raise
    finally:
        node.stop(timeout=NODE_STOP_S)
        if not args.keep:
            cleanup(temp_root)
    speedups = [b.rows_per_s / a.rows_per_s for a, b in zip(full, focused, strict=True)]
    full_bytes = statistics.median(p.body_bytes / max(p.rows, 1) for p in full)
    focused_bytes = statistics.median(p.body_bytes / max(p.rows, 1) for p in focused)
    return {
        "bench": "read_focus",
        "format": args.format,
        "rows": args.rows,
        "columns": COLUMNS,
        "column_types": args.columns,
        "focused_columns": len(FOCUSED),
        "full_rows_per_s": round(statistics.median(p.rows_per_s for p in full)),
        "focused_rows_per_s": round(statistics.median(p.rows_per_s for p in focused)),
        "speedup": round(statistics.median(speedups), 2),
        "speedups": [round(s, 2) for s in speedups],
        "full_wire_bytes_per_row": round(full_bytes, 1),
        "focused_wire_bytes_per_row": round(focused_bytes, 1),
        "wire_bytes_ratio": round(focused_bytes / full_bytes, 3),
        "full_node_cpu_cores": round(
            statistics.median(p.node_cpu_s / p.elapsed_s for p in full), 2
        ),
        "focused_node_cpu_cores": round(
            statistics.median(p.node_cpu_s / p.elapsed_s for p in focused), 2
        ),
        "complete": all(p.complete for p in full + focused),
    }
