"""One owner per topic: who may change or delete a topic, decided with the write.

On a shared cluster two ``PlateauTopic`` resources can name the same node
topic (two teams, a copy-pasted manifest). If both were applied, each
reconcile would overwrite the other's budget and either could delete the
other's data. The node therefore records the owner of each topic and refuses
every other claimant (DESIGN.md 5.1; the existing owner wins, as in Strimzi's
topic operator). The catalog calls these functions under its ``admin_lock``,
so the decision and the manifest write are one step: two claimants racing
for a new topic cannot both win.

A request without an owner is an admin's (the CLI, a person with the write
token): it works as before ownership existed and never changes the owner.
"""

from __future__ import annotations

from dataclasses import dataclass

from plateau.protocol.errors import OwnerConflict
from plateau.protocol.replies import Claim
from plateau.protocol.topic_config import TopicOwner


@dataclass(frozen=True)
class Claimed:
    """The decision: the owner to store and, when it changed, the one it replaced."""

    claim: Claim
    owner: TopicOwner | None
    previous_owner: TopicOwner | None = None


def owner_json(owner: TopicOwner | None) -> dict[str, str] | None:
    return None if owner is None else owner.model_dump(mode="json")


def decide(
    topic: str, exists: bool, stored: TopicOwner | None, asked: TopicOwner | None, adopt: bool
) -> Claimed:
    """Whether a PUT may go ahead, and the owner the topic has after it.

    Raises ``OwnerConflict`` (409) when ``asked`` is neither the stored owner
    nor its re-creation and ``adopt`` is false; nothing is changed then.
    """
    if not exists:
        return Claimed(Claim.CREATED, asked)
    if asked is None:
        return Claimed(Claim.UNOWNED if stored is None else Claim.ADMIN, stored)
    if stored is not None and (stored.namespace, stored.name, stored.uid) == (
        asked.namespace,
        asked.name,
        asked.uid,
    ):
        return Claimed(Claim.OWNED, asked, None if asked == stored else stored)
    if stored is not None and stored.same_object(asked):
        return Claimed(Claim.RECLAIMED, asked, stored)
    if adopt:
        return Claimed(Claim.ADOPTED, asked, stored)
    if stored is None:
        message = (
            f"topic {topic!r} has no owner (made by hand or before owners were recorded); "
            f"{_describe(asked)} may claim it only with adopt: true"
        )
    else:
        message = (
            f"topic {topic!r} is owned by {_describe(stored)}; {_describe(asked)} may not "
            "change it (adopt: true takes it over)"
        )
    raise OwnerConflict(message, owner_json(stored))


def check_delete(topic: str, stored: TopicOwner | None, owner_uid: str | None) -> None:
    """A DELETE naming an owner uid goes ahead only if that owner holds the topic."""
    if owner_uid is None or (stored is not None and stored.uid == owner_uid):
        return
    raise OwnerConflict(
        f"topic {topic!r} {_held_by(stored)}, not by uid {owner_uid!r}: nothing was deleted",
        owner_json(stored),
    )


def _describe(owner: TopicOwner) -> str:
    return f"{owner.kind} {owner.namespace}/{owner.name} (uid {owner.uid})"


def _held_by(owner: TopicOwner | None) -> str:
    return "has no owner" if owner is None else f"is owned by {_describe(owner)}"
