"""``plateau spark-conf --mode url``'s settings from the objects the API server returns
(no API server: tests/integration/test_spark_conf_cli.py runs the command against one)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from plateau.spark import kubeconf

NODE: dict[str, Any] = {
    "metadata": {"name": "a", "namespace": "ml"},
    "status": {"endpoint": "http://plateau-a.ml.svc:3030", "tokenSecret": "plateau-a-token"},
}


def test_access_follows_the_status_and_falls_back_to_the_operators_names() -> None:
    a = kubeconf.access_from_objects("ml", "a", NODE, statefulset_exists=False)
    assert (a.url, a.secret, a.key) == ("http://plateau-a.ml.svc:3030", "plateau-a-token",
                                        "readToken")  # fmt: skip
    other = {"status": {"endpoint": "http://x.ml.svc:3030", "tokenSecret": "team-tokens"}}
    a = kubeconf.access_from_objects("ml", "b", other, statefulset_exists=False)
    assert (a.url, a.secret) == ("http://x.ml.svc:3030", "team-tokens")
    a = kubeconf.access_from_objects("ml", "new", {"spec": {}}, statefulset_exists=False)
    assert (a.url, a.secret) == ("http://plateau-new.ml.svc:3030", "plateau-new-token")


@pytest.mark.parametrize(
    ("exists", "message"), [(True, "needs a PlateauNode"), (False, "no PlateauNode named 'a'")]
)
def test_url_mode_needs_a_plateau_node(exists: bool, message: str) -> None:
    with pytest.raises(kubeconf.SparkConfError, match=message):
        kubeconf.access_from_objects("ml", "a", None, statefulset_exists=exists)


def test_every_format_names_the_secret_and_the_url() -> None:
    a = kubeconf.access_from_objects("ml", "a", NODE, statefulset_exists=False)
    conf = dict(
        line.removeprefix("--conf ").split("=", 1)
        for line in kubeconf.render_url(a, "conf").splitlines()
    )
    expected = {
        "spark.kubernetes.namespace": "ml",
        "spark.kubernetes.driver.secretKeyRef.PLATEAU_TOKEN": "plateau-a-token:readToken",
        "spark.kubernetes.executor.secretKeyRef.PLATEAU_TOKEN": "plateau-a-token:readToken",
        "spark.kubernetes.driverEnv.PLATEAU_URL": "http://plateau-a.ml.svc:3030",
    }
    assert conf == expected
    text = kubeconf.render_url(a, "properties")
    props = dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
    assert props == expected and "# read token: key readToken of Secret plateau-a-token" in text
    spec = yaml.safe_load(kubeconf.render_url(a, "sparkapplication"))["spec"]
    ref = {"name": "plateau-a-token", "key": "readToken"}
    token = {"name": "PLATEAU_TOKEN", "valueFrom": {"secretKeyRef": ref}}
    assert spec == {
        "driver": {"env": [{"name": "PLATEAU_URL", "value": "http://plateau-a.ml.svc:3030"},
                           token]},
        "executor": {"env": [token]},
    }  # fmt: skip
    with pytest.raises(kubeconf.SparkConfError, match="--format"):
        kubeconf.render_url(a, "json")
