"""Ask the node and plateau's Rust server the same read questions; print where they differ.

    python tools/compare_plateau_rs.py PLATEAU_RS_BINARY

(build it with ``../shared/tools/build-plateau-rs``: about 23 minutes.) Both
servers start on loopback in temporary directories and get the same Arrow
appends: nested inference-log rows (structs in structs, a list of structs, a
float list) in partitions ``p0``/``p1`` (plateau crashes on digit-only
partition names). Then each read case (partition reads and topic iteration,
with and without a data focus, JSON and Arrow, empty and bad) goes to both,
and the status, Content-Type, iteration-status header and the records are
compared. The last stdout line is one JSON object: every case, equal or not,
with the differences.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from plateau.protocol import ARROW_FILE, ITERATION_STATUS_HEADER, JSON  # noqa: E402
from testkit.arrowhttp import ipc_file  # noqa: E402
from testkit.nodeproc import NodeProcess  # noqa: E402

ROWS = 5


def rows(first: int) -> pa.Table:
    """Nested rows plateau's arrow2 writer can carry (no fixed-size list, no binary)."""
    n = range(first, first + ROWS)
    tensor = pa.array([[float(i), i + 0.5] for i in n], pa.list_(pa.float32()))
    inputs = pa.StructArray.from_arrays(
        [tensor, pa.array([f"img-{i}" for i in n])], ["tensor", "label"]
    )
    classes = pa.array(
        [[{"name": "cat", "p": i / 10}] for i in n],
        pa.list_(pa.struct([("name", pa.string()), ("p", pa.float64())])),
    )
    outputs = pa.StructArray.from_arrays(
        [pa.array([i + 0.25 for i in n], pa.float64()), classes], ["score", "classes"]
    )
    model = pa.StructArray.from_arrays(
        [pa.array(["resnet"] * ROWS), pa.array([3] * ROWS, pa.int32())], ["name", "version"]
    )
    metadata = pa.StructArray.from_arrays(
        [model, pa.array(list(n), pa.int64())], ["model", "latency_ms"]
    )
    times = pa.array([1_700_000_000_000 + i for i in n], pa.timestamp("ms"))
    return pa.table({"time": times, "inputs": inputs, "outputs": outputs, "metadata": metadata})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_rs(binary: Path, work: Path) -> tuple[subprocess.Popen[bytes], str]:
    port, metrics = free_port(), free_port()
    (work / "data").mkdir()
    (work / "plateau.toml").write_text(
        f'data_path = "{work / "data"}"\n[http]\nbind = "127.0.0.1:{port}"\n'
        f'[metrics]\nprometheus = "127.0.0.1:{metrics}"\n'
    )
    log = (work / "plateau-rs.log").open("wb")
    proc = subprocess.Popen([str(binary)], cwd=work, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"plateau-rs did not start: {(work / 'plateau-rs.log').read_text()}")


# (name, method, path and query, body, Accept)
CASES: list[tuple[str, str, str, Any, str | None]] = []
for accept in (ARROW_FILE, JSON):
    kind = "arrow" if accept == ARROW_FILE else "json"
    base = "/topic/cmp/partition/p0/records?start=0"
    for label, query in (
        ("all", ""),
        ("one struct", "&dataset[]=inputs"),
        ("two structs flat", "&dataset[]=inputs&dataset[]=outputs&dataset.separator=."),
        ("exclude one of two", "&dataset[]=inputs&dataset[]=outputs&dataset.exclude[]=outputs"),
        (
            "star flat minus nested",
            "&dataset[]=*&dataset.separator=.&dataset.exclude[]=metadata.model",
        ),
        (
            "max_bytes",
            "&dataset[]=inputs&dataset[]=time&dataset.separator=.&dataset.max_bytes=20",
        ),
        ("indexed form", "&dataset[0]=metadata&dataset[1]=time"),
        ("bad path", "&dataset[]=nope"),
    ):
        CASES.append((f"read {kind}: {label}", "GET", base + query, None, accept))
    CASES.append((f"read {kind}: past the end", "GET", base.replace("=0", "=99"), None, accept))
    CASES.append((f"read {kind}: unknown partition", "GET", base.replace("p0", "zz"), None, accept))
    it = "/topic/cmp/records?page_size=4"
    CASES.append((f"iterate {kind}: first page", "POST", it, {}, accept))
    CASES.append(
        (f"iterate {kind}: rest", "POST", it + "&page_size=100", {"p0": 2, "p1": 2}, accept)
    )
    CASES.append(
        (
            f"iterate {kind}: focused",
            "POST",
            it + "&dataset[]=outputs&dataset.separator=.",
            {},
            accept,
        )
    )
    CASES.append((f"iterate {kind}: done", "POST", it, {"p0": 10, "p1": 10}, accept))


def answer(url: str, method: str, target: str, body: Any, accept: str | None) -> dict[str, Any]:
    headers = {"accept": accept} if accept else {}
    content = json.dumps(body).encode() if body is not None else None
    if content is not None:
        headers["content-type"] = JSON
    r = httpx.request(method, url + target, content=content, headers=headers, timeout=30)
    out: dict[str, Any] = {
        "status": r.status_code,
        "content_type": r.headers.get("content-type"),
        "x_iteration_status": json.loads(r.headers[ITERATION_STATUS_HEADER])
        if ITERATION_STATUS_HEADER in r.headers
        else None,
    }
    if r.status_code != 200:
        return out
    if (r.headers.get("content-type") or "").startswith(ARROW_FILE):
        table = pa.ipc.open_file(pa.py_buffer(r.content)).read_all()
        out["columns"] = [f"{f.name}: {f.type}" for f in table.schema]
        out["records"] = table.to_pylist()
    else:
        out["records"] = r.json()
    return out


def main() -> None:
    binary = Path(sys.argv[1])
    work = Path(tempfile.mkdtemp(prefix="compare-rs-"))
    rs, rs_url = start_rs(binary, work)
    node = NodeProcess(work / "node-data").start()
    try:
        for url in (rs_url, node.url):
            for i, partition in enumerate(("p0", "p1", "p0", "p1")):
                r = httpx.post(
                    f"{url}/topic/cmp/partition/{partition}",
                    content=ipc_file(rows(10 * i)),
                    headers={"content-type": ARROW_FILE},
                    timeout=30,
                )
                if r.status_code != 200:
                    raise RuntimeError(f"append to {url}: {r.status_code} {r.text}")
        time.sleep(1.5)  # plateau-rs checkpoints every second
        results = []
        for name, method, target, body, accept in CASES:
            theirs = answer(rs_url, method, target, body, accept)
            ours = answer(node.url, method, target, body, accept)
            keys = sorted(set(theirs) | set(ours))
            diff = {
                k: {"plateau": theirs.get(k), "node": ours.get(k)}
                for k in keys
                if theirs.get(k) != ours.get(k)
            }
            results.append({"case": name, "equal": not diff, "differences": diff})
        for res in results:
            print(("same  " if res["equal"] else "DIFF  ") + res["case"], file=sys.stderr)
        summary = {
            "cases": len(results),
            "equal": sum(r["equal"] for r in results),
            "results": results,
        }
        print(json.dumps(summary, default=str))
    finally:
        node.stop()
        rs.terminate()
        rs.wait(timeout=30)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT / "node"))
    main()
