"""The topics and partitions of a node: created, changed and deleted one at a time.

Structural changes (a topic created, its config changed, a partition added,
a topic deleted) write the manifest, so they take ``admin_lock`` for their
whole length; nothing on the data path waits for it except the first append
to a new topic or partition. The dicts themselves are guarded by leaf locks
(``topics_lock``, a topic's ``lock``) held only to read or change the dict.
See ``plateau.storage.catalog.locks`` for the order.

Who owns a topic is decided under ``admin_lock`` too, together with the
write (``plateau.storage.catalog.ownership``): a refused claim changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from plateau.protocol.errors import Conflict, NotFound, OverBudget, PartitionsDecrease
from plateau.protocol.names import check_name
from plateau.protocol.replies import TopicPutReply
from plateau.protocol.topic_config import TopicConfig, TopicConfigRequest, TopicOwner
from plateau.storage.catalog.locks import Rank, ranked
from plateau.storage.catalog.manifest import Manifest, SegmentRow
from plateau.storage.catalog.ownership import Claimed, check_delete, decide
from plateau.storage.metrics import TOPIC_BUDGET_BYTES
from plateau.storage.partition import Partition
from plateau.storage.types import Index

PartitionFactory = Callable[[str, str, Index, list[SegmentRow]], Partition]


class ArchiveNotConfigured(Conflict):
    """``archive.enabled`` on a node without ``storage.archive.url``: nothing to upload to."""

    reason = "ArchiveNotConfigured"


@dataclass
class Topic:
    name: str
    config: TopicConfig  # config and owner: changed together under ``lock`` (see ``state``)
    owner: TopicOwner | None = None
    partitions: dict[str, Partition] = field(default_factory=dict)
    lock: Any = field(default_factory=lambda: ranked(Rank.TOPIC, "topic"))  # the dict only
    retention_lock: Any = field(default_factory=lambda: ranked(Rank.RETENTION, "retention"))
    deleted: bool = False  # set under retention_lock by Catalog.delete
    # set under retention_lock by each retention pass: (segments, bytes) retention must keep
    # for the archive (archive-required topic over its limits); read without a lock by appends
    archive_held: tuple[int, int] | None = None

    def state(self) -> tuple[TopicConfig, TopicOwner | None]:
        """Config and owner as one PUT left them (never one from before it, one from after)."""
        with self.lock:
            return self.config, self.owner

    def by_name(self) -> dict[str, Partition]:
        with self.lock:
            return dict(self.partitions)

    def all(self) -> list[Partition]:
        with self.lock:
            return list(self.partitions.values())


@dataclass(frozen=True)
class PutResult:
    """What a ``PUT /admin/topics/{t}`` did: the resolved config and the owner decision."""

    config: TopicConfig
    created: bool
    claimed: Claimed

    def reply(self) -> TopicPutReply:
        """The PUT's reply: the resolved config, the owner and how the request stood to it."""
        return TopicPutReply(
            **dict(self.config),
            owner=self.claimed.owner,
            claim=self.claimed.claim,
            previous_owner=self.claimed.previous_owner,
        )


class Catalog:
    def __init__(
        self,
        manifest: Manifest,
        defaults: TopicConfig,
        make_partition: PartitionFactory,
        capacity: Callable[[], tuple[int, int]],
        data_dir: Path,
        archive_url: str | None = None,
    ) -> None:
        self._manifest = manifest
        self._archive_url = archive_url
        self._defaults = defaults
        self._make_partition = make_partition
        self._capacity = capacity
        self._data_dir = data_dir
        self.admin_lock = ranked(Rank.ADMIN, "catalog.admin")
        self._topics_lock = ranked(Rank.TOPICS, "catalog.topics")
        self._topics: dict[str, Topic] = {}

    def load(self, recovered: dict[tuple[str, str], list[SegmentRow]]) -> None:
        """The topics the manifest holds, with the sealed segments recovery found."""
        owners = self._manifest.owners()
        for name, config in self._manifest.topics().items():
            topic = Topic(name, config, owners.get(name))
            for pname, next_index in self._manifest.partitions(name).items():
                topic.partitions[pname] = self._make_partition(
                    name, pname, next_index, recovered.get((name, pname), [])
                )
            self._topics[name] = topic
            TOPIC_BUDGET_BYTES.labels(name).set(config.retention.max_bytes)

    # --- reading the catalog ------------------------------------------------------
    def names(self) -> list[str]:
        with self._topics_lock:
            return sorted(self._topics)

    def current(self) -> list[Topic]:
        with self._topics_lock:
            return list(self._topics.values())

    def find(self, topic: str) -> Topic | None:
        with self._topics_lock:
            return self._topics.get(topic)

    def get(self, topic: str) -> Topic:
        check_name("topic", topic)
        t = self.find(topic)
        if t is None:
            raise NotFound(f"topic {topic!r} does not exist")
        return t

    def all_partitions(self) -> list[Partition]:
        return [p for t in self.current() for p in t.all()]

    # --- changing it (under admin_lock) ---------------------------------------------
    def put(self, topic: str, request: TopicConfigRequest) -> tuple[Topic, PutResult]:
        """Create or update; 409 (nothing changed) for another owner's topic, fewer
        partitions, or a raised budget that does not fit."""
        with self.admin_lock:
            return self._put_locked(topic, request)

    def ensure(self, topic: str) -> Topic:
        """The topic, created with the defaults if it does not exist (auto-creation).

        Its partitions are only the ones appends name, as in plateau: numbered
        partitions made up front ("0") would show in its spans and cursors
        holding nothing.
        """
        with self.admin_lock:
            t = self.find(topic)
            if t is not None:
                return t
            return self._put_locked(topic, TopicConfigRequest(), numbered=False)[0]

    def _put_locked(
        self, topic: str, request: TopicConfigRequest, numbered: bool = True
    ) -> tuple[Topic, PutResult]:
        existing = self.find(topic)
        base, stored = existing.state() if existing else (self._defaults, None)
        claimed = decide(topic, existing is not None, stored, request.owner, request.adopt)
        config = request.apply_to(base, self._defaults)
        if config.archive.enabled and not self._archive_url and not base.archive.enabled:
            raise ArchiveNotConfigured(
                f"topic {topic!r}: archive.enabled needs the node's storage.archive.url "
                "(PLATEAU_STORAGE__ARCHIVE__URL, s3://bucket/prefix), which this node does "
                "not have; nothing was changed"
            )
        if existing is not None and config.partitions < base.partitions:
            raise PartitionsDecrease(
                f"topic {topic!r} has {base.partitions} partitions and partitions "
                f"never decrease (asked: {config.partitions}); records stay at their indexes"
            )
        # Only a new or raised budget must fit: a node over its limit (reserve raised,
        # volume shrunk) still takes the same config, or a cut on the way back under it.
        if existing is None or config.retention.max_bytes > base.retention.max_bytes:
            self._check_budget(topic, config)
        names = [str(i) for i in range(config.partitions)] if numbered else []
        next_indexes = self._manifest.put_topic(topic, config, claimed.owner, names)
        t = existing or Topic(topic, config)
        have = set(t.by_name())
        added = {
            p: self._make_partition(topic, p, next_indexes[p], []) for p in names if p not in have
        }
        with t.lock:
            t.config = config
            t.owner = claimed.owner
            t.partitions.update(added)
        with self._topics_lock:
            self._topics[topic] = t
        TOPIC_BUDGET_BYTES.labels(topic).set(config.retention.max_bytes)
        return t, PutResult(config, existing is None, claimed)

    def _check_budget(self, topic: str, config: TopicConfig) -> None:
        cap, reserve = self._capacity()
        others = sum(t.config.retention.max_bytes for t in self.current() if t.name != topic)
        allowed = cap - reserve
        if others + config.retention.max_bytes > allowed:
            raise OverBudget(
                f"topic {topic!r} budget of {config.retention.max_bytes} bytes does not fit: "
                f"node capacity {cap} minus reserve {reserve} leaves {allowed - others} bytes "
                f"beside the {others} bytes allocated to other topics"
            )

    def partition(self, t: Topic, partition: str) -> Partition:
        """The partition, created on the first append that names it."""
        with t.lock:
            p = t.partitions.get(partition)
        if p is not None:
            return p
        with self.admin_lock:  # a new partition: rare, and a manifest write
            if t.deleted:
                raise NotFound(f"topic {t.name!r} was deleted")
            with t.lock:
                p = t.partitions.get(partition)
            if p is None:
                next_index = self._manifest.add_partition(t.name, partition)
                p = self._make_partition(t.name, partition, next_index, [])
                with t.lock:
                    t.partitions[partition] = p
            return p

    def delete(
        self, topic: str, owner_uid: str | None = None
    ) -> tuple[list[Partition], Path | None]:
        """Remove the topic from the catalog and the manifest; returns its partitions and
        the directory its files were moved to (the caller removes it, outside any lock).

        With ``owner_uid``, only if that owner holds the topic (else 409, nothing
        deleted): an owner's finalizer never deletes a topic another owner took.
        Its partitions' next indexes stay in the manifest, so a topic created
        again under the name continues from them: an index is never reused.
        """
        check_name("topic", topic)
        with self.admin_lock:
            t = self.find(topic)  # only this method removes topics, under admin_lock
            if t is None:
                raise NotFound(f"topic {topic!r} does not exist")
            check_delete(topic, t.owner, owner_uid)  # raises with nothing removed
            with self._topics_lock:
                del self._topics[topic]
            with t.retention_lock:
                t.deleted = True
                parts = t.all()
                for p in parts:
                    p.abort()  # no append or seal touches its files after this
                self._manifest.delete_topic(topic, {p.name: p.next_index for p in parts})
                return parts, _move_to_trash(self._data_dir / "topics" / topic)


def _move_to_trash(directory: Path) -> Path | None:
    """Rename a deleted topic's directory away at once; it is removed outside any lock.

    A topic created again under the same name gets a fresh directory, which the
    slow removal cannot touch. Recovery removes a trash directory left by a crash
    (its name is no topic name).
    """
    if not directory.exists():
        return None
    trash = directory.with_name(f".deleted-{directory.name}-{uuid.uuid4().hex}")
    directory.rename(trash)
    return trash
