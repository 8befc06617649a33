"""The operator's API names, written once: group, version, kinds, annotations, finalizer.

Every other module (handlers, builders, status, the uninstall hook) takes
these from here, so a version bump or a renamed annotation is one edit.
"""

from __future__ import annotations

GROUP = "plateau.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
NODE_KIND, NODE_PLURAL = "PlateauNode", "plateaunodes"
TOPIC_KIND, TOPIC_PLURAL = "PlateauTopic", "plateautopics"

FINALIZER = f"{GROUP}/finalizer"  # on PlateauTopics only (see docs/operator.md)
FIELD_MANAGER = "plateau-operator"

# Annotations a user sets on a custom resource.
PAUSED_ANNOTATION = f"{GROUP}/paused"  # "true": no reconcile of this resource
ADOPT_ANNOTATION = f"{GROUP}/adopt"  # "true": a PlateauTopic takes over a topic it does not own
ENDPOINT_ANNOTATION = f"{GROUP}/endpoint"  # honoured only with allowEndpointOverride
FOLLOW_IMAGE_ANNOTATION = f"{GROUP}/follow-operator-image"  # rollout mode "opt-in"

# Annotations the operator writes on the children it makes.
CHECKSUM_ANNOTATION = f"{GROUP}/config-checksum"


def truthy(value: object) -> bool:
    return str(value).lower() in ("true", "1", "yes")


def annotation(meta: dict[str, object], key: str) -> bool:
    """A boolean annotation of ``meta`` (``"true"``, ``"1"``, ``"yes"``)."""
    annotations = meta.get("annotations") or {}
    return truthy(annotations.get(key, "")) if isinstance(annotations, dict) else False
