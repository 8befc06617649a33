"""Writes a single-layer OCI image archive from a directory, with the Python
standard library only (no daemon, no registry). Used for the tiny local pause
image; `ctr -n k8s.io images import` reads the result.

    python3 oci_archive.py ROOTFS_DIR OUT.tar NAME [--entrypoint /pause] [--user 65535:65535]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path


def _layer(rootfs: Path) -> bytes:
    """A reproducible tar of rootfs: sorted names, zero mtimes, root owner."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(rootfs.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isfile():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}"


def write_archive(rootfs: Path, out: Path, name: str, entrypoint: list[str], user: str) -> None:
    raw = _layer(rootfs)
    gz = gzip.compress(raw, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": entrypoint, "User": user, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(raw).hexdigest()}"]},
        "history": [{"created_by": "cluster/runtime/oci_archive.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        layout = json.dumps({"imageLayoutVersion": "1.0.0"}).encode()
        info = tarfile.TarInfo("oci-layout")
        info.size = len(layout)
        tar.addfile(info, io.BytesIO(layout))
        layer_digest = _blob(tar, gz)
        config_digest = _blob(tar, config_bytes)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": len(config_bytes),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digest,
                    "size": len(gz),
                }
            ],
        }
        manifest_bytes = json.dumps(manifest, sort_keys=True).encode()
        manifest_digest = _blob(tar, manifest_bytes)
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": manifest_digest,
                    "size": len(manifest_bytes),
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
        index_bytes = json.dumps(index, sort_keys=True).encode()
        info = tarfile.TarInfo("index.json")
        info.size = len(index_bytes)
        tar.addfile(info, io.BytesIO(index_bytes))
    tmp.replace(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("rootfs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("name")
    parser.add_argument("--entrypoint", default="/pause")
    parser.add_argument("--user", default="65535:65535")
    args = parser.parse_args()
    write_archive(args.rootfs, args.out, args.name, [args.entrypoint], args.user)


if __name__ == "__main__":
    main()
