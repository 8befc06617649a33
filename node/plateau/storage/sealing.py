"""Sealing one segment: its file made final, and the manifest row that will name it.

An arrow segment's open file becomes the sealed file (footer, fsync, rename); any
other is written anew from the rows in memory (Parquet, or an arrow file whose
writer was abandoned after a write error). The caller commits the row only after
this returns, so a sealed file is complete before the manifest names it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from plateau.storage.catalog.manifest import SegmentRow
from plateau.storage.data.column_codecs import adaptive
from plateau.storage.data.durable_io import rename_durably
from plateau.storage.data.open_segment import OpenSegment
from plateau.storage.data.sealed_writer import sealed_name, write_sealed

log = logging.getLogger(__name__)
NICEST = 19

REWRITES_AT_ONCE = 2
"""Parquet seals encoding at once, as many as when the sealer had two threads: more sealer
threads are for arrow seals (fsyncs and a rename), and must not bring more Parquet encoders
and their buffers (``storage.memory_overhead_bytes``) onto two cores."""


def seal_segment(
    topic: str,
    partition: str,
    data_dir: Path,
    seg: OpenSegment,
    rewrites: threading.Semaphore,
) -> SegmentRow:
    """Write the sealed file of ``seg`` and describe it; the caller commits the row."""
    fmt = seg.config.format
    final = seg.path.with_name(sealed_name(seg.first_index, seg.id, fmt))
    if fmt == "arrow" and seg.finish_file():
        rename_durably(seg.path, final)
    else:
        seg.finish_file()
        with rewrites:
            write_sealed(
                final, seg.table(), fmt, seg.config.codec(), seg.drop_pages, adaptive(seg.config)
            )
    assert seg.min_time_ms is not None and seg.max_time_ms is not None
    return SegmentRow(
        id=seg.id,
        topic=topic,
        partition=partition,
        format=fmt,
        first_index=seg.first_index,
        end_index=seg.end_index,
        bytes=final.stat().st_size,
        min_time_ms=seg.min_time_ms,
        max_time_ms=seg.max_time_ms,
        path=str(final.relative_to(data_dir)),
        sealed_at=time.time(),
    )


def lower_thread_priority(steps: int) -> None:
    """Run the calling thread ``steps`` nice levels below the node (a sealer's initializer).

    Why: an append's latency is a chain of short CPU steps and disk waits, while
    a Parquet seal is long CPU work with a deadline a second or more away (the
    next segment filling). At equal priority the scheduler shares the cores
    equally, and every stage of an append waited for the seals' encoding. On
    Linux a nice value belongs to the thread (``setpriority`` with its thread
    id), and raising it needs no privilege. Where that fails the seal runs at
    the node's priority, with a warning.
    """
    if steps <= 0:
        return
    try:
        tid = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(NICEST, now + steps))
    except (OSError, AttributeError) as exc:
        log.warning("sealer threads run at the node's priority: %s", exc)
