"""The operator's access to the API server: owned applies, reads, status, Events, Secrets.

One field manager (``plateau-operator``) owns every field the operator sets,
so a user's or a GitOps tool's own fields on the same objects are left alone,
and applying the same desired state twice changes nothing. The operator never
takes over an object it did not make: ``apply_owned`` first reads the object
and refuses (``NotOwned``) one whose controller is not the custom resource
it reconciles. Secrets are only ever read by name (no list, no watch).
"""

from __future__ import annotations

import base64
import secrets
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from plateau_operator.crd import FIELD_MANAGER, GROUP

REQUEST_TIMEOUT = 30  # seconds, every API call: a reconcile never waits forever


class NotOwned(Exception):
    """An object with a child's name exists and is not the reconciled resource's."""

    def __init__(self, kind: str, name: str, owner: str) -> None:
        super().__init__(f"{kind} {name!r} exists and is not this resource's ({owner}): left alone")
        self.kind, self.name = kind, name


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """The owner reference that makes a child go with its owner (garbage collection).

    ``blockOwnerDeletion`` only for the operator's own kinds: on another kind (a
    node's volume claim owns its token Secret) it would need ``update`` on that
    kind's ``finalizers`` where the OwnerReferencesPermissionEnforcement admission
    plugin runs, and nothing waits on a claim's foreground deletion.
    """
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": str(owner["apiVersion"]).startswith(f"{GROUP}/"),
    }


def _version(obj: dict[str, Any]) -> str:
    """What changes when the object's desired state does: ``generation`` where the kind
    keeps one (a StatefulSet's status updates leave it), else ``resourceVersion``."""
    meta = obj.get("metadata") or {}
    return str(meta.get("generation") or meta.get("resourceVersion") or "")


def controller_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), None)


class Kube:
    def __init__(self) -> None:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        self.api = client.ApiClient()
        self.dynamic = DynamicClient(self.api)
        self.core = client.CoreV1Api(self.api)

    def server_version(self) -> str:
        """Asks the API server now (a liveness check), with a short timeout."""
        info = client.VersionApi(self.api).get_code(_request_timeout=5)
        return str(info.git_version)

    def _resource(self, api_version: str, kind: str) -> Any:
        return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def apply_owned(
        self, obj: dict[str, Any], owner: dict[str, Any], also: tuple[str, ...] = ()
    ) -> str | None:
        """Server-side apply of ``obj`` as a child of ``owner``; ``NotOwned`` if it is another's.

        ``also``: UIDs of other controllers the object may have now (the token
        Secret moves between its node and the node's claim). ``force_conflicts``
        takes back fields another manager changed on an object the operator owns
        (its desired state wins there), never on anyone else's: the ownership
        check comes first. Returns ``"created"``, ``"changed"``, or None when the
        apply changed nothing (for the Events of what the operator did).
        """
        meta = obj["metadata"]
        existing = self.get(obj["apiVersion"], obj["kind"], meta["name"], meta["namespace"])
        uid = owner["metadata"]["uid"]
        if existing is not None:
            ref = controller_of(existing)
            if ref is None or ref.get("uid") not in (uid, *also):
                who = f"controlled by {ref['kind']} {ref['name']}" if ref else "no controller"
                raise NotOwned(obj["kind"], meta["name"], who)
        meta["ownerReferences"] = [owner_reference(owner)]
        out = self._resource(obj["apiVersion"], obj["kind"]).server_side_apply(
            body=obj,
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            _request_timeout=REQUEST_TIMEOUT,
        )
        if existing is None:
            return "created"
        return None if _version(existing) == _version(out.to_dict()) else "changed"

    def get(self, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            out = self._resource(api_version, kind).get(
                name=name, namespace=namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        result: dict[str, Any] = out.to_dict()
        return result

    def patch(
        self, api_version: str, kind: str, name: str, namespace: str, body: dict[str, Any]
    ) -> None:
        self._resource(api_version, kind).patch(
            body=body,
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
            _request_timeout=REQUEST_TIMEOUT,
        )

    def delete(self, api_version: str, kind: str, name: str, namespace: str) -> None:
        try:
            self._resource(api_version, kind).delete(
                name=name, namespace=namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def patch_status(
        self, api_version: str, kind: str, name: str, namespace: str, status: dict[str, Any]
    ) -> None:
        """Merge-patches the status subresource (lists, such as conditions, are replaced)."""
        self._resource(api_version, kind).status.patch(
            body={"status": status},
            name=name,
            namespace=namespace,
            content_type="application/merge-patch+json",
            _request_timeout=REQUEST_TIMEOUT,
        )

    def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """A Secret's values, decoded; None when it does not exist. Read by name only."""
        try:
            secret = self.core.read_namespaced_secret(
                name, namespace, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}

    @staticmethod
    def decode_secret(obj: dict[str, Any]) -> dict[str, str]:
        """The values of a Secret already read (``get``), decoded."""
        return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}

    def event(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """A Kubernetes Event on ``obj`` (``kubectl describe`` shows it)."""
        meta = obj["metadata"]
        now = datetime.now(UTC)
        body = client.CoreV1Event(
            metadata=client.V1ObjectMeta(
                generate_name=f"{meta['name']}.", namespace=meta["namespace"]
            ),
            involved_object=client.V1ObjectReference(
                api_version=obj["apiVersion"],
                kind=obj["kind"],
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta.get("uid"),
            ),
            type=type_,
            reason=reason,
            message=message[:1024],
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component=FIELD_MANAGER),
            reporting_component=FIELD_MANAGER,
        )
        self.core.create_namespaced_event(meta["namespace"], body, _request_timeout=REQUEST_TIMEOUT)


def new_token() -> str:
    return secrets.token_urlsafe(32)
