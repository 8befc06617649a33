"""One partition: its single writer, its open segment and its list of sealed segments.

Invariants (all under ``self.lock``):

* ``next_index`` is the index the next appended row gets; it only grows.
* ``sealed`` is sorted by index; each element's rows are in a complete file
  named by a committed manifest row.
* ``sealing`` holds the segments handed to the background sealer, oldest first,
  at most ``SEALING_QUEUE`` of them. Only the first is being sealed: one seal
  at a time per partition, in index order, so ``sealed`` stays sorted; each
  seal, once committed, submits the next. When the open segment is full while
  the queue is full, the append is refused whole (``Busy``, HTTP 429): that is
  the load shedding. The memory budget bounds what all queues hold together.
* Readers see ``sealed``, then ``sealing``, then the durable rows of ``open``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from plateau.protocol.errors import Busy, InsufficientStorage, NotFound
from plateau.protocol.topic_config import SegmentConfig
from plateau.protocol.values import Span
from plateau.storage.catalog.locks import Rank, ranked
from plateau.storage.catalog.manifest import Manifest, SegmentRow
from plateau.storage.catalog.memory import MemoryBudget
from plateau.storage.catalog.progress import Progress
from plateau.storage.data.column_codecs import ColumnPlan, CompressionStats
from plateau.storage.data.durable_io import make_dirs
from plateau.storage.data.ipc_messages import Encoded
from plateau.storage.data.open_segment import WRITE_BUFFER, OpenSegment, time_bounds_ms
from plateau.storage.data.recycle import Recycler
from plateau.storage.data.sealed_writer import parquet_column_bytes
from plateau.storage.data.validation import TIME
from plateau.storage.metrics import APPEND_STAGE_SECONDS, SEAL_SECONDS, WRITE_AHEAD_FILES
from plateau.storage.sealing import REWRITES_AT_ONCE, seal_segment
from plateau.storage.types import Index, WritePolicy

log = logging.getLogger(__name__)
SCHEMA_CHANGE_WAIT = 5.0  # seconds an append with a new schema waits for room in the queue
SEALING_QUEUE = 2
"""Segments a partition may have handed to the sealer: one being sealed, one waiting.

With one, a partition whose next segment filled before its last seal finished
refused appends (429) although the node had memory and CPU to spare: four
partitions filling at the same rate roll together, and with Parquet two of their
seals wait for ``REWRITES_AT_ONCE``. A second place lets the append go on into a
new segment while the seals catch up; the memory budget (``MemoryBudget``) still
bounds the open and sealing segments of all partitions together."""
_STAGE_ENCODE = APPEND_STAGE_SECONDS.labels(stage="encode")
_STAGE_WRITE = APPEND_STAGE_SECONDS.labels(stage="write")
_STAGE_DURABLE = APPEND_STAGE_SECONDS.labels(stage="durable")


@dataclass(frozen=True)
class PartitionView:
    """What a reader may see, captured under the lock and read without it."""

    sealed: list[SegmentRow]
    pending: list[tuple[OpenSegment, int]]  # (sealing or open segment, visible rows)
    start: Index
    end: Index


@dataclass(frozen=True)
class PartitionContext:
    """What every partition of an engine shares."""

    data_dir: Path
    manifest: Manifest
    sealer: Executor
    on_sealed: Callable[[str], None]
    policy: WritePolicy
    memory: MemoryBudget
    progress: Progress
    # seals that write a new file (Parquet): CPU and memory for the encoding, so fewer at
    # once than the sealer has threads (``engine.SEALER_THREADS``); a leaf, held by a
    # sealer thread with no lock
    rewrites: threading.Semaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(REWRITES_AT_ONCE)
    )
    # kept write-ahead files of parquet topics (``recycle``); None: always deleted
    recycler: Recycler | None = None


class Partition:
    def __init__(
        self,
        topic: str,
        name: str,
        ctx: PartitionContext,
        next_index: Index,
        sealed: list[SegmentRow],
    ) -> None:
        self.topic = topic
        self.name = name
        self.data_dir = ctx.data_dir
        self.directory = ctx.data_dir / "topics" / topic / name
        self.lock = ranked(Rank.PARTITION, f"partition {topic}/{name}")
        self._sealed = threading.Condition(self.lock)
        self.next_index = next_index
        self.sealed = sealed
        self.open: OpenSegment | None = None
        self.sealing: list[OpenSegment] = []  # handed to the sealer, oldest (being sealed) first
        self.seal_error: BaseException | None = None
        self.deleted = False
        self._manifest = ctx.manifest
        self._sealer = ctx.sealer
        self._rewrites = ctx.rewrites
        self._recycler = ctx.recycler
        self._on_sealed = ctx.on_sealed
        self._relaxed = ctx.policy.relaxed
        self._drop_pages = ctx.policy.drop_written_pages
        self._direct = ctx.policy.direct
        # read and replaced without the lock: a plan is immutable, and two appends that both
        # find it stale only sample twice
        self._plan: ColumnPlan | None = None
        self._plan_stale = True
        self.compression = CompressionStats()
        self._memory = ctx.memory
        self._progress = ctx.progress

    # --- writing ----------------------------------------------------------------
    def append(
        self,
        table: pa.Table,
        config: SegmentConfig,
        archived: bool = False,
        messages: Sequence[pa.Message] | None = None,
        nbytes: int | None = None,
    ) -> Span:
        """Write all rows of ``table`` into the open segment and wait until durable.

        ``messages``: the table's batches as the client encoded them (an Arrow IPC body
        decoded without change); they are written as they came where no column is
        compressed, instead of being encoded again. Encoding, compression and the time
        bounds are computed here, before the partition lock: only the ``writev`` is under it.

        ``archived``: the topic's segments will be uploaded, so a new segment keeps its
        written pages cached (the uploader reads the sealed file once, then drops them):
        dropped, every byte was read back from the disk, which halved the ingest rate.

        ``nbytes``: ``table.nbytes``, when the caller has it already.
        """
        started = time.perf_counter()
        if nbytes is None:
            nbytes = table.nbytes
        encoded, plan = self._encode(table, config, messages)
        bounds = time_bounds_ms(table.column(TIME))  # CPU work: outside the lock
        encoded_at = time.perf_counter()
        _STAGE_ENCODE.observe(encoded_at - started)
        deadline = time.monotonic() + SCHEMA_CHANGE_WAIT
        seg: OpenSegment | None = None
        with self.lock:
            while True:
                if self.deleted:
                    raise NotFound(f"topic {self.topic!r} was deleted")
                seg = self.open
                if seg is None:
                    break
                changed = (
                    not seg.writable or not seg.schema.equals(table.schema) or seg.config != config
                )
                if not changed and not seg.would_overflow(table.num_rows, nbytes):
                    break
                if changed and self._queue_full() and self.seal_error is None:
                    # not load: a new schema or config just needs the sealer to finish
                    left = deadline - time.monotonic()
                    if left > 0:
                        self._sealed.wait(left)
                        continue
                self._roll_locked()
                seg = None
                break
            # 429 when open segments fill their share; a new segment also brings its file's
            # write buffer
            charge = nbytes + (WRITE_BUFFER if seg is None else 0)
            self._memory.charge(charge)
            try:
                if seg is None:
                    seg = self._new_segment_locked(table.schema, config, archived)
                seq = seg.append(table, encoded, bounds, nbytes)
            except BaseException:
                self._memory.release(charge, sealing=False)
                raise
            seg.charged += charge
            start = self.next_index
            self.next_index = Index(start + table.num_rows)
        written = time.perf_counter()
        _STAGE_WRITE.observe(written - encoded_at)
        self._count(plan, encoded)
        if not self._relaxed:
            seg.commit.wait(seq)
            _STAGE_DURABLE.observe(time.perf_counter() - written)
        return Span(start, start + table.num_rows)

    def _encode(
        self, table: pa.Table, config: SegmentConfig, messages: Sequence[pa.Message] | None
    ) -> tuple[list[Encoded], ColumnPlan]:
        """The table's messages as the open file will hold them (``column_codecs``)."""
        if messages is None:
            messages = [pa.ipc.read_message(b.serialize()) for b in table.to_batches()]
        plan = self._plan
        if plan is None or self._plan_stale or not plan.fits(table.schema, config):
            plan = ColumnPlan.choose(table.schema, config, messages[0])
            self._plan, self._plan_stale = plan, False
        return [plan.encode(m) for m in messages], plan

    def _count(self, plan: ColumnPlan, encoded: list[Encoded]) -> None:
        if plan.config.format != "arrow":
            return  # a parquet topic's codecs are counted at seal, from its Parquet file
        names = plan.schema.names
        codecs = [plan.codec_of(i) for i in range(len(names))]
        for e in encoded:
            self.compression.add(names, codecs, e.raw_by_column, e.stored_by_column)

    def _count_parquet(self, path: Path, seg: OpenSegment) -> None:
        """A parquet topic's bytes per column, from its sealed file's footer."""
        table = seg.table()
        codecs, raw, stored = parquet_column_bytes(path, table)
        self.compression.add(table.schema.names, codecs, raw, stored)

    def _new_segment_locked(
        self, schema: pa.Schema, config: SegmentConfig, archived: bool = False
    ) -> OpenSegment:
        make_dirs(self.directory)
        self._plan_stale = True  # each segment samples its columns anew
        seg_id = self._manifest.open_segment(self.topic, self.name, config.format, self.next_index)
        try:
            self.open = OpenSegment.create(
                seg_id,
                self.next_index,
                schema,
                config,
                self.directory,
                self._drop_pages and not archived,
                self._direct and not archived,
                self._recycler,
            )
        except BaseException:
            # volume full before the schema was written: leave no half file, no open row
            (self.directory / OpenSegment.file_name(self.next_index, seg_id)).unlink(
                missing_ok=True
            )
            self._manifest.drop_segment(seg_id)
            raise
        return self.open

    def _queue_full(self) -> bool:
        return len(self.sealing) >= SEALING_QUEUE

    def _roll_locked(self) -> None:
        """Hand the open segment to the sealer; 429 (or 507) while its queue is full."""
        seg = self.open
        if seg is None:
            return
        if self._queue_full() or (self.sealing and self.seal_error is not None):
            if isinstance(self.seal_error, OSError) and self.seal_error.errno == 28:
                raise InsufficientStorage(
                    f"partition {self.topic}/{self.name}: volume full, cannot seal segment"
                )
            raise Busy(
                f"partition {self.topic}/{self.name} is busy: the open segment is full "
                "and the previous ones are still being sealed",
                retry_after=1.0,
            )
        self.open = None
        if seg.rows == 0:
            self._discard_empty(seg)
            return
        if self._hand_to_sealer_locked(seg):
            self._sealer.submit(self._seal, seg)

    def _hand_to_sealer_locked(self, seg: OpenSegment) -> bool:
        """Queue ``seg``; True if it is first, so the caller seals it (else its turn comes)."""
        self.sealing.append(seg)
        self._memory.handed_to_sealer(seg.charged)
        return len(self.sealing) == 1

    def _is_sealing(self, seg: OpenSegment) -> bool:
        return any(s is seg for s in self.sealing)

    def _release(self, seg: OpenSegment) -> None:
        """Return the segment's rows to the memory budget, once (it is sealed or dropped)."""
        charged, seg.charged = seg.charged, 0
        self._memory.release(charged, sealing=self._is_sealing(seg))

    def _discard_empty(self, seg: OpenSegment) -> None:
        seg.finish_file()
        seg.path.unlink(missing_ok=True)
        self._manifest.drop_segment(seg.id)

    def roll_early(self) -> int:
        """Hand the open segment to the sealer before it is full (memory is short).

        Returns the bytes handed over; 0 when a seal is already running here or
        nothing is open (the next call, after that seal, will take it): handing over
        more frees nothing sooner, the partition's seals run one at a time.
        """
        with self.lock:
            seg = self.open
            if seg is None or self.sealing or seg.rows == 0 or self.deleted:
                return 0
            self.open = None
            first = self._hand_to_sealer_locked(seg)
        if first:
            self._sealer.submit(self._seal, seg)
        return seg.charged

    def _retire_write_ahead(self, path: Path) -> None:
        """A sealed parquet segment's write-ahead file: kept for a later segment, or deleted."""
        if self._recycler is None or not self._recycler.give(path):
            path.unlink(missing_ok=True)
            WRITE_AHEAD_FILES.labels("deleted").inc()

    def _seal(self, seg: OpenSegment) -> None:
        """Background: seal ``seg`` (first in the queue), then each one queued behind it."""
        follow: OpenSegment | None = seg
        while follow is not None:
            follow = self._seal_one(follow)

    def _seal_one(self, seg: OpenSegment) -> OpenSegment | None:
        """Make ``seg`` a sealed file, commit it, let readers switch to it; returns the next
        segment to seal (None: the queue is empty, the seal failed, or the topic is going)."""
        started = time.perf_counter()
        with self._progress.track(f"seal {self.topic}/{self.name}"):
            try:
                row = seal_segment(self.topic, self.name, self.data_dir, seg, self._rewrites)
                self._manifest.seal_segment(row)
                if row.format == "parquet":
                    self._count_parquet(self.data_dir / row.path, seg)
                    self._retire_write_ahead(seg.path)
                else:  # renamed to its sealed name, or (rewritten from memory) left over
                    seg.path.unlink(missing_ok=True)
            except BaseException as exc:
                log.exception("sealing %s failed; will retry", seg.path)
                with self.lock:
                    self.seal_error = exc
                    self._sealed.notify_all()
                return None
            SEAL_SECONDS.labels(seg.config.format).observe(time.perf_counter() - started)
            with self.lock:
                self.sealed.append(row)
                self._release(seg)
                assert self.sealing and self.sealing[0] is seg, "seals run in queue order"
                self.sealing.pop(0)
                self.seal_error = None
                # the next in the queue, unless the topic is being deleted (abort drops it)
                follow = self.sealing[0] if self.sealing and not self.deleted else None
                self._sealed.notify_all()
            self._on_sealed(self.topic)
        return follow

    def retry_failed_seal(self) -> None:
        """Try a failed seal again; clearing the error first makes one thread the retrier."""
        with self.lock:
            failed = self.seal_error is not None and not self.deleted and self.sealing
            seg = self.sealing[0] if failed else None
            self.seal_error = None
        if seg is not None:
            self._seal(seg)

    def roll_if_old(self, now: float) -> None:
        with self.lock:
            if self.open is not None and not self.sealing and self.open.too_old(now):
                self._roll_locked()

    def flush(self) -> None:
        """Sync the open segment (relaxed durability's timer)."""
        seg = self.open
        if seg is not None:
            # sealed or closed meanwhile: its own seal synced it
            with contextlib.suppress(RuntimeError, ValueError, OSError):
                seg.commit.wait(seg.rows)

    def close(self) -> None:
        """Seal the open segment synchronously (clean shutdown leaves nothing open).

        A seal that keeps failing (volume full) is given up after a few tries:
        its ``.open`` file stays, and recovery seals it on the next start.
        """
        for _ in range(3000):
            with self.lock:
                busy = bool(self.sealing)
                failed = self.seal_error is not None
                if not busy:
                    seg, self.open = self.open, None
                    break
            if failed:
                self.retry_failed_seal()
                with self.lock:
                    if self.seal_error is not None:
                        raise RuntimeError(f"cannot seal {self.topic}/{self.name}") from (
                            self.seal_error
                        )
            time.sleep(0.01)
        else:
            raise RuntimeError(f"timed out waiting for {self.topic}/{self.name} to seal")
        if seg is None:
            return
        if seg.rows == 0:
            self._discard_empty(seg)
            return
        with self.lock:
            self._hand_to_sealer_locked(seg)  # the queue is empty: it is first
        self._seal(seg)

    def abort(self) -> None:
        """Stop writing without sealing (topic deletion); wait for a seal under way.

        After this returns nothing touches the partition's files or manifest rows
        any more: appends get NotFound, and a seal that was running has committed
        (or failed), so the caller may delete both.
        """
        with self.lock:
            self.deleted = True  # a seal under way submits no next one
            seg, self.open = self.open, None
            if seg is not None:
                self._release(seg)
            queued = self.sealing[1:]  # never started: dropped with the topic
            for q in queued:
                self._release(q)
            del self.sealing[1:]
            while self.sealing and self.seal_error is None:
                self._sealed.wait()
            if self.sealing:  # its seal failed: it is deleted with the topic
                self._release(self.sealing[0])
                self.sealing.clear()
        for left in ([seg] if seg is not None else []) + queued:
            left.abort()

    def open_bytes(self) -> int:
        """Bytes of the open segment not yet handed to the sealer (a racy read: a hint)."""
        seg = self.open
        return seg.charged if seg is not None and not self.sealing else 0

    # --- reading ----------------------------------------------------------------
    def view(self) -> PartitionView:
        with self.lock:
            pending = [
                (seg, seg.rows if self._relaxed else seg.commit.synced)
                for seg in (*self.sealing, self.open)
                if seg is not None
            ]
            sealed = list(self.sealed)
        start = (
            sealed[0].first_index
            if sealed
            else (pending[0][0].first_index if pending else self.next_index)
        )
        end = (
            Index(pending[-1][0].first_index + pending[-1][1])
            if pending
            else (sealed[-1].end_index if sealed else self.next_index)
        )
        return PartitionView(sealed, pending, Index(start), end)

    def remove_sealed(self, row: SegmentRow) -> None:
        with self.lock:
            self.sealed = [s for s in self.sealed if s.id != row.id]
