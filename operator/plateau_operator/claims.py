"""Which volume claim and which token Secret are a node's own, and who owns the Secret.

A node's claim ``data-plateau-<n>-0`` is made by its StatefulSet from the
claim template, with the operator's labels; with ``retainVolume`` it outlives
the PlateauNode. The token Secret then belongs to that claim (its owner
reference), so it lives exactly as long as the data: a PlateauNode re-created
on its kept claim takes the same tokens back and its producers keep working,
and deleting the claim deletes the tokens with it. The operator takes back
only a Secret it made: the operator's labels for this node, controlled by this
PlateauNode or by the node's own claim. Pure functions over objects as read.
"""

from __future__ import annotations

from typing import Any

from plateau_operator import resources
from plateau_operator.kube import controller_of
from plateau_operator.spec import NodeSpec


def uid_of(obj: dict[str, Any] | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("uid")


def controller_uid(obj: dict[str, Any] | None) -> str | None:
    return (controller_of(obj) or {}).get("uid") if obj else None


def claim_is_ours(pvc: dict[str, Any], node: str) -> bool:
    """A claim made from this node's claim template (now or before, retained) carries the
    node's labels."""
    labels = (pvc.get("metadata") or {}).get("labels") or {}
    return all(str(labels.get(k)) == v for k, v in resources.selector(node).items())


def secret_is_ours(secret: dict[str, Any], node_uid: str, pvc: dict[str, Any] | None,
                   node: str) -> bool:  # fmt: skip
    """The node's token Secret: controlled by this PlateauNode, or, kept with a retained
    claim, by the node's claim, carrying the operator's labels for this node."""
    ref = controller_of(secret) or {}
    if ref.get("uid") == node_uid:
        return True
    labels = (secret.get("metadata") or {}).get("labels") or {}
    return (
        pvc is not None
        and ref.get("kind") == "PersistentVolumeClaim"
        and ref.get("uid") == uid_of(pvc)
        and claim_is_ours(pvc, node)
        and resources.labels(node).items() <= labels.items()
    )


def token_keeper(spec: NodeSpec, pvc: dict[str, Any] | None) -> dict[str, Any] | None:
    """The claim that owns the token Secret: the node's own, kept (``retainVolume``), not
    being deleted. None: the Secret is the PlateauNode's (no claim yet, or it goes with
    the node)."""
    if not spec.retain_volume or pvc is None or not claim_is_ours(pvc, spec.name):
        return None
    return None if (pvc.get("metadata") or {}).get("deletionTimestamp") else pvc
