"""``plateau spark-conf``: Spark-on-Kubernetes settings that mount a node's volume.

A node's volume is usually ReadWriteOnce: any number of pods may mount it, but
only on the Kubernetes node where it is attached. So Spark's driver and
executors need the claim mounted read-only *and* a required node affinity to
the node's host. This module turns the objects the API server returns into
those settings. It imports no PySpark, so the command works without the
``spark`` extra.

Sources, in order: the ``PlateauNode`` (its StatefulSet ``plateau-<name>``,
claim ``data-plateau-<name>-0``, ``status.hostNode``), or, for a node
deployed without the operator, a StatefulSet of that name (its first claim
template, its pod ``<name>-0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

VOLUME = "plateau-data"
DEFAULT_MOUNT = "/plateau/data"
FORMATS = ("conf", "properties", "sparkapplication")
SHARED_MODES = {"ReadWriteMany", "ReadOnlyMany"}


class SparkConfError(Exception):
    """What the user must fix; printed as one line, exit code 2."""


@dataclass(frozen=True)
class VolumePlacement:
    """Where a node's data lives: the claim, its access modes, the host it is attached to."""

    namespace: str
    node: str
    claim: str
    access_modes: tuple[str, ...]
    host: str | None

    @property
    def needs_affinity(self) -> bool:
        return not (set(self.access_modes) & SHARED_MODES)


def placement_from_objects(
    namespace: str,
    node: str,
    plateau_node: dict[str, Any] | None,
    statefulset: dict[str, Any] | None,
    claim: dict[str, Any] | None,
    pod: dict[str, Any] | None,
) -> VolumePlacement:
    """The placement from what the API server returned (``None``: not found)."""
    if plateau_node is not None:
        claim_name = f"data-plateau-{node}-0"
        host = (plateau_node.get("status") or {}).get("hostNode")
    elif statefulset is not None:
        templates = (statefulset.get("spec") or {}).get("volumeClaimTemplates") or []
        if not templates:
            raise SparkConfError(
                f"StatefulSet {namespace}/{node} has no volumeClaimTemplates: "
                f"its data is not on a claim Spark could mount"
            )
        claim_name = f"{templates[0]['metadata']['name']}-{node}-0"
        host = None
    else:
        raise SparkConfError(
            f"no PlateauNode or StatefulSet named {node!r} in namespace {namespace!r}"
        )
    if host is None and pod is not None:
        host = (pod.get("spec") or {}).get("nodeName")
    if claim is None:
        raise SparkConfError(f"the volume claim {namespace}/{claim_name} does not exist yet")
    modes = tuple((claim.get("spec") or {}).get("accessModes") or ())
    result = VolumePlacement(namespace, node, claim_name, modes, host)
    if result.needs_affinity and not host:
        raise SparkConfError(
            f"the pod of {node!r} is not scheduled yet, so the Kubernetes node holding its "
            f"ReadWriteOnce volume is unknown; try again once it runs"
        )
    return result


def settings(p: VolumePlacement, mount: str, template_path: str | None) -> dict[str, str]:
    out = {"spark.kubernetes.namespace": p.namespace}
    for role in ("driver", "executor"):
        prefix = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.{VOLUME}"
        out[f"{prefix}.options.claimName"] = p.claim
        out[f"{prefix}.mount.path"] = mount
        out[f"{prefix}.mount.readOnly"] = "true"
    if template_path and p.needs_affinity:
        for role in ("driver", "executor"):
            out[f"spark.kubernetes.{role}.podTemplateFile"] = template_path
    return out


def affinity(p: VolumePlacement) -> dict[str, Any]:
    """Required placement on the volume's host, by node name (labels can differ from it)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [p.host]}]}
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]
        }}
    }  # fmt: skip


def pod_template(p: VolumePlacement) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "spec": {"affinity": affinity(p)}}


def comments(p: VolumePlacement, mount: str) -> list[str]:
    where = (
        f"on Kubernetes node {p.host} ({', '.join(p.access_modes) or 'ReadWriteOnce'})"
        if p.needs_affinity
        else f"({', '.join(p.access_modes)}: any Kubernetes node, no affinity needed)"
    )
    return [
        f"plateau node {p.namespace}/{p.node}: claim {p.claim} {where}",
        f'read it with spark.read.format("plateau").option("path", "{mount}")',
    ]


def render(p: VolumePlacement, fmt: str, mount: str, template_path: str | None) -> str:
    """The text to print: ``conf`` (spark-submit arguments), ``properties`` or a
    ``SparkApplication`` fragment. ``conf`` carries no comments, so that
    ``$(plateau spark-conf ...)`` can be pasted into a command line."""
    if fmt == "conf":
        pairs = settings(p, mount, template_path)
        return "\n".join(f"--conf {k}={v}" for k, v in pairs.items()) + "\n"
    if fmt == "properties":
        lines = [f"# {c}" for c in comments(p, mount)]
        lines += [f"{k}={v}" for k, v in settings(p, mount, template_path).items()]
        return "\n".join(lines) + "\n"
    if fmt == "sparkapplication":
        mount_ = {"name": VOLUME, "mountPath": mount, "readOnly": True}
        role: dict[str, Any] = {"volumeMounts": [mount_]}
        if p.needs_affinity:
            role["affinity"] = affinity(p)
        spec = {
            "volumes": [
                {"name": VOLUME, "persistentVolumeClaim": {"claimName": p.claim, "readOnly": True}}
            ],
            "driver": role,
            "executor": role,
        }
        head = "".join(f"# {c}\n" for c in comments(p, mount))
        head += f"# merge into a sparkoperator.k8s.io/v1beta2 SparkApplication in {p.namespace}\n"
        return head + yaml.safe_dump({"spec": spec}, sort_keys=False)
    raise SparkConfError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")


def fetch(
    node: str, namespace: str, kubeconfig: str | None, context: str | None
) -> VolumePlacement:
    """Read the objects from the API server (kubeconfig, or the pod's service account)."""
    import warnings

    import urllib3
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    # a kubeconfig that skips TLS verification chose to (kubectl does not warn either)
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)

    try:
        if kubeconfig or context or not _in_cluster():
            config.load_kube_config(config_file=kubeconfig, context=context)
        else:
            config.load_incluster_config()
    except (ConfigException, OSError) as e:
        raise SparkConfError(f"no Kubernetes configuration: {e}") from None
    api = client.ApiClient()

    def get(call: Any, *args: Any) -> dict[str, Any] | None:
        try:
            obj = call(*args, _request_timeout=15)
        except ApiException as e:
            if e.status == 404:
                return None
            raise SparkConfError(f"the API server refused ({e.status}): {e.reason}") from None
        except (OSError, urllib3.exceptions.HTTPError) as e:
            raise SparkConfError(f"cannot reach the API server: {e}") from None
        return obj if isinstance(obj, dict) else api.sanitize_for_serialization(obj)

    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    custom = client.CustomObjectsApi(api)
    pn = get(custom.get_namespaced_custom_object, "plateau.dev", "v1alpha1", namespace,
             "plateaunodes", node)  # fmt: skip
    sts_name = f"plateau-{node}" if pn is not None else node
    sts = None if pn is not None else get(apps.read_namespaced_stateful_set, node, namespace)
    claim_name = (
        f"data-plateau-{node}-0"
        if pn is not None
        else (
            f"{sts['spec']['volumeClaimTemplates'][0]['metadata']['name']}-{node}-0"
            if sts and (sts.get("spec") or {}).get("volumeClaimTemplates")
            else None
        )
    )
    claim = (
        get(core.read_namespaced_persistent_volume_claim, claim_name, namespace)
        if claim_name
        else None
    )
    pod = get(core.read_namespaced_pod, f"{sts_name}-0", namespace) if (pn or sts) else None
    return placement_from_objects(namespace, node, pn, sts, claim, pod)


def _in_cluster() -> bool:
    import os

    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")
