"""What to do when open segments fill the memory budget: seal early, or serve from the file?

    python bench/open_segments.py [--mib 64] [--rows-per-batch 20000] [--data-dir DIR]

Issue 11 asked to measure both before choosing. Keeping an open segment's rows
only in its write-ahead file (and not in memory) costs, for a ``parquet``
topic, reading every byte back from disk to seal it (the node drops written
pages from the page cache, so the read goes to the disk), and for a reader of
recent rows, decoding the file instead of slicing memory. Sealing early costs
smaller segments: the seal's fixed costs (fsyncs, manifest commit, snapshot)
spread over fewer bytes. This prints both, in one run, as one JSON line:

* ``readback_mb_per_s``: a written, fsynced and dropped write-ahead file of
  ``--mib`` MiB read back with recovery's reader (``read_open_file``).
* ``seal_mb_per_s``: sealing from memory to Parquet, for a full-size segment
  (``--mib``) and for segments of an eighth of it (an early seal), per MB.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, make_table
from plateau.storage.data.durable_io import PageDropper
from plateau.storage.data.sealed_writer import write_sealed
from plateau.storage.recovery import read_open_file

MiB = 1024 * 1024


def write_wal(path: Path, batches: list[pa.RecordBatch]) -> None:
    """As an open segment writes it: IPC file messages, fsynced, pages dropped."""
    with path.open("wb") as f, pa.ipc.new_file(f, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
        f.flush()
        PageDropper(True).sync(f.fileno())


def seal_rate(directory: Path, table: pa.Table, pieces: int) -> float:
    """MB/s sealing ``table`` as ``pieces`` segments (parquet, zstd), as the sealer does."""
    rows = table.num_rows // pieces
    started = time.perf_counter()
    for i in range(pieces):
        write_sealed(
            directory / f"seal-{pieces}-{i}.parquet", table.slice(i * rows, rows), "parquet", "zstd"
        )
    return int(table.nbytes) / 1e6 / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mib", type=int, default=64, help="segment size [64]")
    ap.add_argument("--rows-per-batch", type=int, default=20_000)
    ap.add_argument("--data-dir", type=Path, default=None)
    args = ap.parse_args()
    batches: list[pa.RecordBatch] = []
    size = 0
    seed = 0
    while size < args.mib * MiB:
        batch = make_table(args.rows_per_batch, False, seed=seed, start_ms=0).to_batches()[0]
        batches.append(batch)
        size += batch.nbytes
        seed += 1
    table = pa.Table.from_batches(batches)
    with tempfile.TemporaryDirectory(dir=args.data_dir) as tmp:
        directory = Path(tmp)
        wal = directory / "segment.open"
        write_wal(wal, batches)
        started = time.perf_counter()
        _, read, _ = read_open_file(wal)
        readback = time.perf_counter() - started
        assert sum(b.num_rows for b in read) == table.num_rows
        wal.unlink()
        full = seal_rate(directory, table, 1)
        early = seal_rate(directory, table, 8)
    emit(
        {
            "segment_mib": args.mib,
            "rows": table.num_rows,
            "readback_mb_per_s": round(table.nbytes / 1e6 / readback, 1),
            "seal_mb_per_s": {"full": round(full, 1), "eighth": round(early, 1)},
            "seal_eighth_vs_full": round(early / full, 3),
        }
    )


if __name__ == "__main__":
    main()
