"""``python -m plateau_operator.uninstall``: stop the operator, then release its finalizers.

The chart runs this as a ``pre-delete`` hook Job, before Helm deletes the
operator. Without it, every PlateauTopic (and PlateauNode) would keep the
finalizer ``plateau.dev/finalizer`` with no operator left to remove it, and a
later deletion of one of them, or of its namespace, would hang for ever.

1. Scale the operator's Deployment to 0 and wait (bounded) until no operator
   pod runs: a running operator would put each finalizer straight back.
2. Remove the finalizer from every PlateauTopic and PlateauNode in the watched
   namespaces (``PLATEAU_OPERATOR_NAMESPACE``, comma-separated; empty: all).
   Each patch tests the finalizer list it read, so a concurrent change to it is
   read again rather than overwritten; an object deleted meanwhile is skipped.

Nothing is deleted: the resources stay, topics keep their data on their nodes,
nodes keep their volume claims. Prints one line per released object and a
summary; exits 0, or 2 with a message on stderr (bad arguments, the API
server's refusal, an operator pod still there at the deadline).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

GROUP, VERSION = "plateau.dev", "v1alpha1"
FINALIZER = f"{GROUP}/finalizer"
# Topics first: a topic's finalizer is the one that guards data on a node.
PLURALS = ("plateautopics", "plateaunodes")
DEFAULT_DEPLOYMENT = "plateau-operator"
# The chart's pod selector, for when the Deployment is already gone.
DEFAULT_SELECTOR = "app.kubernetes.io/name=plateau-operator"
EXIT_ERROR = 2
_ENDED = ("Succeeded", "Failed")  # pod phases that run nothing any more


class UninstallError(Exception):
    """A reason to stop with exit code 2; the message says what to do."""


@dataclass(frozen=True)
class Options:
    deployment: str
    namespace: str  # the operator's own
    watched: list[str]  # empty: every namespace
    timeout: float
    skip_scale: bool


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _parse(argv: Sequence[str] | None) -> Options:
    env = os.environ.get
    parser = argparse.ArgumentParser(
        prog="python -m plateau_operator.uninstall",
        description="Stop the plateau operator and remove its finalizer from every "
        "PlateauTopic and PlateauNode it watches. Deletes nothing.",
    )
    parser.add_argument(
        "--deployment",
        default=env("PLATEAU_OPERATOR_DEPLOYMENT", DEFAULT_DEPLOYMENT),
        help="the operator's Deployment (env PLATEAU_OPERATOR_DEPLOYMENT; default %(default)s)",
    )
    parser.add_argument(
        "--namespace",
        default=env("PLATEAU_OPERATOR_POD_NAMESPACE", ""),
        help="the Deployment's namespace (env PLATEAU_OPERATOR_POD_NAMESPACE)",
    )
    parser.add_argument(
        "--watch-namespaces",
        default=env("PLATEAU_OPERATOR_NAMESPACE", ""),
        help="comma-separated namespaces to release (env PLATEAU_OPERATOR_NAMESPACE); "
        "empty: every namespace",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="seconds to wait for the operator's pods to be gone (default %(default)s)",
    )
    parser.add_argument(
        "--skip-scale",
        action="store_true",
        help="do not touch a Deployment: the operator is already stopped (for example, "
        "it ran outside the cluster)",
    )
    args = parser.parse_args(argv)
    if not args.timeout > 0:
        parser.error("--timeout must be a positive number of seconds")
    if not args.skip_scale and not (args.deployment and args.namespace):
        parser.error(
            "the operator's Deployment needs a name and a namespace "
            "(--deployment, --namespace or PLATEAU_OPERATOR_POD_NAMESPACE), or --skip-scale"
        )
    return Options(
        deployment=args.deployment,
        namespace=args.namespace,
        watched=_split(args.watch_namespaces),
        timeout=args.timeout,
        skip_scale=args.skip_scale,
    )


def _api() -> client.ApiClient:
    """In the cluster (the hook Job) the pod's ServiceAccount, else ``KUBECONFIG``."""
    # the client's config loaders carry no annotations
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


def _dict(answer: object) -> dict[str, Any]:
    """The custom-objects API answers ``object``: a JSON object, decoded."""
    if not isinstance(answer, dict):
        raise UninstallError(f"the API server answered {type(answer).__name__}, not an object")
    return answer


def _selector(match_labels: dict[str, str] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((match_labels or {}).items()))


def stop_operator(api: client.ApiClient, opts: Options, say: Callable[[str], None]) -> None:
    """Scale the Deployment to 0 and wait until none of its pods runs."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    where = f"{opts.namespace}/{opts.deployment}"
    try:
        deploy = apps.read_namespaced_deployment(opts.deployment, opts.namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        selector = DEFAULT_SELECTOR
        say(f"deployment {where} not found; waiting for pods {selector} only")
    else:
        selector = _selector(deploy.spec.selector.match_labels) or DEFAULT_SELECTOR
        was = deploy.spec.replicas
        # the scale subresource: the only write this needs on the Deployment
        apps.patch_namespaced_deployment_scale(
            opts.deployment,
            opts.namespace,
            {"spec": {"replicas": 0}},
            _content_type="application/merge-patch+json",
        )
        say(f"scaled deployment {where} to 0 (was {was})")
    deadline = time.monotonic() + opts.timeout
    while True:
        pods = core.list_namespaced_pod(opts.namespace, label_selector=selector).items
        # a pod that has ended runs no handler; a terminating one still may
        running = sorted(
            str(p.metadata.name if p.metadata else "?")
            for p in pods
            if not (p.status and p.status.phase in _ENDED)
        )
        if not running:
            say(f"no operator pod runs in {opts.namespace}")
            return
        if time.monotonic() >= deadline:
            raise UninstallError(
                f"operator pods still present after {opts.timeout:g}s: {', '.join(running)}; "
                f"no finalizer was removed. The Deployment {where} is left at 0 replicas: "
                "run this again once they are gone, or scale it back up to keep the operator"
            )
        time.sleep(1.0)


def _items(custom: client.CustomObjectsApi, plural: str, watched: list[str]) -> list[Any]:
    if not watched:
        return list(_dict(custom.list_cluster_custom_object(GROUP, VERSION, plural))["items"])
    items: list[Any] = []
    for ns in watched:
        items += _dict(custom.list_namespaced_custom_object(GROUP, VERSION, ns, plural))["items"]
    return items


def _release(custom: client.CustomObjectsApi, plural: str, obj: dict[str, Any]) -> bool:
    """Remove the finalizer from one object; False when it had none (or is gone).

    A JSON patch that first tests the list it read: a finalizer another
    controller added or removed meanwhile is never overwritten (the test fails
    with 422, and the object is read again).
    """
    meta = obj["metadata"]
    ns, name = meta["namespace"], meta["name"]
    for _ in range(10):
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            return False
        remaining = [f for f in finalizers if f != FINALIZER]
        patch = [
            {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
            {"op": "replace", "path": "/metadata/finalizers", "value": remaining},
        ]
        try:
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, ns, plural, name, patch,
                _content_type="application/json-patch+json",
            )  # fmt: skip
            return True
        except ApiException as exc:
            if exc.status == 404:
                return False
            if exc.status not in (409, 422):
                raise
        try:
            got = custom.get_namespaced_custom_object(GROUP, VERSION, ns, plural, name)
            meta = _dict(got)["metadata"]
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
    raise UninstallError(f"{plural} {ns}/{name}: its finalizers keep changing; run this again")


def release_finalizers(
    api: client.ApiClient, watched: list[str], say: Callable[[str], None]
) -> dict[str, int]:
    """Release every PlateauTopic and PlateauNode in ``watched``; counts by plural."""
    custom = client.CustomObjectsApi(api)
    counts = {}
    for plural in PLURALS:
        counts[plural] = 0
        for obj in _items(custom, plural, watched):
            if _release(custom, plural, obj):
                counts[plural] += 1
                meta = obj["metadata"]
                say(f"released {plural} {meta['namespace']}/{meta['name']}")
    return counts


def run(opts: Options, say: Callable[[str], None] = print) -> None:
    api = _api()
    if not opts.skip_scale:
        stop_operator(api, opts, say)
    counts = release_finalizers(api, opts.watched, say)
    scope = ",".join(opts.watched) or "all namespaces"
    say(
        f"released {counts['plateautopics']} PlateauTopic(s) and "
        f"{counts['plateaunodes']} PlateauNode(s) in {scope}; nothing deleted: "
        "topics keep their data, nodes keep their volume claims"
    )


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parse(argv)  # argparse exits 2 on a bad argument
    try:
        run(opts, lambda line: print(line, flush=True))
    except UninstallError as exc:
        print(f"plateau uninstall: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except ApiException as exc:
        print(f"plateau uninstall: the API server refused: {exc.status} {exc.reason}: "
              f"{str(exc.body or '')[:500]}", file=sys.stderr)  # fmt: skip
        return EXIT_ERROR
    except (config.ConfigException, HTTPError, OSError) as exc:
        print(f"plateau uninstall: cannot reach the API server: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
