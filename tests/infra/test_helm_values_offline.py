"""infra/helm/airflow-values.yaml, checked without Helm or a cluster.

The official chart validates its values against its own schema at install time; that schema is
not available offline here, so these tests check what toolrl relies on: the executor and the
triggerer (the Ray wait defers), the image and Airflow version matching the Airflow image, and
that the environment entries the chart templates into every pod are valid Kubernetes EnvVars.
"""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import yaml
from infra_files import DOCKER_DIR


def test_helm_values_use_a_supported_executor_and_enable_the_triggerer_offline(
    helm_values: dict[str, Any],
) -> None:
    assert helm_values["executor"] in {"KubernetesExecutor", "CeleryExecutor"}
    assert helm_values["triggerer"]["enabled"] is True, "the Ray job wait is deferrable"
    assert helm_values["dagProcessor"]["enabled"] is True
    if helm_values["executor"] == "CeleryExecutor":
        assert helm_values["redis"]["enabled"] is True


def test_helm_values_match_the_airflow_image_offline(helm_values: dict[str, Any]) -> None:
    pinned = re.search(
        r"^apache-airflow==(\S+)",
        (DOCKER_DIR / "requirements-airflow.txt").read_text(encoding="utf-8"),
        re.MULTILINE,
    )
    assert pinned
    assert helm_values["airflowVersion"] == pinned.group(1)
    image = helm_values["images"]["airflow"]
    assert image["repository"] == helm_values["defaultAirflowRepository"]
    assert image["tag"] == helm_values["defaultAirflowTag"] != "latest"


def test_helm_env_entries_are_valid_kubernetes_env_vars_offline(
    helm_values: dict[str, Any],
) -> None:
    """The chart copies `env`, `secret` and `extraEnv` into every Airflow container."""
    env = list(helm_values["env"]) + yaml.safe_load(helm_values["extraEnv"])
    for entry in helm_values["secret"]:
        assert set(entry) == {"envName", "secretName", "secretKey"}, entry
        ref = {"name": entry["secretName"], "key": entry["secretKey"]}
        env.append({"name": entry["envName"], "valueFrom": {"secretKeyRef": ref}})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "airflow-env-probe", "namespace": "toolrl"},
        "spec": {"containers": [{"name": "airflow", "image": "toolrl-airflow:0.1.0", "env": env}]},
    }
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    for entry in env:
        if re.search(
            r"PASSWORD|SECRET|TOKEN|API_KEY|_CONN_TOOLRL_(RAY|MLFLOW|S3|MCP|JUDGE)", entry["name"]
        ):
            assert "valueFrom" in entry, f"{entry['name']} carries credentials: use a Secret"
