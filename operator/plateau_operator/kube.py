"""The operator's access to the API server: server-side apply, reads, Secrets.

One field manager (``plateau-operator``) owns every field the operator sets,
so a user's or a GitOps tool's own fields on the same objects are left alone,
and applying the same desired state twice changes nothing.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

FIELD_MANAGER = "plateau-operator"


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

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply of ``obj`` (its metadata names it)."""
        res = self._resource(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        out = res.server_side_apply(
            body=obj,
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
        )
        result: dict[str, Any] = out.to_dict()
        return result

    def get(self, api_version: str, kind: str, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            out = self._resource(api_version, kind).get(name=name, namespace=namespace)
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
        )

    def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        data = (secret.data or {}).get(key)
        return base64.b64decode(data).decode() if data is not None else None


def new_token() -> str:
    return secrets.token_urlsafe(32)
