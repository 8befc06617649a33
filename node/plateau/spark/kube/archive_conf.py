"""``plateau spark-conf``'s archive part: S3A settings for a node's archive.

A ``PlateauNode`` with ``spec.archive`` uploads its archived topics' sealed
segments to an S3-compatible bucket as Parquet; a Spark job reads them with
Hadoop's S3A connector (``plateau.spark.read_topic(archive="s3a://...")`` or
``spark.read.parquet``). This module turns the node's ``spec.archive`` into
S3A's settings: the endpoint, path-style access, the region, TLS from the
endpoint's scheme, and the keys from the very Secret the node uses, given to the
driver and executors as ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` by
reference (``secretKeyRef``: the kubelet resolves them when it starts the pod).
S3A's default credential chain reads those variables, so no provider is named
(its class differs between Hadoop 3.3 and 3.4). The command never reads the
Secret: the keys cannot reach its output. The archive's location goes to the
driver as ``$PLATEAU_ARCHIVE`` (``s3a://bucket/prefix``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

ARCHIVE_ENV = "PLATEAU_ARCHIVE"  # s3a://bucket/prefix, in the driver
KEY_ENVS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
S3A = "spark.hadoop.fs.s3a."
S3A_CLASSPATH = "/opt/plateau/s3a-jars/*"
"""Where plateau's Spark image keeps the S3A connector. Not on Spark's own classpath:
the AWS SDK bundle there cost every job about 170 MB of driver memory, so only a job
that reads the archive adds it (``spark.{driver,executor}.extraClassPath``)."""
CLASSPATH_KEYS = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")


@dataclass(frozen=True)
class ArchiveAccess:
    """Where a node's archive is, and which Secret holds its keys."""

    namespace: str
    node: str
    bucket: str
    prefix: str
    endpoint: str | None  # None: AWS for the region
    region: str
    path_style: bool
    secret: str
    key_keys: tuple[str, str]  # the Secret's keys for the access key id and the secret key

    @property
    def url(self) -> str:
        """The archive's root as S3A names it: ``s3a://bucket/prefix``."""
        return f"s3a://{self.bucket}/{self.prefix}" if self.prefix else f"s3a://{self.bucket}"

    @property
    def tls(self) -> bool:
        """An ``http://`` endpoint is plain; AWS and ``https://`` use TLS."""
        return self.endpoint is None or urlsplit(self.endpoint).scheme != "http"


def archive_from_node(
    namespace: str, node: str, plateau_node: dict[str, Any] | None
) -> ArchiveAccess | None:
    """The archive of a ``PlateauNode`` as the API server returned it; None without one
    (no ``spec.archive``, or not a PlateauNode)."""
    archive = ((plateau_node or {}).get("spec") or {}).get("archive")
    if not archive or not archive.get("bucket"):
        return None
    creds = archive.get("credentialsSecret") or {}
    return ArchiveAccess(
        namespace=namespace,
        node=node,
        bucket=str(archive["bucket"]),
        prefix=str(archive.get("prefix") or "").strip("/"),
        endpoint=archive.get("endpoint") or None,
        region=str(archive.get("region") or "us-east-1"),
        path_style=bool(archive.get("pathStyle", True)),
        secret=str(creds.get("name") or ""),
        key_keys=(
            str(creds.get("accessKeyIdKey") or KEY_ENVS[0]),
            str(creds.get("secretAccessKeyKey") or KEY_ENVS[1]),
        ),
    )


def hadoop_settings(a: ArchiveAccess) -> dict[str, str]:
    """S3A's settings without the ``spark.hadoop.`` prefix (a SparkApplication's hadoopConf)."""
    out = {}
    if a.endpoint:
        out["fs.s3a.endpoint"] = a.endpoint
    out["fs.s3a.endpoint.region"] = a.region
    out["fs.s3a.path.style.access"] = "true" if a.path_style else "false"
    out["fs.s3a.connection.ssl.enabled"] = "true" if a.tls else "false"
    return out


def archive_settings(a: ArchiveAccess) -> dict[str, str]:
    """The ``--conf`` pairs: S3A's settings, the keys by reference, the archive's url."""
    out = {f"spark.hadoop.{k}": v for k, v in hadoop_settings(a).items()}
    if a.secret:
        for env, key in zip(KEY_ENVS, a.key_keys, strict=True):
            for role in ("driver", "executor"):
                out[f"spark.kubernetes.{role}.secretKeyRef.{env}"] = f"{a.secret}:{key}"
    out[f"spark.kubernetes.driverEnv.{ARCHIVE_ENV}"] = a.url
    for key in CLASSPATH_KEYS:
        out[key] = S3A_CLASSPATH
    return out


def archive_comments(a: ArchiveAccess) -> list[str]:
    keys = (
        f"keys: {a.key_keys[0]} and {a.key_keys[1]} of Secret {a.secret} (namespace "
        f"{a.namespace}), as {' and '.join(KEY_ENVS)} in the driver and executors"
        if a.secret
        else "keys: none named (S3A's default chain)"
    )
    return [
        f"archive of {a.namespace}/{a.node}: {a.url} at {a.endpoint or 'AWS'} "
        f"(region {a.region}), ${ARCHIVE_ENV} in the driver; S3A from {S3A_CLASSPATH} "
        "(plateau's Spark image)",
        keys,
        f"read the whole history with plateau.spark.read_topic(spark, topic=..., "
        f'archive=os.environ["{ARCHIVE_ENV}"], url=... or path=...)',
    ]


def add_to_spec(spec: dict[str, Any], a: ArchiveAccess) -> dict[str, Any]:
    """A SparkApplication spec with the archive's settings added: hadoopConf, and env
    entries appended to the driver's and executors' own (never replacing them)."""
    keys = [
        {"name": env, "valueFrom": {"secretKeyRef": {"name": a.secret, "key": key}}}
        for env, key in zip(KEY_ENVS, a.key_keys, strict=True)
        if a.secret
    ]
    out = dict(spec)
    out["hadoopConf"] = {**(spec.get("hadoopConf") or {}), **hadoop_settings(a)}
    out["sparkConf"] = {
        **(spec.get("sparkConf") or {}),
        **dict.fromkeys(CLASSPATH_KEYS, S3A_CLASSPATH),
    }
    for role in ("driver", "executor"):
        part = dict(out.get(role) or {})
        extra = [dict(k) for k in keys]  # one object each: no YAML alias
        if role == "driver":
            extra.insert(0, {"name": ARCHIVE_ENV, "value": a.url})
        part["env"] = [*(part.get("env") or []), *extra]
        out[role] = part
    return out
