"""What every Spark job on Kubernetes needs, whatever it reads: the API server of the
kubeconfig as ``spark.master``, cluster mode, the namespace, the driver's
ServiceAccount (the chart's ``spark.jobNamespaces`` creates ``plateau-spark``),
requests that fit the nodes seen (``kubesizing``), and the settings that make a
failed driver visible. ``plateau spark-conf`` prints them with the read settings
of ``kubeconf``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from plateau.spark.kube import sizing as kubesizing

SERVICE_ACCOUNT = "plateau-spark"  # the chart's spark.serviceAccount.name
# spark-submit (cluster mode) waits for the driver to end and prints its final state;
# a failed driver's exception is kept in the pod's annotation spark.exit-exception.
# spark-submit 4.x exits 0 whatever the driver's end: check the pod's phase (docs/spark.md).
FAIL_FAST = {
    "spark.kubernetes.submission.waitAppCompletion": "true",
    "spark.kubernetes.driver.annotateExitException": "true",
}


class ClusterView(Protocol):
    """What sizing a job asks of the API server (``kubeconf``'s client is one): declared
    here so that this module needs nothing of ``kubeconf``, which imports it."""

    def master(self) -> str: ...

    def nodes(self) -> tuple[list[dict[str, Any]] | None, str]: ...

    def pods(self, host: str | None) -> list[dict[str, Any]] | None: ...

    def service_account_missing(self, name: str, namespace: str) -> bool: ...


@dataclass(frozen=True)
class Job:
    """What a job needs whatever it reads: where it is submitted, as whom, how big."""

    namespace: str
    master: str | None  # k8s://https://host:port, from the kubeconfig
    context: str | None  # the kubeconfig context, when not the current one
    service_account: str = SERVICE_ACCOUNT
    sizing: tuple[tuple[str, str], ...] = ()  # Spark's keys (none: --no-sizing)
    notes: tuple[str, ...] = ()  # comments: the sizing's basis
    warnings: tuple[str, ...] = ()  # what may stop the job: also on stderr in every format


def job_settings(j: Job) -> dict[str, str]:
    out = {}
    if j.master:
        out["spark.master"] = j.master
    out["spark.submit.deployMode"] = "cluster"
    if j.context:
        out["spark.kubernetes.context"] = j.context
    out["spark.kubernetes.namespace"] = j.namespace
    out["spark.kubernetes.authenticate.driver.serviceAccountName"] = j.service_account
    out.update(j.sizing)
    out.update(FAIL_FAST)
    return out


def job_comments(j: Job, submit: bool = True) -> list[str]:
    """What the settings mean; ``submit``: for spark-submit (not the spark-operator)."""
    out = [
        f"driver's ServiceAccount {j.namespace}/{j.service_account} (the chart's "
        f"spark.jobNamespaces creates plateau-spark)",
        *j.notes,
        *(f"warning: {w}" for w in j.warnings),
    ]
    if submit:
        out.append("spark-submit exits 0 even when the driver fails: check the driver pod's phase")
    return out


def job_spec(j: Job) -> dict[str, Any]:
    """The job's part of a ``SparkApplication`` spec (the operator submits it itself)."""
    roles = kubesizing.sparkapplication(dict(j.sizing))
    return {
        "mode": "cluster",
        "sparkConf": {"spark.kubernetes.driver.annotateExitException": "true"},
        "driver": {"serviceAccount": j.service_account, **roles.get("driver", {})},
        "executor": roles.get("executor", {}),
    }


def job(
    api: ClusterView,
    namespace: str,
    context: str | None,
    service_account: str,
    host: str | None,
    sizing: bool,
    given: dict[str, str],
) -> Job:
    """The job's settings: sized for the nodes (``host`` alone when the pods are pinned
    there) unless ``sizing`` is off, then the sizes the user gave (``given``) on top."""
    notes: list[str] = []
    warnings: list[str] = []
    sized: dict[str, str] = {}
    if sizing:
        objects, why = api.nodes()
        if objects is None:
            warnings.append(f"cannot list the Kubernetes nodes ({why}): sized small; "
                            f"give --no-sizing or the sizes")  # fmt: skip
            choice = kubesizing.FALLBACK
        else:
            nodes = [kubesizing.capacity_from_node(n) for n in objects]
            pods = api.pods(host)
            if pods is not None:  # what the pods there request is taken: only the rest counts
                used = kubesizing.pod_requests(pods)
                nodes = [replace(n, requested=used.get(n.name, (0, 0))) for n in nodes]
            choice = kubesizing.choose(nodes, host)
            (warnings if choice.warn else notes).append(choice.note)
        sized = kubesizing.settings(choice)
    sized.update(given)
    if api.service_account_missing(service_account, namespace):
        warnings.append(
            f"no ServiceAccount {namespace}/{service_account}: add {namespace} to the "
            f"chart's spark.jobNamespaces, or give --service-account"
        )
    return Job(namespace, api.master(), context, service_account, tuple(sized.items()),
               tuple(notes), tuple(warnings))  # fmt: skip
