"""A producer: appends rows to topics at a steady rate, counting what the node acknowledged.

Runs in the plateau image (``/opt/plateau/examples/producer.py``; see
examples/jobs/producer.yaml, which gives it the node's Service URL and its write token
from the Secret ``plateau-<node>-token``), or anywhere the client is installed:

    PLATEAU_URL=http://127.0.0.1:3030 python examples/producer.py --topics events --seconds 10

Each row: ``latency_ms`` (int, 0..999), ``user`` and ``payload`` (64 random hex digits,
so the data does not compress to nothing). A row counts as acknowledged only when the
node's reply gave it an index: a batch whose outcome is unknown (the connection broke
after it was sent) is counted apart, never resent. A progress line every 10 s and one
final JSON line: rows acknowledged and the sum of ``latency_ms`` per topic, the rate.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

import pyarrow as pa

from plateau.client import PlateauClient
from plateau.client.errors import PlateauClientError


def batch(rng: random.Random, rows: int) -> tuple[pa.Table, int]:
    """``rows`` rows and the sum of their ``latency_ms``."""
    latency = [rng.randrange(1000) for _ in range(rows)]
    users = [f"user-{rng.randrange(100)}" for _ in range(rows)]
    payload = [rng.getrandbits(256).to_bytes(32, "big").hex() for _ in range(rows)]
    table = pa.table(
        {"latency_ms": pa.array(latency, pa.int64()), "user": users, "payload": payload}
    )
    return table, sum(latency)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("PLATEAU_URL", "http://127.0.0.1:3030"))
    parser.add_argument("--topics", default="inference_logs", help="comma-separated")
    parser.add_argument("--partitions", type=int, default=2, help="appended round-robin")
    parser.add_argument("--rate", type=float, default=2000, help="rows per second per topic")
    parser.add_argument("--batch", type=int, default=500, help="rows per append")
    parser.add_argument("--seconds", type=float, default=60, help="how long to produce")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.batch <= 0 or args.seconds <= 0:
        parser.error("--rate, --batch and --seconds must be positive")
    topics = [t for t in args.topics.split(",") if t]
    rng = random.Random(args.seed)
    acked = dict.fromkeys(topics, 0)
    sums = dict.fromkeys(topics, 0)
    produced = unknown = failed = 0
    interval = args.batch / args.rate  # one batch per topic per interval
    token = os.environ.get("PLATEAU_TOKEN")
    t0 = time.monotonic()
    next_report = t0 + 10
    tick = 0
    with PlateauClient(args.url, token=token, timeout=30) as client:
        while time.monotonic() - t0 < args.seconds:
            for topic in topics:
                table, latency_sum = batch(rng, args.batch)
                produced += table.num_rows
                partition = str(tick % args.partitions)
                try:
                    span = client.append(topic, partition, table)
                except PlateauClientError as exc:
                    # request_sent: the node may have stored it; never resent, counted apart
                    if getattr(exc, "request_sent", False):
                        unknown += table.num_rows
                    else:
                        failed += table.num_rows
                    print(f"append to {topic}/{partition} failed: {exc}", file=sys.stderr)
                    continue
                acked[topic] += span.end - span.start
                sums[topic] += latency_sum
            tick += 1
            now = time.monotonic()
            if now >= next_report:
                next_report += 10
                print(
                    json.dumps({"seconds": round(now - t0, 1), "acknowledged": acked}), flush=True
                )
            # steady: batch k of each topic starts at t0 + k * interval
            time.sleep(max(0.0, t0 + tick * interval - time.monotonic()))
    seconds = time.monotonic() - t0
    total = sum(acked.values())
    report: dict[str, Any] = {
        "done": True,
        "produced": produced,
        "acknowledged": total,
        "unknown": unknown,
        "failed": failed,
        "seconds": round(seconds, 1),
        "rows_per_second": round(total / seconds, 1),
        "topics": {t: {"rows": acked[t], "sum_latency_ms": sums[t]} for t in topics},
    }
    print(json.dumps(report), flush=True)
    return 0 if failed == unknown == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
