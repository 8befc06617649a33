"""``plateau spark-conf``: Spark-on-Kubernetes settings for reading a node.

Two modes, as the readers have. ``path`` (the default) mounts the node's volume.
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

``url`` reads over the node's Service instead: no volume, so no affinity, and
the open segment is visible. Reads need the node's read token; the settings put
it in ``$PLATEAU_TOKEN`` of the driver and executors through a reference to the
Secret (``secretKeyRef``: the kubelet resolves it when it starts the pod), and
the node's address in the driver's ``$PLATEAU_URL``. The command never reads the
Secret, so the token cannot reach its output. Source: the ``PlateauNode``
(``status.tokenSecret``, ``status.endpoint``; the operator's names when the
status has none yet).

Both modes add what any job on Kubernetes needs (``Job``): the API server of
the kubeconfig as ``spark.master``, cluster mode, the namespace, the driver's
ServiceAccount (the chart's ``spark.jobNamespaces`` creates ``plateau-spark``),
requests that fit the nodes seen (``kubesizing``), and the settings that make a
failed driver visible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from plateau.spark.kube.archive_conf import (
    ArchiveAccess,
    add_to_spec,
    archive_comments,
    archive_settings,
)
from plateau.spark.kube.job import Job, job_comments, job_settings, job_spec

VOLUME = "plateau-data"
MOUNT_PATH = "/plateau/data"  # where the pods see the volume by default (path mode)
FORMATS = ("conf", "properties", "sparkapplication")
MODES = ("path", "url")
SHARED_MODES = {"ReadWriteMany", "ReadOnlyMany"}
TOKEN_ENV = "PLATEAU_TOKEN"  # the readers' default token (plateau.spark.options)
URL_ENV = "PLATEAU_URL"  # as the plateau CLI's --url
READ_TOKEN_KEY = "readToken"  # the operator's key for the read token in the node's Secret
PORT = 3030


class _NoAliases(yaml.SafeDumper):
    """Plain YAML: a dict used twice is written twice, never as ``&id001``/``*id001``."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_NoAliases, sort_keys=False)


class SparkConfError(Exception):
    """What the user must fix; printed as one line, exit code 2."""


def _merge(spec: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    out = dict(spec)
    for key, value in more.items():
        out[key] = {**out[key], **value} if isinstance(value, dict) and key in out else value
    return out


def _text(fmt: str, pairs: dict[str, str], comments: list[str], spec: dict[str, Any],
          namespace: str) -> str:  # fmt: skip
    """``conf`` (spark-submit arguments, no comments, so that ``$(plateau spark-conf ...)``
    pastes), ``properties`` (with comments) or a ``SparkApplication`` fragment."""
    if fmt == "conf":
        return "".join(f"--conf {k}={v}\n" for k, v in pairs.items())
    if fmt == "properties":
        lines = [f"# {c}" for c in comments] + [f"{k}={v}" for k, v in pairs.items()]
        return "\n".join(lines) + "\n"
    if fmt == "sparkapplication":
        head = "".join(f"# {c}\n" for c in comments)
        head += f"# merge into a sparkoperator.k8s.io/v1beta2 SparkApplication in {namespace}\n"
        return head + dump({"spec": spec})
    raise SparkConfError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")


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
        f'read with plateau.spark.read_topic(spark, path="{mount}", topic=...); '
        f'an arrow topic or a stream: spark.read.format("plateau").option("path", "{mount}")',
    ]


def render(
    p: VolumePlacement,
    fmt: str,
    mount: str,
    template_path: str | None,
    job: Job | None = None,
    archive: ArchiveAccess | None = None,
) -> str:
    """The text to print for ``--mode path`` in ``fmt`` (see ``_text``); with the node's
    archive's S3A settings when it has one."""
    job = job or Job(p.namespace, None, None)
    pairs = {**job_settings(job), **settings(p, mount, template_path)}
    pairs |= archive_settings(archive) if archive else {}
    roles: dict[str, dict[str, Any]] = {}
    for role in ("driver", "executor"):  # one dict each: no shared object, no YAML alias
        roles[role] = {"volumeMounts": [{"name": VOLUME, "mountPath": mount, "readOnly": True}]}
        if p.needs_affinity:
            roles[role]["affinity"] = affinity(p)
    spec = _merge(job_spec(job), {
        "volumes": [
            {"name": VOLUME, "persistentVolumeClaim": {"claimName": p.claim, "readOnly": True}}
        ],
        **roles,
    })  # fmt: skip
    return _text(
        fmt,
        pairs,
        comments(p, mount)
        + (archive_comments(archive) if archive else [])
        + job_comments(job, fmt != "sparkapplication"),
        add_to_spec(spec, archive) if archive else spec,
        p.namespace,
    )


@dataclass(frozen=True)
class NodeAccess:
    """How a job reaches a node over HTTP: its address, and where its read token lives."""

    namespace: str
    node: str
    url: str
    secret: str
    key: str = READ_TOKEN_KEY


def access_from_objects(
    namespace: str, node: str, plateau_node: dict[str, Any] | None, statefulset_exists: bool
) -> NodeAccess:
    """The node's address and token Secret from its ``PlateauNode`` (``None``: not found)."""
    if plateau_node is None:
        if statefulset_exists:
            raise SparkConfError(
                f"--mode url needs a PlateauNode, and {namespace}/{node} is a StatefulSet "
                f"deployed without the operator: give the reader its url and token yourself"
            )
        raise SparkConfError(f"no PlateauNode named {node!r} in namespace {namespace!r}")
    status = plateau_node.get("status") or {}
    url = status.get("endpoint") or f"http://plateau-{node}.{namespace}.svc:{PORT}"
    secret = status.get("tokenSecret") or f"plateau-{node}-token"
    return NodeAccess(namespace, node, url, secret)


def url_settings(a: NodeAccess) -> dict[str, str]:
    """``secretKeyRef``: the pods get the token from the Secret, the settings only its name."""
    ref = f"{a.secret}:{a.key}"
    return {
        "spark.kubernetes.namespace": a.namespace,  # a secretKeyRef names a Secret of the pod's
        f"spark.kubernetes.driver.secretKeyRef.{TOKEN_ENV}": ref,
        f"spark.kubernetes.executor.secretKeyRef.{TOKEN_ENV}": ref,
        f"spark.kubernetes.driverEnv.{URL_ENV}": a.url,
    }


def url_comments(a: NodeAccess) -> list[str]:
    return [
        f"plateau node {a.namespace}/{a.node} at {a.url}: ${URL_ENV} in the driver",
        f"read token: key {a.key} of Secret {a.secret} (namespace {a.namespace}), as "
        f"${TOKEN_ENV} in the driver and executors; the readers take it from there",
        f'read with plateau.spark.read_topic(spark, url=os.environ["{URL_ENV}"], topic=...)',
    ]


def render_url(
    a: NodeAccess, fmt: str, job: Job | None = None, archive: ArchiveAccess | None = None
) -> str:
    """``render`` for ``--mode url``: the same three formats."""
    job = job or Job(a.namespace, None, None)
    pairs = {**job_settings(job), **url_settings(a)}
    pairs |= archive_settings(archive) if archive else {}
    token = {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": {"name": a.secret, "key": a.key}}}
    spec = _merge(job_spec(job), {
        "driver": {"env": [{"name": URL_ENV, "value": a.url}, dict(token)]},
        "executor": {"env": [dict(token)]},
    })  # fmt: skip
    return _text(
        fmt,
        pairs,
        url_comments(a)
        + (archive_comments(archive) if archive else [])
        + job_comments(job, fmt != "sparkapplication"),
        add_to_spec(spec, archive) if archive else spec,
        a.namespace,
    )


class _Api:
    """The API server, through a kubeconfig or the pod's service account."""

    def __init__(self, kubeconfig: str | None, context: str | None) -> None:
        import warnings

        import urllib3
        from kubernetes import client, config
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
        self.api = client.ApiClient()
        self.core = client.CoreV1Api(self.api)
        self.apps = client.AppsV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def get(self, call: Any, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        import urllib3
        from kubernetes.client.exceptions import ApiException

        try:
            obj = call(*args, _request_timeout=15, **kwargs)
        except ApiException as e:
            if e.status == 404:
                return None
            raise SparkConfError(f"the API server refused ({e.status}): {e.reason}") from None
        except (OSError, urllib3.exceptions.HTTPError) as e:
            raise SparkConfError(f"cannot reach the API server: {e}") from None
        return obj if isinstance(obj, dict) else self.api.sanitize_for_serialization(obj)

    def plateau_node(self, node: str, namespace: str) -> dict[str, Any] | None:
        return self.get(self.custom.get_namespaced_custom_object, "plateau.dev", "v1alpha1",
                        namespace, "plateaunodes", node)  # fmt: skip

    def master(self) -> str:
        """``spark.master`` for this API server: Spark wants the port even when it is 443."""
        from urllib.parse import urlsplit

        host = str(self.api.configuration.host).rstrip("/")
        url = urlsplit(host)
        if url.port is None and url.hostname:
            host = f"{url.scheme}://{url.netloc}:{443 if url.scheme == 'https' else 80}{url.path}"
        return f"k8s://{host}"

    def nodes(self) -> tuple[list[dict[str, Any]] | None, str]:
        """The cluster's Node objects, or ``None`` and why (typically: no right to list them)."""
        from kubernetes.client.exceptions import ApiException

        try:
            listed = self.get(self.core.list_node)
        except SparkConfError as e:
            return None, str(e)
        except ApiException as e:  # pragma: no cover - get turns these into SparkConfError
            return None, str(e.reason)
        return list((listed or {}).get("items") or []), ""

    def pods(self, host: str | None) -> list[dict[str, Any]] | None:
        """The unfinished pods of every namespace (on ``host`` alone when given), or ``None``
        without the right to list them."""
        fields = "status.phase!=Succeeded,status.phase!=Failed"
        if host:
            fields += f",spec.nodeName={host}"
        try:
            listed = self.get(self.core.list_pod_for_all_namespaces, field_selector=fields)
        except SparkConfError:
            return None
        return list((listed or {}).get("items") or [])

    def service_account_missing(self, name: str, namespace: str) -> bool:
        """True only when the API server says so (no right to look: not reported)."""
        try:
            return self.get(self.core.read_namespaced_service_account, name, namespace) is None
        except SparkConfError:
            return False


def connect(kubeconfig: str | None, context: str | None) -> _Api:
    """The API server of ``kubeconfig`` (or ``$KUBECONFIG``, or the pod's service account)."""
    return _Api(kubeconfig, context)


def fetch(
    node: str, namespace: str, kubeconfig: str | None, context: str | None, api: _Api | None = None
) -> VolumePlacement:
    """Read the objects from the API server (kubeconfig, or the pod's service account)."""
    k = api or _Api(kubeconfig, context)
    get, core = k.get, k.core
    pn = k.plateau_node(node, namespace)
    sts_name = f"plateau-{node}" if pn is not None else node
    sts = None if pn is not None else get(k.apps.read_namespaced_stateful_set, node, namespace)
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


def fetch_access(
    node: str, namespace: str, kubeconfig: str | None, context: str | None, api: _Api | None = None
) -> NodeAccess:
    """The ``PlateauNode`` alone (``get plateaunodes``): its Secret is named, never read."""
    k = api or _Api(kubeconfig, context)
    pn = k.plateau_node(node, namespace)
    sts = None
    if pn is None:
        try:  # only to say why url mode cannot serve a node made by hand
            sts = k.get(k.apps.read_namespaced_stateful_set, node, namespace)
        except SparkConfError:
            sts = None  # typically no right to read StatefulSets: not needed otherwise
    return access_from_objects(namespace, node, pn, sts is not None)


def _in_cluster() -> bool:
    import os

    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not os.environ.get("KUBECONFIG")
