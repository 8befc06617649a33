"""testkit.controlplane: the launch data tools/cluster and testkit.kubeapi share."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml

from testkit.controlplane import configs, flags, objects
from testkit.controlplane.layout import Layout


def _layout(gateway: str | None = "10.244.0.1") -> Layout:
    return Layout(
        data=Path("/d"),
        run=Path("/r"),
        bin=Path("/b"),
        api_port=16443,
        etcd_port=12379,
        etcd_peer_port=12380,
        gateway=gateway,
    )


def test_containerd_config_is_toml_that_reads_back_as_written() -> None:
    doc = configs.containerd(_layout())
    text = configs.dump_toml(doc)
    assert tomllib.loads(text) == json.loads(json.dumps(doc))
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]' in text


def test_toml_refuses_what_it_cannot_write() -> None:
    with pytest.raises(TypeError, match="float"):
        configs.dump_toml({"a": 1.5})


def test_only_a_cluster_with_a_bridge_advertises_its_api() -> None:
    assert "--advertise-address=10.244.0.1" in flags.apiserver(_layout())
    assert not any(a.startswith("--advertise") for a in flags.apiserver(_layout(None)))
    etcd = flags.etcd(_layout())
    assert etcd[etcd.index("--listen-client-urls") + 1] == "http://127.0.0.1:12379"


def test_bootstrap_objects_are_distinct_documents() -> None:
    docs = list(yaml.safe_load_all(configs.dump_yaml_all(objects.bootstrap(_layout()))))
    keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in docs]
    assert len(keys) == len(set(keys)) == 16
