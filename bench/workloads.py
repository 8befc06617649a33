"""The two workloads of ``bench/ingest_vs_rs.py``: random values, and inference logs.

Both are tables plateau's Rust server can store too: an int64 ``time`` first,
no binary or fixed-size-list columns (its arrow2 writer cannot carry them).

* ``incompressible``: about 140 bytes a row of random values (int64 ids,
  float64 measurements, 48 random printable characters), the way float
  tensors and random ids arrive: lz4 and zstd gain next to nothing on it.
* ``compressible``: ML inference log rows, about 135 bytes a row: string
  columns with few distinct values (model, version, endpoint, status, region),
  small integers, a float32 score and quantized input statistics. These shrink
  several-fold, so a node that compresses them saves disk.

The values are drawn with numpy from a seed, so a body is the same in every run.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

WORKLOADS = ("incompressible", "compressible")

TEXT_BYTES = 48  # random printable characters per row in the incompressible workload

MODELS = [
    "resnet50-image-classifier",
    "bert-base-sentiment",
    "whisper-small-transcribe",
    "llama-3-8b-instruct",
    "xgboost-fraud-score",
]
MODEL_WEIGHTS = [0.35, 0.25, 0.15, 0.15, 0.10]
VERSIONS = [f"2026.{m}.{p}" for m in (3, 6, 9, 11, 12) for p in (0, 1)]  # 10
STATUSES = ["ok", "timeout", "error", "rejected"]
STATUS_WEIGHTS = [0.93, 0.03, 0.03, 0.01]
REGIONS = [
    "eu-west-1",
    "eu-central-1",
    "us-east-1",
    "us-east-2",
    "us-west-2",
    "ap-south-1",
    "ap-northeast-1",
    "sa-east-1",
]
CUSTOMERS = 1000


def _pick(values: list[str], index: np.ndarray) -> pa.Array:
    return pc.take(pa.array(values, pa.string()), pa.array(index, pa.int32()))


def incompressible_table(rows: int, seed: int, start_ms: int) -> pa.Table:
    """``rows`` rows of random values: 8 + 6*8 + 4*8 + 4 + 48 = 140 bytes each in Arrow."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(np.int64)
    columns: dict[str, pa.Array] = {
        "time": pa.array(np.arange(start_ms, start_ms + rows, dtype=np.int64)),
    }
    for i in range(6):
        columns[f"id{i}"] = pa.array(rng.integers(info.min, info.max, rows, dtype=np.int64))
    for i in range(4):
        columns[f"x{i}"] = pa.array(rng.standard_normal(rows) * 1000.0)
    chars = rng.integers(0x21, 0x7F, rows * TEXT_BYTES, dtype=np.uint8).tobytes()
    offsets = np.arange(0, (rows + 1) * TEXT_BYTES, TEXT_BYTES, dtype=np.int32).tobytes()
    columns["text"] = pa.Array.from_buffers(
        pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(chars)]
    )
    return pa.table(columns)


def compressible_table(rows: int, seed: int, start_ms: int) -> pa.Table:
    """``rows`` inference-log rows of about 135 bytes each in Arrow (uncompressed)."""
    rng = np.random.default_rng(seed)
    model = rng.choice(len(MODELS), rows, p=MODEL_WEIGHTS)
    # a model serves one of two live versions at a time
    version = model * 2 + rng.integers(0, 2, rows)
    status = rng.choice(len(STATUSES), rows, p=STATUS_WEIGHTS)
    # requests arrive a few per millisecond: times repeat and grow
    times = start_ms + np.sort(rng.integers(0, max(1, rows // 4), rows)).astype(np.int64)
    latency = np.minimum(rng.lognormal(3.5, 0.6, rows), 60_000).astype(np.int32)
    score = rng.random(rows, dtype=np.float32)
    mean = (np.round(rng.normal(0.45, 0.1, rows) * 256) / 256).astype(np.float32)
    std = (np.round(rng.normal(0.22, 0.05, rows) * 256) / 256).astype(np.float32)
    endpoints = [f"/predict/{m}" for m in MODELS]
    return pa.table(
        {
            "time": pa.array(times),
            "model": _pick(MODELS, model),
            "model_version": _pick(VERSIONS, version),
            "endpoint": _pick(endpoints, model),
            "status": _pick(STATUSES, status),
            "region": _pick(REGIONS, rng.integers(0, len(REGIONS), rows)),
            "customer_id": pa.array(rng.integers(0, CUSTOMERS, rows, dtype=np.int64)),
            "latency_ms": pa.array(latency),
            "tokens_in": pa.array(rng.integers(0, 2048, rows, dtype=np.int32)),
            "tokens_out": pa.array(rng.integers(0, 512, rows, dtype=np.int32)),
            "score": pa.array(score),
            "input_mean": pa.array(mean),
            "input_std": pa.array(std),
        }
    )


def workload_table(workload: str, rows: int, seed: int, start_ms: int) -> pa.Table:
    if workload == "incompressible":
        return incompressible_table(rows, seed, start_ms)
    if workload == "compressible":
        return compressible_table(rows, seed, start_ms)
    raise ValueError(f"unknown workload {workload!r}; use one of {', '.join(WORKLOADS)}")


def ipc_file(table: pa.Table, compression: str | None = None) -> bytes:
    """An Arrow IPC file of ``table``: uncompressed (as clients send it) or buffer-compressed."""
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression=compression)
    with ipc.new_file(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    body: bytes = sink.getvalue().to_pybytes()
    return body


def make_workload_bodies(workload: str, count: int, rows: int, start_ms: int) -> list[bytes]:
    """``count`` distinct uncompressed Arrow IPC files, generated before any timed phase."""
    return [
        ipc_file(workload_table(workload, rows, seed=i, start_ms=start_ms + i * rows))
        for i in range(count)
    ]


def codec_ratios(bodies: list[bytes]) -> dict[str, float]:
    """Compressed / uncompressed size of ``bodies`` with Arrow's lz4 and zstd buffer codecs.

    1.0 means the codec gains nothing; the node's Arrow segments use these codecs.
    """
    raw = sum(len(b) for b in bodies)
    out: dict[str, float] = {}
    for codec in ("lz4", "zstd"):
        size = sum(len(ipc_file(ipc.open_file(pa.py_buffer(b)).read_all(), codec)) for b in bodies)
        out[codec] = round(size / raw, 4)
    return out
