"""bench/pyspy_stages.py: py-spy stacks land in the append stage they belong to.

Issue 28's "where the time goes" figures are only as good as this classifier:
a wait counted as work, or the framework frames above a stage claiming it,
would move the CPU per MiB to the wrong stage. The stacks are shaped as
``py-spy record --native --threads -f raw`` wrote them for the node (root
first, leaf last, then the sample count), trimmed of their outer frames.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import pyspy_stages as ps

ROOT = "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982)"
APPEND = (
    f"{ROOT};_worker (concurrent/futures/thread.py:83);"
    "_append (plateau/server/data_plane.py:216);Engine.append (plateau/storage/engine.py:300);"
    "Partition.append (plateau/storage/partition.py:125)"
)
LOOP = (
    "Runner.run (asyncio/runners.py:118);uv_run (core.c:452);"
    "RequestResponseCycle.run_asgi (uvicorn/protocols/http/httptools_impl.py:422);"
    "DataPlane._serve (plateau/server/data_plane.py:307);append (plateau/server/data_plane.py:198)"
)

FRONT = (
    f"{ROOT};AppendFront._serve (plateau/server/append_front.py:170);"
    "AppendFront._answer (plateau/server/append_front.py:300)"
)

STACKS = {
    "compression": f"thread (1): append_0;{APPEND};_encode (plateau/storage/partition.py:181);"
    "ColumnPlan.encode (plateau/storage/data/column_codecs.py:90);"
    "compressed (plateau/storage/data/ipc_messages.py:230);LZ4_compress_fast (liblz4.so.1)",
    "fsync": f"thread (2): append_1;{APPEND};"
    "GroupCommit.wait (plateau/storage/data/group_commit.py:55);"
    "_FileHandle.fsync (plateau/storage/data/open_segment.py:60);"
    "PageDropper.sync (plateau/storage/data/durable_io.py:46);"
    "os_fsync (libpython3.11.so.1.0);fsync (libc.so.6)",
    "write": f"thread (3): append_2;{APPEND};"
    "OpenSegment.append (plateau/storage/data/open_segment.py:150);"
    "IpcFileWriter.append (plateau/storage/data/ipc_file.py:70);"
    "write_all (plateau/storage/data/ipc_file.py:44);os_writev_impl (posixmodule.c)",
    "validation": f"thread (4): append_3;{ROOT};_append (plateau/server/data_plane.py:214);"
    "decode_append_messages (plateau/server/codecs.py:90);"
    "check_table (plateau/server/codecs.py:190)",
    "parse": f"thread (4): append_3;{ROOT};_append (plateau/server/data_plane.py:214);"
    "decode_append_messages (plateau/server/codecs.py:90);"
    "_table_from_ipc (plateau/server/codecs.py:120);read_record_batch (lib.cpython-311.so)",
    "bookkeeping": f"thread (5): append_0;{APPEND};MemoryBudget.charge "
    "(plateau/storage/catalog/memory.py:140);0x7f0f255278ec (libc.so.6)",
    "body": f"thread (6): MainThread;{LOOP};read_body (plateau/server/body.py:50);"
    "0x7fccf5f8bb75 (libc.so.6)",
    "body on a connection thread": f"thread (10): Thread-7;{FRONT};"
    "_read_body (plateau/server/append_front.py:330);Lease.receive "
    "(plateau/server/body_pool.py:110);fill (plateau/server/front_wire.py:95);"
    "sock_recv_into (socketmodule.c)",
    "validation on a connection thread": f"thread (10): Thread-7;{FRONT};"
    "decode_append_messages (plateau/server/codecs.py:90);"
    "check_table (plateau/server/codecs.py:190)",
    "http": f"thread (6): MainThread;{LOOP};run_sync (anyio/to_thread.py:65);"
    "Queue.put (queue.py:152);sem_post (libc.so.6)",
    "seal": "thread (7): sealer_0;_seal (plateau/storage/partition.py:280);"
    "PageDropper.sync (plateau/storage/data/durable_io.py:46);fsync (libc.so.6)",
    "idle": f"thread (8): append_1;{ROOT};_worker (concurrent/futures/thread.py:81);"
    "_queue_SimpleQueue_get_impl (_queuemodule.c);"
    "PyThread_acquire_lock_timed (libpython3.11.so.1.0);"
    "0x7f0f255278ec (libc.so.6)",
    "gil_wait": f"thread (9): append_2;{APPEND};os_fsync (libpython3.11.so.1.0);"
    "pthread_cond_timedwait (libc.so.6);0x7fccf5ea3f16 (libc.so.6)",
}


@pytest.mark.parametrize("case", sorted(STACKS))
def test_each_stack_lands_in_its_stage(case: str) -> None:
    parsed = ps.parse_raw_line(f"{STACKS[case]} 3\n")
    assert parsed is not None
    thread, frames, count = parsed
    assert count == 3
    assert ps.classify(thread, frames)[0] == case.split()[0]


def _next_request_stage(line: int, leaves: str, native: bool = True) -> str:
    """The stage of a connection thread's stack in ``_next_request`` at ``line``, with
    ``leaves`` (native frames and the sample count) below it."""
    stack = (
        f"thread (10): Thread-7;{ROOT};AppendFront._serve (plateau/server/append_front.py:170);"
        f"AppendFront._next_request (plateau/server/append_front.py:{line}){leaves}"
    )
    parsed = ps.parse_raw_line(stack)
    assert parsed is not None
    return ps.classify(parsed[0], parsed[1], native=native)[0]


@pytest.mark.parametrize("native", [True, False])
def test_a_connection_thread_waiting_for_its_next_request_is_idle(native: bool) -> None:
    leaves = ";sock_recv (socketmodule.c);recv (libc.so.6) 12" if native else " 12"
    assert _next_request_stage(230, leaves, native) == "idle"


def test_a_connection_thread_parsing_a_head_is_not_idle() -> None:
    assert _next_request_stage(240, ";llhttp_execute (x.so) 2") == "body"


def test_uvloop_epoll_is_idle_not_http() -> None:
    line = f"thread (6): MainThread;{LOOP.split(';RequestResponseCycle')[0]};"
    line += "uv__io_poll (linux.c);epoll_pwait (libc.so.6) 40"
    parsed = ps.parse_raw_line(line)
    assert parsed is not None
    assert ps.classify(parsed[0], parsed[1])[0] == "idle"


def test_python_only_waits_are_idle() -> None:
    """Without native frames the leaf Python function tells a wait."""
    line = f"thread (8): append_1;{ROOT};_worker (concurrent/futures/thread.py:81) 9"
    parsed = ps.parse_raw_line(line)
    assert parsed is not None
    assert ps.classify(parsed[0], parsed[1], native=False)[0] == "idle"


def test_cpu_is_shared_by_busy_samples_between_two_bounds() -> None:
    lines = [f"{STACKS[s]} {n}" for s, n in (("fsync", 50), ("body", 30), ("parse", 20))]
    lines += [f"{STACKS['idle']} 1000", f"{STACKS['gil_wait']} 10", "not a py-spy line"]
    profile = ps.read_profile(lines)
    assert profile.busy == 100
    table = ps.stage_table(profile, rate_hz=100, node_cpu_s=2.0, acked_mib=100.0)
    assert table["fsync"]["share"] == 0.5
    assert table["body"]["cpu_ms_per_acked_mib"] == pytest.approx(6.0)  # 0.3 * 2 s / 100 MiB
    # fsync counted as a wait: the same CPU shared by body and parse alone
    assert table["fsync"]["cpu_ms_per_acked_mib_fsync_blocked"] == 0.0
    assert table["body"]["cpu_ms_per_acked_mib_fsync_blocked"] == pytest.approx(12.0)
    assert sum(v["cpu_s"] for v in table.values()) == pytest.approx(2.0, abs=0.01)
    assert table["gil_wait"]["cpu_s"] == 0.0
    assert table["gil_wait"]["active_s"] == pytest.approx(0.1)
