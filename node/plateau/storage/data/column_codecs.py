"""Which columns of a segment are compressed: chosen per column, where compression pays.

Users send both kinds of data in one table: float tensors and random ids that
no codec shrinks, and repetitive columns (model names, status codes, small
integers) that shrink several-fold. Compressing everything spent 40% of the
ingest rate on random values for nothing; compressing nothing wastes disk on
the rest. So, the way column stores choose encodings per column, the first
batch of each segment is compressed column by column as a sample, and a
column is compressed for the rest of the segment only if it shrank by at
least ``MIN_SAVING``, and only if those columns save ``MIN_BATCH_SAVING`` of
the batch: otherwise every batch is written as the client sent it. Each
segment samples again, so a column whose values change character is judged
anew within a segment's time. Within a compressed column, a buffer that did
not shrink in the sample (a string column's offsets: incrementing ints lz4
leaves at 1.00 of their size) is written raw without trying it again: about
six calls less per ML-log append, 1.02-1.05x its rate over five interleaved
pairs (``bench/ab_nodes.py --workload compressible``), no byte more on disk.
(Compressing at seal instead, off the acknowledgement's path, was measured
and lost: rewriting each segment beside the appends doubled their fsync
wait, 1.8 -> 3.4 ms.)

An explicit ``segment.compression`` wins: every column gets that codec
(``none``: no column). Messages the client compressed itself are written as
they came. A parquet topic's write-ahead file is judged the same way with lz4
(``write_ahead_codec``); its Parquet file gets per-column codecs of its own from
``sealed_writer``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pyarrow as pa

from plateau.protocol.topic_config import SegmentConfig
from plateau.storage.data.ipc_messages import (
    BatchLayout,
    Encoded,
    as_sent,
    buffers_per_column,
    compressed,
    read_layout,
)

MIN_SAVING = 0.40
"""A column is compressed when its sample shrank by at least this fraction.

lz4 runs on the path the writer waits for; a column it shrinks by a quarter
(small ints, quantized floats) costs nearly what one it shrinks fourfold does.
Measured on the ML-log workload (bench/ingest_vs_rs.py, interleaved): at 10%
the disk saving was 58% and the rate 0.52-0.56x plateau's, at 40% 53% and
0.59-0.63x. (A Parquet seal judges its columns at 20%, ``sealed_writer.MIN_SAVING``:
zstd there runs in the sealer, off that path.)"""

MIN_BATCH_SAVING = 0.20
"""...and only if the columns chosen save this much of the whole batch.

Writing a batch as sent costs one ``writev`` from the request's buffer; writing
it compressed costs a new message built buffer by buffer. A timestamp column
alone in a table of random values (5% of its bytes) paid for 0.25 ms an append
(the write stage, 1.03 -> 0.77 ms) to save 2.5% of the disk."""


def adaptive(config: SegmentConfig) -> bool:
    return config.compression is None


def write_ahead_codec(config: SegmentConfig) -> str:
    """The codec tried on a parquet topic's write-ahead file: lz4 per column, at defaults.

    The write-ahead file is fsynced on every acknowledged append and read again only by
    recovery; its Parquet file is written at seal, from the rows in memory. On a disk that
    the appends fill, its bytes are what the writers wait for: on the ML log the
    write-ahead held 133 bytes a row beside the Parquet file's 13. Judged per column like
    an arrow segment (random values are written as sent, so they pay nothing), it halved
    the `write` and `durable` stages and gained 1.03-1.19x the rate
    (``bench/ab_nodes.py --format parquet --workload compressible``; on random values
    0.85-1.05x, noise). On a fast disk the same change lost (0.80-0.93x, docs/ingest.md):
    it costs CPU a row, which only pays where the disk is the bound. An explicit
    ``segment.compression`` names the Parquet file's codec: the write-ahead is then
    written as sent, as before.
    """
    return "lz4" if adaptive(config) else "none"


@dataclass(frozen=True)
class ColumnPlan:
    """How each column of one schema is written; immutable, shared without a lock."""

    schema: pa.Schema
    config: SegmentConfig
    counts: list[int] | None
    codec: pa.Codec | None
    compress: tuple[bool, ...]
    # per body buffer: worth trying (None: every buffer of a compressed column)
    buffers: tuple[bool, ...] | None = None

    @classmethod
    def choose(cls, schema: pa.Schema, config: SegmentConfig, sample: pa.Message) -> ColumnPlan:
        counts = buffers_per_column(schema)
        none = tuple(False for _ in schema)
        name = config.codec() if config.format == "arrow" else write_ahead_codec(config)
        if name == "none" or counts is None:
            return cls(schema, config, counts, None, none)
        codec = pa.Codec(name)
        if not adaptive(config):
            return cls(schema, config, counts, codec, tuple(True for _ in schema))
        layout = read_layout(sample.metadata)
        if layout.compressed or sum(counts) != len(layout.buffers):
            return cls(schema, config, counts, None, none)  # judged on the next segment
        trial = compressed(sample.body, layout, counts, tuple(True for _ in schema), codec)
        sizes = list(zip(trial.raw_by_column, trial.stored_by_column, strict=True))
        chosen = tuple(raw > 0 and stored <= raw * (1 - MIN_SAVING) for raw, stored in sizes)
        saved = sum(raw - stored for keep, (raw, stored) in zip(chosen, sizes, strict=True) if keep)
        if saved < MIN_BATCH_SAVING * max(1, sum(raw for raw, _ in sizes)):
            return cls(schema, config, counts, None, none)
        return cls(schema, config, counts, codec, chosen, tuple(trial.shrank))

    def fits(self, schema: pa.Schema, config: SegmentConfig) -> bool:
        return self.config == config and self.schema.equals(schema)

    def codec_of(self, column: int) -> str:
        return self.codec.name if self.codec is not None and self.compress[column] else "none"

    def encode(self, message: pa.Message) -> Encoded:
        layout: BatchLayout = read_layout(message.metadata)
        if (
            self.codec is None
            or layout.compressed
            or self.counts is None
            or sum(self.counts) != len(layout.buffers)
        ):
            return as_sent(message.metadata, message.body, layout, self.counts)
        return compressed(
            message.body, layout, self.counts, self.compress, self.codec, self.buffers
        )


@dataclass
class ColumnBytes:
    codec: str = "none"
    raw_bytes: int = 0
    stored_bytes: int = 0


@dataclass
class CompressionStats:
    """Bytes per column before and after compression since the node started (one partition)."""

    columns: dict[str, ColumnBytes] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)  # a leaf: nothing taken inside

    def add(self, names: list[str], codecs: list[str], raw: list[int], stored: list[int]) -> None:
        with self.lock:
            for name, codec, r, s in zip(names, codecs, raw, stored, strict=False):
                col = self.columns.setdefault(name, ColumnBytes())
                col.codec = codec
                col.raw_bytes += r
                col.stored_bytes += s

    def snapshot(self) -> dict[str, ColumnBytes]:
        with self.lock:
            return {
                k: ColumnBytes(v.codec, v.raw_bytes, v.stored_bytes)
                for k, v in self.columns.items()
            }
