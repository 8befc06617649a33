"""``plateau spark-conf``: the Spark-on-Kubernetes settings of a job that reads a node."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import yaml

from plateau.cli.common import fail
from plateau.spark.kube.conf import MOUNT_PATH
from plateau.spark.kube.job import SERVICE_ACCOUNT


def spark_conf(
    node: Annotated[str, typer.Option(help="The PlateauNode (or StatefulSet) to read.")],
    namespace: Annotated[str, typer.Option(help="Its namespace, where the job runs.")],
    mode: Annotated[
        str,
        typer.Option(
            help="path: mount the node's volume read-only (no token needed); url: read "
            "over the node's Service, with its read token from its Secret as $PLATEAU_TOKEN "
            "and its address as $PLATEAU_URL (no volume, pods run anywhere).",
        ),
    ] = "path",
    mount_path: Annotated[
        str,
        typer.Option(help="Where Spark's pods see the volume (the reader's 'path'; path mode)."),
    ] = MOUNT_PATH,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="conf (spark-submit --conf lines), properties or "
            "sparkapplication (Kubeflow spark-operator fragment).",
        ),
    ] = "conf",
    pod_template_out: Annotated[
        Path | None,
        typer.Option(
            help="Where to write the pod template with the node affinity (path mode; "
            "conf, properties); default ./plateau-NODE-pod-template.yaml."
        ),
    ] = None,
    service_account: Annotated[
        str,
        typer.Option(
            help="The driver pod's ServiceAccount (the chart's spark.jobNamespaces "
            "creates plateau-spark)."
        ),
    ] = SERVICE_ACCOUNT,
    sizing: Annotated[
        bool,
        typer.Option(
            "--sizing/--no-sizing",
            help="Size the driver and executors for the Kubernetes nodes seen "
            "(needs list nodes); --no-sizing: Spark's own defaults, or the sizes given.",
        ),
    ] = True,
    executor_instances: Annotated[
        int | None, typer.Option(min=1, help="spark.executor.instances (default: sized).")
    ] = None,
    driver_memory: Annotated[
        str | None, typer.Option(help="spark.driver.memory, e.g. 512m, 2g (default: sized).")
    ] = None,
    executor_memory: Annotated[
        str | None, typer.Option(help="spark.executor.memory (default: sized).")
    ] = None,
    driver_request_cores: Annotated[
        str | None,
        typer.Option(help="spark.kubernetes.driver.request.cores, e.g. 0.25 (default: sized)."),
    ] = None,
    executor_request_cores: Annotated[
        str | None,
        typer.Option(help="spark.kubernetes.executor.request.cores (default: sized)."),
    ] = None,
    kubeconfig: Annotated[str | None, typer.Option(envvar="KUBECONFIG")] = None,
    context: Annotated[str | None, typer.Option(help="The kubeconfig context.")] = None,
) -> None:
    """Print the Spark-on-Kubernetes settings of a job that reads a node: spark.master
    (the kubeconfig's API server), cluster mode, the driver's ServiceAccount, requests
    that fit the nodes, and the node's volume mounted read-only (--mode path) or its
    Service with the read token from its Secret (--mode url; the token itself is never
    read nor printed). A node with an archive (spec.archive) adds the S3A settings of
    its bucket, the keys by reference to the node's own Secret, and $PLATEAU_ARCHIVE."""
    from plateau.spark.kube import conf as kubeconf
    from plateau.spark.kube import job as kubejob
    from plateau.spark.kube import sizing as kubesizing
    from plateau.spark.kube.archive_conf import archive_comments, archive_from_node

    if fmt not in kubeconf.FORMATS:
        fail(f"--format must be one of {', '.join(kubeconf.FORMATS)}, not {fmt!r}")
    if mode not in kubeconf.MODES:
        fail(f"--mode must be one of {', '.join(kubeconf.MODES)}, not {mode!r}")
    if mode == "url" and pod_template_out is not None:
        fail("--pod-template-out is for --mode path: url mode mounts nothing, pins nothing")
    try:
        given = kubesizing.overrides(
            instances=executor_instances,
            driver_memory=driver_memory,
            executor_memory=executor_memory,
            driver_cores=driver_request_cores,
            executor_cores=executor_request_cores,
        )
    except kubesizing.SizingError as exc:
        fail(str(exc))
    comments: list[str] = []
    try:
        api = kubeconf.connect(kubeconfig, context)
        archive = archive_from_node(namespace, node, api.plateau_node(node, namespace))
        more = archive_comments(archive) if archive else []
        if mode == "url":
            access = kubeconf.fetch_access(node, namespace, kubeconfig, context, api)
            job = kubejob.job(api, namespace, context, service_account, None, sizing, given)
            text = kubeconf.render_url(access, fmt, job, archive)
            comments = kubeconf.url_comments(access) + more
        else:
            place = kubeconf.fetch(node, namespace, kubeconfig, context, api)
            host = place.host if place.needs_affinity else None
            job = kubejob.job(api, namespace, context, service_account, host, sizing, given)
            template = None
            if fmt != "sparkapplication" and place.needs_affinity:
                target = pod_template_out or Path(f"plateau-{node}-pod-template.yaml")
                target.write_text(yaml.safe_dump(kubeconf.pod_template(place), sort_keys=False))
                template = str(target.resolve())
            text = kubeconf.render(place, fmt, mount_path, template, job, archive)
            comments = kubeconf.comments(place, mount_path) + more
    except kubeconf.SparkConfError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write the pod template: {exc}")
    if fmt == "conf":  # stdout is only the arguments, for $(plateau spark-conf ...)
        for line in comments + kubejob.job_comments(job):
            typer.echo(f"# {line}", err=True)
    else:
        for warning in job.warnings:
            typer.echo(f"warning: {warning}", err=True)
    typer.echo(text, nl=False)
