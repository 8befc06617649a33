"""``read_topic`` with ``archive``: the archive's objects read by Spark's own Parquet reader.

The driver reads the topic's archive manifest (and one footer per distinct
schema) through Spark's Hadoop file system, in the JVM: the session's S3A
settings (``spark.hadoop.fs.s3a.*``, per-bucket ones included) are the only
configuration, as for any ``spark.read.parquet("s3a://...")``. ``archive_plan``
cuts the history into archived segments and the node's part; the archived
files are read like a volume's (``topic_parquet``: pruned by the manifest's
index and time spans, ``_index`` from the file name plus the Parquet row index,
``_partition`` from the ``partition=`` directory), the node's part by its usual
path (its volume's files in the same scan, or the JVM url reader), and the two
are one DataFrame.

When the JVM url reader cannot take the topic's columns, the read goes through
``format("plateau")`` with the archive's S3 settings taken from the same S3A
settings (``s3_settings``), as ``read_stream`` does for streams.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from plateau.protocol.archive import ArchiveManifest, ArchiveUrl, manifest_key
from plateau.spark.archive_plan import (
    ArchiveListing,
    archived,
    footer_schema,
    on_node,
    read_manifest,
)
from plateau.spark.merge import SchemaConflict, merge_schemas, wanted
from plateau.spark.options import ArchiveS3, OptionError, SourceOptions, parse
from plateau.spark.path_listing import VolumeListing, files_schema
from plateau.spark.plan import batch_ranges, chosen, plan
from plateau.spark.topic_parquet import only_parquet, parquet_frame
from plateau.spark.url_jvm import python_read, refused, url_frame
from plateau.spark.url_reading import RemoteListing

log = logging.getLogger(__name__)

FOOTER_READ = 16 * 1024  # one ranged GET holds most footers (py4j copies it slowly)


class HadoopFiles:
    """Objects read through the session's Hadoop file systems (S3A for ``s3a://``)."""

    def __init__(self, spark: SparkSession) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None, "read_topic with 'archive' needs a classic (non-Connect) session"
        self.jvm = jvm
        self.conf = spark._jsparkSession.sessionState().newHadoopConf()

    def _open(self, url: str) -> tuple[Any, Any]:
        path = self.jvm.org.apache.hadoop.fs.Path(url)
        return path, path.getFileSystem(self.conf)

    def read(self, url: str) -> bytes | None:
        """The whole object (``None``: there is none)."""
        path, fs = self._open(url)
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def tail(self, url: str, size: int, length: int) -> bytes:
        """The last ``length`` bytes of an object of ``size`` bytes."""
        path, fs = self._open(url)
        stream = fs.open(path)
        try:
            length = min(length, size)
            stream.seek(size - length)
            return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(stream, length))
        finally:
            stream.close()

    def schema(self, url: str, size: int) -> pa.Schema:
        tail = self.tail(url, size, FOOTER_READ)
        try:
            return footer_schema(tail, url)
        except ValueError as e:  # a footer larger than the first read
            return footer_schema(self.tail(url, size, int(e.args[0])), url)


def load_manifest(files: HadoopFiles, root: str, topic: str) -> ArchiveManifest:
    """The topic's archive manifest; none yet (nothing uploaded) is an empty one."""
    url = f"{root}/{manifest_key(topic)}"

    def fetch() -> bytes | None:
        try:
            return files.read(url)
        except Exception as e:  # py4j wraps the JVM's exception: its message says what
            why = _java_message(e)
            raise OptionError(f"option 'archive': cannot read {url}: {why}") from None

    return read_manifest(fetch, url, topic)


def _java_message(e: Exception) -> str:
    text = str(e)
    for line in text.splitlines():
        if "Exception" in line:
            return line.strip()
    return text[-500:]


def read_with_archive(spark: SparkSession, raw: Mapping[str, Any]) -> DataFrame:
    options = parse(raw)
    assert options.archive is not None
    root = f"s3a://{options.archive}"
    files = HadoopFiles(spark)
    # the node first: a segment its retention deleted before this listing was archived
    # before that (archive.required), so the manifest read after it lists the segment
    node = VolumeListing(options) if options.path else RemoteListing(options)
    manifest = load_manifest(files, root, options.topic)
    listing = ArchiveListing(manifest, node, root, files.schema)
    pieces = plan(listing, batch_ranges(listing, options), options)
    picked = sorted(chosen(listing.spans(), options))
    schemas = listing.archived_schema([s for p in picked for s in listing.archived.get(p, [])])
    local = on_node(pieces)
    if isinstance(node, VolumeListing):
        only_parquet(options, {s.format or "" for s in pieces} | {node.format})
        read = [(s.file, s.format or "parquet") for s in local if s.file]
        if read:
            schemas.append(files_schema(read))
        data = _merged(schemas, listing, picked)
        return parquet_frame(spark, options, pieces, data)
    held = [p for p in picked if p in listing.node_spans()]
    samples = node.samples(held) if held else []
    data = _merged([*schemas, *samples], listing, picked)
    wanted(data, options)
    why = refused(spark, data, samples)
    if why is not None:
        given = {**raw, **python_settings(spark, options)}
        return python_read(spark, given, options, why)
    old = parquet_frame(spark, options, archived(pieces), data)
    if not local:
        return old
    return old.unionByName(url_frame(spark, options, local, data))


def _merged(schemas: list[pa.Schema], listing: ArchiveListing, picked: list[str]) -> pa.Schema:
    if not schemas:
        return listing.schema(picked)
    try:
        return merge_schemas(schemas)
    except SchemaConflict as e:
        raise OptionError(str(e)) from None


def s3_settings(spark: SparkSession, archive: str) -> ArchiveS3:
    """The S3A settings Spark would use for the archive's bucket, for pyarrow's S3 client.

    S3A's per-bucket settings (``fs.s3a.bucket.<bucket>.*``) win over the global ones,
    as in S3A itself. Keys left unset stay ``None``: the AWS environment then applies.
    """
    bucket = ArchiveUrl.parse(f"s3a://{archive}").bucket
    conf = HadoopFiles(spark).conf

    def get(name: str) -> str | None:
        value = conf.get(f"fs.s3a.bucket.{bucket}.{name}") or conf.get(f"fs.s3a.{name}")
        return str(value).strip() or None if value is not None else None

    endpoint = get("endpoint")
    if endpoint and "://" not in endpoint:
        ssl = (get("connection.ssl.enabled") or "true").lower() == "true"
        endpoint = f"{'https' if ssl else 'http'}://{endpoint}"
    return ArchiveS3(
        endpoint=endpoint,
        region=get("endpoint.region") or get("region"),
        path_style=(get("path.style.access") or "false").lower() == "true",
        access_key=get("access.key"),
        secret_key=get("secret.key"),
        session_token=get("session.token"),
    )


def python_settings(spark: SparkSession, options: SourceOptions) -> dict[str, str]:
    """``format("plateau")``'s ``archive.*`` options from the session's S3A settings
    (those the caller gave win)."""
    if options.archive is None:
        return {}
    s3 = s3_settings(spark, options.archive)
    given = options.archive_s3
    out = {
        "archive.endpoint": given.endpoint or s3.endpoint,
        "archive.region": given.region or s3.region,
        "archive.pathStyle": "true" if given.path_style or s3.path_style else None,
        "archive.accessKey": given.access_key or s3.access_key,
        "archive.secretKey": given.secret_key or s3.secret_key,
        "archive.sessionToken": given.session_token or s3.session_token,
    }
    return {k: v for k, v in out.items() if v}
