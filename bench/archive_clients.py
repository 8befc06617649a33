"""Which S3 client the archive uploads with: the same files to a real SeaweedFS, per client.

    python bench/archive_clients.py [--rounds 3] [--clients pyarrow,pyarrow_bg,boto3,...]
        [--large 8] [--small 64]

Uploads ``--large`` files of 64 MiB and ``--small`` files of 4 MiB of
incompressible Parquet, four files at once, one 10 MiB part in flight per
file, with each client in its own process (its rusage is the client's CPU),
on a fresh ``weed server`` per run; the clients' order rotates every round.
boto3 and obstore are not dependencies of the project: a client that does not
import is reported as missing (``uv pip install --target DIR boto3 obstore``
and ``PYTHONPATH=DIR``). The findings and the choice: docs/archive-client.md.

Progress on stderr; the last stdout line is one JSON object: per file set and
client the runs' MB/s, client CPU seconds per GB and the server's.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # testkit

import psutil
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from common import MiB, emit, log, self_cpu_s
from testkit.s3server import ADMIN, REGION, S3Server

PART = 10 * MiB  # pyarrow's own multipart part size, used for every client
AT_ONCE = 4
BUCKET = "bench"

Upload = Callable[[str, list[Path]], None]


def make_files(directory: Path, large: int, small: int) -> dict[str, list[Path]]:
    """Parquet files of random bytes (zstd cannot shrink them), made once."""
    directory.mkdir(parents=True, exist_ok=True)
    sets: dict[str, list[Path]] = {}
    rng = random.Random(1)
    for mib, count in ((64, large), (4, small)):
        files = []
        for i in range(count):
            path = directory / f"f{mib:03d}-{i:03d}.parquet"
            if not path.exists():
                rows = mib * MiB // 128
                values = pa.array([rng.randbytes(120) for _ in range(rows)], pa.binary())
                table = pa.table({"time": pa.array(range(rows), pa.int64()), "value": values})
                pq.write_table(table, path, compression="zstd")
            files.append(path)
        if files:
            sets[f"{count}x{mib}MiB"] = files
    return sets


def _pyarrow(endpoint: str, background: bool) -> Upload:
    fs = pafs.S3FileSystem(
        access_key=ADMIN.access_key,
        secret_key=ADMIN.secret_key,
        endpoint_override=endpoint.removeprefix("http://"),
        scheme="http",
        region=REGION,
        background_writes=background,
    )

    def upload(prefix: str, files: list[Path]) -> None:
        def one(path: Path) -> None:
            key = f"{BUCKET}/{prefix}/{path.name}"
            with path.open("rb") as src, fs.open_output_stream(key) as out:
                while chunk := src.read(PART):
                    out.write(chunk)

        with ThreadPoolExecutor(AT_ONCE) as pool:
            list(pool.map(one, files))

    return upload


def _boto3(endpoint: str, checksum: str | None) -> Upload:
    boto3: Any = importlib.import_module("boto3")
    config: Any = importlib.import_module("botocore.config")
    transfer: Any = importlib.import_module("boto3.s3.transfer")
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ADMIN.access_key,
        aws_secret_access_key=ADMIN.secret_key,
        region_name=REGION,
        config=config.Config(
            s3={"addressing_style": "path"},
            max_pool_connections=2 * AT_ONCE,
            request_checksum_calculation="when_supported" if checksum else "when_required",
        ),
    )
    tc = transfer.TransferConfig(
        multipart_threshold=PART, multipart_chunksize=PART, max_concurrency=1, use_threads=False
    )
    extra = {"ChecksumAlgorithm": checksum} if checksum else {}

    def upload(prefix: str, files: list[Path]) -> None:
        def one(path: Path) -> None:
            key = f"{prefix}/{path.name}"
            client.upload_file(str(path), BUCKET, key, Config=tc, ExtraArgs=extra)

        with ThreadPoolExecutor(AT_ONCE) as pool:
            list(pool.map(one, files))

    return upload


def _obstore(endpoint: str, checksum: str | None) -> Upload:
    obstore: Any = importlib.import_module("obstore")
    stores: Any = importlib.import_module("obstore.store")
    config = {
        "access_key_id": ADMIN.access_key,
        "secret_access_key": ADMIN.secret_key,
        "region": REGION,
        "endpoint": endpoint,
        "virtual_hosted_style_request": False,
        **({"checksum_algorithm": checksum} if checksum else {}),
    }
    store = stores.S3Store(BUCKET, config=config, client_options={"allow_http": True})

    def upload(prefix: str, files: list[Path]) -> None:
        def one(path: Path) -> None:
            obstore.put(store, f"{prefix}/{path.name}", path, chunk_size=PART, max_concurrency=1)

        with ThreadPoolExecutor(AT_ONCE) as pool:
            list(pool.map(one, files))

    return upload


CLIENTS: dict[str, Callable[[str], Upload]] = {
    "pyarrow": lambda e: _pyarrow(e, background=False),
    "pyarrow_bg": lambda e: _pyarrow(e, background=True),  # the node's setting
    "boto3": lambda e: _boto3(e, None),
    "boto3_crc32": lambda e: _boto3(e, "CRC32"),
    "obstore": lambda e: _obstore(e, None),
    "obstore_sha256": lambda e: _obstore(e, "sha256"),
}


def one_run(client: str, endpoint: str, files: list[Path]) -> dict[str, float]:
    """In the child process: build the client (imports outside the timing), upload, measure."""
    upload = CLIENTS[client](endpoint)
    size = sum(p.stat().st_size for p in files)
    cpu0, t0 = self_cpu_s(), time.perf_counter()
    upload(client, files)
    seconds, cpu = time.perf_counter() - t0, self_cpu_s() - cpu0
    return {"bytes": size, "mb_per_s": size / seconds / 1e6, "cpu_s_per_gb": cpu / (size / 1e9)}


def _tree_cpu(pid: int) -> float:
    proc = psutil.Process(pid)
    return sum(sum(p.cpu_times()[:2]) for p in [proc, *proc.children(recursive=True)])


def available(client: str) -> bool:
    module = client.split("_")[0]
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    sets = make_files(root / "files", args.large, args.small)
    clients = [c for c in args.clients.split(",") if available(c)]
    missing = [c for c in args.clients.split(",") if c not in clients]
    if missing:
        log(f"not importable, left out: {missing}")
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for client in clients[r % len(clients) :] + clients[: r % len(clients)]:
            for name, files in sets.items():
                server = S3Server(root / f"s3-{r}-{client}-{name}").start()
                try:
                    server.create_bucket(BUCKET)
                    assert server.proc is not None
                    before = _tree_cpu(server.proc.pid)
                    out = subprocess.run(
                        [sys.executable, __file__, "--one", client, server.endpoint]
                        + [str(p) for p in files],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    result = json.loads(out.stdout.strip().splitlines()[-1])
                    server_cpu = _tree_cpu(server.proc.pid) - before
                finally:
                    server.kill()
                    shutil.rmtree(server.data_dir, ignore_errors=True)
                result.update(
                    client=client,
                    set=name,
                    round=r,
                    server_cpu_s_per_gb=server_cpu / (result["bytes"] / 1e9),
                )
                log(json.dumps(result))
                runs.append(result)
    summary: dict[str, Any] = {}
    for name in sets:
        for client in clients:
            mine = [x for x in runs if x["client"] == client and x["set"] == name]
            summary.setdefault(name, {})[client] = {
                key: {
                    "median": round(statistics.median(x[key] for x in mine), 2),
                    "runs": [round(x[key], 2) for x in mine],
                }
                for key in ("mb_per_s", "cpu_s_per_gb", "server_cpu_s_per_gb")
            }
    return {"part_bytes": PART, "at_once": AT_ONCE, "missing": missing, "sets": summary}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--one":
        emit(one_run(argv[1], argv[2], [Path(p) for p in argv[3:]]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--large", type=int, default=8, help="64 MiB files [8]")
    ap.add_argument("--small", type=int, default=64, help="4 MiB files [64]")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="plateau-bench-s3clients-"))
    try:
        emit(run(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
